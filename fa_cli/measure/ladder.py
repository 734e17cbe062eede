"""fa ladder: the homework kernel's optimizations one step at a time, each run, verified and timed.

The steps are kernels of the programs themselves (src_common/ladder.h, chosen by FA_KERNEL),
so every step runs through the same pipeline, on the same input, and is judged the same way:
kernel time (the program's FA_TIMING kernel stage, median of the repeats), TFLOP/s, the
speed-up over the step before, and the max error against float64. With profiling, each step
also gets the course's metrics from `fa profile` (its kernel that takes most time).

The steps are the registry's rows that have a step (src_common/registry.h, read with
`PROGRAM --kernels`): on NVIDIA (cuda) naive -> warp per row -> shared-memory tiles -> padded K
-> Br = 16 -> the tiled homework kernel -> register blocking (simt) -> tensor cores; on HIP (hip,
hip-cuda) the same first five, then the tiled kernel with Bc = 32 and the AMD step, Bc widened to
the 64-lane wavefront (on an NVIDIA GPU its rows span two warps, so there it measures the AMD
shape, not an AMD GPU), then register blocking.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .. import locations
from ..cases.suite import Target
from ..errors import FaError
from ..programs import registry
from ..programs.programs import Program
from . import bench, profile


@dataclass(frozen=True)
class Step:
    name: str
    idea: str  # what it changes from the step before
    env: dict[str, str]


def steps_for(program: Program) -> list[Step]:
    """The ladder of a built GPU program of fa's, from its kernel registry."""
    rows = registry.ladder(registry.require(program.path, program.name))
    if not rows:
        raise FaError(f"{program.name}'s kernels have no ladder steps")
    return [Step(r.rung.label, r.rung.idea, {"FA_KERNEL": r.family, **r.rung.env}) for r in rows]


def listing(steps: list[Step]) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the steps alone (fa ladder --list)."""
    return (["step", "name", "settings", "what changes"],
            [[str(i), s.name, " ".join(f"{k}={v}" for k, v in s.env.items()), s.idea] for i, s in enumerate(steps, 1)])


def run_ladder(program: Program, target: Target, plan_args: dict, steps: list[Step], with_profile: bool = False,
               profiler: str = "ncu", workdir: Path | None = None, progress=None) -> list[dict]:
    """One record per step (kind "ladder"): bench's figures plus step, name, idea, speedup and,
    with profiling, the course's metrics of the step's main kernel."""
    records = []
    for i, step in enumerate(steps, 1):
        plan = bench.BenchPlan([program], [target], env=step.env, kind="ladder",
                               fields={"step": i, "step_name": step.name, "idea": step.idea, "env": step.env},
                               **plan_args)
        with locations.scratch("ladder", workdir) as work:
            record = bench.measure(plan, program, target, Path(work))
        if with_profile and not record.get("error"):
            kernels, _ = profile.profile(program, target, profiler, launcher=plan.launcher, workdir=workdir,
                                         env=step.env)
            main = max(kernels, key=lambda k: k.time_s)
            record["profile"] = {"kernel": main.kernel, "time_s": main.time_s, "metrics": main.metrics,
                                 "profiler": profiler}
        records.append(record)
        if progress:
            progress(1)
    add_speedups(records)
    return records


def add_speedups(records: list[dict]) -> None:
    """Each step's kernel speed-up over the last step before it with a kernel time, and over the
    first such step (None for a step with no kernel time: it failed)."""
    times = [(r.get("timing") or {}).get("kernel") for r in records]
    first = next((t for t in times if t), None)
    previous = None
    for r, t in zip(records, times):
        r["speedup"] = previous / t if previous and t else None
        r["speedup_total"] = first / t if first and t else None
        previous = t or previous


def error_reason(error) -> str:
    """An ERROR row's reason, one line: the error's last non-empty line (a program's stderr ends with it)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[-1] if lines else "failed (no message)"


def rows(records: list[dict]) -> tuple[list[str], list[list[str]]]:
    """Header and rows of a ladder table: one row per step."""
    header = ["step", "what changes", "kernel ms", "TFLOP/s", "speed-up", "vs step 1", "max err", "verdict"]
    with_profile = any("profile" in r for r in records)
    if with_profile:
        header += ["occupancy %", "SM eff. %", "shared ld conflicts", "global load GB/s"]
    body = []
    for r in records:
        kernel = (r.get("timing") or {}).get("kernel")
        ok = not r.get("error")
        row = [f"{r['step']} {r['step_name']}", r["idea"],
               f"{kernel * 1e3:.4g}" if ok and kernel else "-",
               f"{r['tflops_kernel']:.3g}" if ok and r.get("tflops_kernel") else "-",
               f"{r['speedup']:.2f}x" if r.get("speedup") else "-",
               f"{r['speedup_total']:.1f}x" if r.get("speedup_total") else "-",
               f"{r['max_err']:.1e}" if ok and r.get("max_err") is not None else "-",
               ("PASS" if r.get("passed") else "WRONG") if ok else f"ERROR: {error_reason(r['error'])}"]
        if with_profile:
            m = r.get("profile", {}).get("metrics", {})
            row += [f"{m['achieved occupancy']:.1f}" if "achieved occupancy" in m else "-",
                    f"{m['SM efficiency']:.1f}" if "SM efficiency" in m else "-",
                    f"{m['shared ld conflicts']:.3g}" if "shared ld conflicts" in m else "-",
                    f"{m['global load'] / 1e9:.0f}" if "global load" in m else "-"]
        body.append(row)
    return header, body
