"""fa bench: time programs on inputs, side by side, into a results file that survives a crash.

For each (program, input): one warm-up run, then `repeats` timed runs of the whole process;
the median and the spread of the wall time, the medians of the program's own FA_TIMING
stages, TFLOP/s (4*B*N*N*d) over the kernel time and over the whole process, the max error of
the last run's output (sampled verification), and where it ran: device, host, program build
(kernel and arch), date and command line.

The results file is one JSON document {"records": [...]}; it is rewritten atomically after
each record, so a crash mid-run loses nothing already measured, and an existing file is
extended, not replaced.
"""
from __future__ import annotations

import datetime as dt
import json
import platform
import statistics
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from . import system, verify
from .devices import describe_first
from .errors import FaError
from .format import AttentionInput, atomic_file, open_output
from .judge import Target
from .programs import Launcher, Program, run


def load_records(path: Path) -> list[dict]:
    """The records already in a results file; none where it is missing or not a regular file
    (a device such as /dev/null, or a FIFO, is written in place and never read)."""
    if not path.is_file():
        return []
    try:
        data = json.loads(path.read_text())
        return list(data["records"])
    except (ValueError, KeyError, TypeError):
        raise FaError(f"{path}: not a fa bench results file") from None


def save_records(path: Path, records: list[dict]) -> None:
    with atomic_file(path) as f:
        f.write(json.dumps({"records": records}, indent=1).encode() + b"\n")


def command_line() -> str:
    """The command that is running, as the user typed it (`fa ...`, however Python started it)."""
    first = "fa" if Path(sys.argv[0]).name in ("fa", "__main__.py") else sys.argv[0]
    return " ".join([first, *sys.argv[1:]])


def new_record(program: Program, target: Target, label: str | None, error: str | None, kind: str = "bench",
               launcher: Launcher | None = None, **fields) -> dict:
    """A results record, the one place they are made: what ran on what, where and when, and
    the machine it ran on (system.describe_where). `kind` says which command made it: bench,
    run, profile, ladder or sweep. A measured record adds wall_s, timing, tflops_process,
    tflops_kernel, max_err, verify_mode and passed (measure); a failed one keeps `error`."""
    record = {
        "kind": kind, "program": program.name, "program_path": str(program.path), "input": target.name,
        "shape": {"B": target.shape.B, "N": target.shape.N, "d": target.shape.d}, "flops": target.shape.flops,
        "label": label, "device": "unknown", "host": platform.node(), "build": {},
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "command": command_line(),
        "error": error, "system": system.describe_where(launcher),
    }
    record.update(fields)
    return record


@dataclass
class BenchPlan:
    programs: list[Program]
    targets: list[Target]
    repeats: int = 5
    check: verify.RowCheck = verify.RowCheck(sample=verify.DEFAULT_SAMPLE_ROWS)
    tol: float = verify.COURSE_TOL  # `passed` means every checked value within this
    launcher: Launcher | None = None
    env: dict[str, str] | None = None
    label: str | None = None  # names this set of runs (e.g. the partition) in comparisons
    kind: str = "bench"  # the command whose records these are (fa ladder and fa sweep measure too)
    fields: dict = field(default_factory=dict)  # added to every record (a ladder step, a sweep's Br and Bc)


def measure(plan: BenchPlan, program: Program, target: Target, workdir: Path) -> dict:
    """Warm-up plus `repeats` runs of one program on one input; one result record."""
    out_path = workdir / f"{target.name}.out"
    walls, stages, build, error = [], {}, {}, None
    for i in range(plan.repeats + 1):
        result = run(program, target.input_path, out_path, plan.launcher, env=plan.env)
        if result.error:
            error = result.error
            break
        if i == 0:
            continue  # warm-up: page cache, driver, JIT
        walls.append(result.wall_s)
        build = result.build
        for key, value in result.timing.items():
            stages.setdefault(key, []).append(value)
    record = new_record(program, target, plan.label, error, plan.kind, plan.launcher,
                        device=build["device"].replace("_", " ") if build.get("device") else describe_first(),
                        repeats=len(walls), build=build, **plan.fields)
    if error:
        return record
    timing = {k: statistics.median(v) for k, v in stages.items()}
    wall = statistics.median(walls)
    record.update(
        wall_s={"median": wall, "min": min(walls), "max": max(walls), "all": walls},
        timing=timing,
        tflops_process=target.shape.flops / wall / 1e12,
        tflops_kernel=target.shape.flops / timing["kernel"] / 1e12 if timing.get("kernel") else None,
    )
    check = verify.against_reference(AttentionInput(target.input_path), open_output(out_path, target.shape),
                                     plan.tol, plan.check)
    record.update(max_err=check.max_err, verify_mode=check.mode, passed=check.passed)
    return record


def run_bench(plan: BenchPlan, results: Path, progress: Callable[[int], None] | None = None,
              workdir: Path | None = None) -> list[dict]:
    """Measure every (input, program) in turn; outputs go to workdir (shared with compute nodes
    when a launcher runs the programs elsewhere) or to a temporary directory."""
    records = load_records(results)
    new = []
    with tempfile.TemporaryDirectory(prefix="fa-bench-", dir=workdir) as tmp:
        for target in plan.targets:
            for program in plan.programs:
                record = measure(plan, program, target, Path(tmp))
                records.append(record)
                new.append(record)
                save_records(results, records)
                if progress:
                    progress(1)
    return new
