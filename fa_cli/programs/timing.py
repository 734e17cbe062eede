"""The fa-timing line: one contract between the programs and fa.

With FA_TIMING=1 a program prints one line on stderr,

    fa-timing: init=S read=S h2d=S kernel=S d2h=S write=S total=S impl=NAME arch=ARCH device=NAME

seconds per stage (stages that overlap in a streamed pipeline are summed per stage); impl is the
kernel that ran, arch and device where it ran (spaces in the device name written as '_'). The
stages are declared here and once in C++ (src_common/host/timing.h, kStages); fa's programs,
the torch program and the `fa init` starter print it, and this module is the one parser (fa run,
bench and compare through programs.run, and scripts/startup_floor.py). The line is optional for
a student's program: without it fa has only the whole process's wall time.

A student's hw4.cu or hw4.hip built under its judge's layer (src_cuda/launch_log.h) adds, at
exit, one line per kernel and launch shape: what its launches asked and their GPU time here,

    fa-launch: launches=N untimed=N ms=MS grid=XxYxZ block=XxYxZ smem=BYTES regs=N [error=NAME] kernel=NAME
    fa-launch: gpu sms=N smem_sm=BYTES regs_sm=N threads_sm=N blocks_sm=N   (the GPU at hand's SM)

read by `launches` below for the estimate of the judge's time (fa_cli/measure/judge_time.py) and
for a kernel's fault the program never checked (error=, judge/launch_errors.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field

PREFIX = "fa-timing:"
LAUNCH_PREFIX = "fa-launch:"
STAGES = ("init", "read", "h2d", "kernel", "d2h", "write", "total")
FACTS = ("impl", "arch", "device")


@dataclass
class TimingLine:
    seconds: dict[str, float] = field(default_factory=dict)  # stage -> seconds
    facts: dict[str, str] = field(default_factory=dict)      # impl, arch, device
    problem: str | None = None  # a line that breaks the contract: what is wrong with it


def is_timing_line(line: str) -> bool:
    """fa's own lines (timing and launches), never the program's words."""
    return line.startswith(PREFIX) or line.startswith(LAUNCH_PREFIX)


def parse(stderr: str) -> TimingLine:
    """The last fa-timing line of a program's stderr; an empty TimingLine where there is none.
    A line that breaks the contract (a stage missing or not a number, an unknown key) gives what
    it could read and says what is wrong in `problem`."""
    lines = [l for l in stderr.splitlines() if l.startswith(PREFIX)]
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


@dataclass(frozen=True)
class Launch:
    """One kernel's launches of one shape, as the launch log adds them up."""
    kernel: str
    launches: int
    untimed: int
    ms: float  # their GPU time here, summed
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    smem: int  # bytes a block, static and dynamic
    regs: int  # registers a thread (this build's)
    error: str = ""  # the CUDA error a launch's end was read with (a kernel's fault), "" where none

    @property
    def blocks(self) -> int:
        return self.grid[0] * self.grid[1] * self.grid[2]

    @property
    def threads(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]


@dataclass(frozen=True)
class SmLimits:
    """What one SM of a GPU holds, and how many it has."""
    sms: int
    smem_sm: int
    regs_sm: int
    threads_sm: int
    blocks_sm: int


def gpu_limits(stderr: str) -> SmLimits | None:
    """The launch log's line for the GPU the program ran on, or None."""
    for line in stderr.splitlines():
        if line.startswith(LAUNCH_PREFIX + " gpu "):
            try:
                fields = dict(item.split("=", 1) for item in line[len(LAUNCH_PREFIX) + 5:].split())
                return SmLimits(*(int(fields[k]) for k in ("sms", "smem_sm", "regs_sm", "threads_sm", "blocks_sm")))
            except (KeyError, ValueError):
                return None
    return None


def launches(stderr: str) -> list[Launch]:
    """The fa-launch lines of a program's stderr (none where it printed none); a line that
    does not read whole is left out."""
    found = []
    for line in stderr.splitlines():
        if not line.startswith(LAUNCH_PREFIX) or line.startswith(LAUNCH_PREFIX + " gpu "):
            continue
        head, sep, kernel = line[len(LAUNCH_PREFIX):].partition(" kernel=")
        try:
            fields = dict(item.split("=", 1) for item in head.split())
            found.append(Launch(kernel.strip(), int(fields["launches"]), int(fields["untimed"]), float(fields["ms"]),
                                _dims(fields["grid"]), _dims(fields["block"]), int(fields["smem"]), int(fields["regs"]),
                                fields.get("error", "")))
        except (KeyError, ValueError):
            continue
    return found


def _dims(text: str) -> tuple[int, int, int]:
    x, y, z = (int(v) for v in text.split("x"))
    return x, y, z
