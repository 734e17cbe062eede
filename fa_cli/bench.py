"""fa bench: time programs on inputs, side by side, into a results file that survives a crash.

For each (program, input): one warm-up run, then `repeats` timed runs of the whole process;
the median and the spread of the wall time, the medians of the program's own FA_TIMING
stages, TFLOP/s (4*B*N*N*d) over the kernel time and over the whole process, the max error of
the last run's output (sampled verification), and where it ran: device, host, program build
(kernel and arch), date and command line.

The results file (records.py) is rewritten atomically after each record, so a crash mid-run
loses nothing already measured, and an existing file is extended, not replaced.
"""
from __future__ import annotations

import statistics
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from . import records, verify
from .devices import describe_first
from .format import AttentionInput, open_output
from .programs import Launcher, Program, run
from .suite import Target


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
    record = records.new_record(program, target, plan.label, error, plan.kind, plan.launcher,
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
    kept = records.load(results)
    new = []
    with tempfile.TemporaryDirectory(prefix="fa-bench-", dir=workdir) as tmp:
        for target in plan.targets:
            for program in plan.programs:
                record = measure(plan, program, target, Path(tmp))
                new.append(record)
                records.save(results, kept + new)
                if progress:
                    progress(1)
    return new
