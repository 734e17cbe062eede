"""The fa-timing line: one contract between the programs and fa.

With FA_TIMING=1 a program prints one line on stderr,

    fa-timing: init=S read=S h2d=S kernel=S d2h=S write=S total=S impl=NAME arch=ARCH device=NAME

seconds per stage (stages that overlap in a streamed pipeline are summed per stage); impl is the
kernel that ran, arch and device where it ran (spaces in the device name written as '_'). The
stages are declared here and once in C++ (src_common/host/timing.h, kStages); fa's programs,
the torch program and the `fa init` starter print it, and this module is the one parser (fa run,
bench and compare through programs.run, and scripts/startup_floor.py). The line is optional for
a student's program: without it fa has only the whole process's wall time.
"""
from __future__ import annotations

from dataclasses import dataclass, field

PREFIX = "fa-timing:"
STAGES = ("init", "read", "h2d", "kernel", "d2h", "write", "total")
FACTS = ("impl", "arch", "device")


@dataclass
class TimingLine:
    seconds: dict[str, float] = field(default_factory=dict)  # stage -> seconds
    facts: dict[str, str] = field(default_factory=dict)      # impl, arch, device
    problem: str | None = None  # a line that breaks the contract: what is wrong with it


def is_timing_line(line: str) -> bool:
    return line.startswith(PREFIX)


def parse(stderr: str) -> TimingLine:
    """The last fa-timing line of a program's stderr; an empty TimingLine where there is none.
    A line that breaks the contract (a stage missing or not a number, an unknown key) gives what
    it could read and says what is wrong in `problem`."""
    lines = [l for l in stderr.splitlines() if is_timing_line(l)]
    if not lines:
        return TimingLine()
    found = TimingLine()
    unknown = []
    for item in lines[-1][len(PREFIX):].split():
        key, _, value = item.partition("=")
        if key in STAGES:
            try:
                found.seconds[key] = float(value)
            except ValueError:
                unknown.append(item)
        elif key in FACTS:
            found.facts[key] = value
        else:
            unknown.append(item)
    missing = [s for s in STAGES if s not in found.seconds]
    if missing or unknown:
        found.problem = "; ".join(filter(None, [f"missing {', '.join(missing)}" if missing else "",
                                                f"not understood: {' '.join(unknown)}" if unknown else ""]))
    return found


def format_line(seconds: dict[str, float], impl: str, arch: str, device: str) -> str:
    """The line as the programs print it (the torch program prints it with this)."""
    stages = " ".join(f"{s}={seconds.get(s, 0.0):.6f}" for s in STAGES)
    return f"{PREFIX} {stages} impl={impl} arch={arch} device={device.replace(' ', '_')}"
