"""fa bench: time programs on inputs, side by side, into a results file that survives a crash.

For each input: it is flushed to disk, then each program runs once to warm up, then rounds in
which every program runs once, in turn, each round starting one program later (A B, B A, ...),
so that the order of --program options cannot change the table. `repeats` rounds if given;
otherwise as many as it takes (MIN_ROUNDS to MAX_ROUNDS) for every program's whole-process
median to be known within `precision` (its 95% confidence interval, from order statistics):
on an H100 single runs spread over about +-10% (the driver's start-up), so five runs leave a
median uncertain by more than the 3% that two programs may differ by, and about 40 do not.
Every run starts from the same state (settle): no output left by the run before, whose removal a program would
pay for (7 ms for 218 MB still in the page cache, 50 ms once written to disk, on the H100's
host), and nothing left to write back that could compete with it. A program given twice is an
A/A control row: the spread that ratios between programs must exceed.
Per (program, input): the median of the wall time with its 95% interval and the spread, the
medians of the program's own FA_TIMING stages, TFLOP/s (4*B*N*N*d) over the kernel time and over the whole process, the
max error of the last run's output (sampled verification), and where it ran: device, host,
program build (kernel and arch), date and command line.

The results file (records.py) is rewritten atomically after each input, so a crash mid-run
loses nothing already measured, and an existing file is extended, not replaced.
"""
from __future__ import annotations

import math
import os
import statistics
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .. import locations
from ..cases.format import AttentionInput, open_output
from ..cases.suite import Target
from ..judge import verify
from ..judge.tool_logs import gpu_kind
from ..programs.devices import device_of_run
from ..programs.programs import Launcher, Program, run
from ..report import records
from . import judge_column


MIN_ROUNDS = 5
MAX_ROUNDS = 60
DEFAULT_PRECISION = 0.02  # half the 95% interval of a median, over the median


@dataclass
class BenchPlan:
    programs: list[Program]
    targets: list[Target]
    repeats: int | None = None  # timed rounds; None: until every median is known within `precision`
    precision: float = DEFAULT_PRECISION
    check: verify.RowCheck = verify.RowCheck(sample=verify.DEFAULT_SAMPLE_ROWS)
    tol: float = verify.COURSE_TOL  # `passed` means every checked value within this
    launcher: Launcher | None = None
    env: dict[str, str] | None = None
    label: str | None = None  # names this set of runs (e.g. the partition) in comparisons
    kind: str = "bench"  # the command whose records these are (fa ladder and fa sweep measure too)
    fields: dict = field(default_factory=dict)  # added to every record (a ladder step, a sweep's Br and Bc)


def distinct_names(programs: list[Program]) -> list[Program]:
    """Programs of one file name at different paths (two builds' bin/fa-cuda) named by as many of
    their absolute path's last parts as tell them apart (base/bin/fa-cuda, main/bin/fa-cuda), so
    that the table and fa compare keep them apart (unless --label names them all alike); a program
    given twice (the A/A control) keeps its name."""
    paths: dict[str, set[Path]] = {}
    for prog in programs:
        paths.setdefault(prog.name, set()).add(prog.path)
    renamed = {}
    for name, group in paths.items():
        if len(group) < 2:
            continue
        for last in range(2, max(len(p.parts) for p in group) + 1):
            names = {p: str(p) if last >= len(p.parts) else str(Path(*p.parts[-last:])) for p in group}
            if len(set(names.values())) == len(group):
                break
        renamed.update({(name, p): n for p, n in names.items()})
    return [dataclasses.replace(p, name=renamed[p.name, p.path]) if (p.name, p.path) in renamed else p
            for p in programs]


def flush_to_disk(path: Path) -> None:
    """Write a freshly generated input back to disk before it is timed: otherwise the first
    program to run pays the page cache's writeback (0.49 s against 0.38 s on an H100 run)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return  # a program's own error will say what is wrong with the input
    try:
        os.fsync(fd)
    except OSError:
        pass  # a file system without fsync: nothing to flush
    finally:
        os.close(fd)


def settle(output: Path) -> None:
    """Before a run: the last run's output removed and everything written back."""
    output.unlink(missing_ok=True)
    os.sync()


def median_interval(values: list[float], confidence: float = 0.95) -> tuple[float, float]:
    """A confidence interval of the median that assumes no distribution: the order statistics
    x(k) and x(n+1-k), k the largest with P(Binomial(n, 1/2) < k) <= (1 - confidence) / 2, and
    at least 1 (for n < 6 that is the whole range, and covers less than `confidence`)."""
    xs = sorted(values)
    n, k, below = len(xs), 1, 0.0
    for j in range(n):
        below += math.comb(n, j) / 2 ** n
        if below > (1 - confidence) / 2:
            break
        k = j + 1
    return xs[k - 1], xs[n - k]


def uncertainty(values: list[float]) -> float:
    """Half the median's 95% interval, over the median."""
    lo, hi = median_interval(values)
    return (hi - lo) / 2 / statistics.median(values)


class BenchOutlook:
    """What a benchmark will take, where a program runs on the CPU (the course's large inputs take
    it minutes a run): said before it starts, and after each such program's warm-up run, from its
    time, how many more runs the median needs and how long they take; left() for the progress."""

    LONG_S = 10.0  # a warm-up run this long is said, with what the rest takes
    BIG_FLOPS = 5e10  # an input this large takes a CPU seconds a run: said before any run

    def __init__(self, programs: list[Program], targets: list[Target], repeats: int | None, say):
        self.say, self.repeats = say, repeats
        self.cpu = [p for p in programs if gpu_kind(p) == "cpu"]
        self.rate: float | None = None  # seconds a FLOP, from the CPU programs' warm-ups
        self.left_flops = sum(t.shape.flops for t in targets) * len(self.cpu)
        self.largest_flops = max((t.shape.flops for t in targets), default=0)
        self.runs_each = (repeats or MIN_ROUNDS) + 1
        self.current_s: dict[str, float] = {}  # each CPU program's timed runs left on the input in hand

    def up_front(self) -> str | None:
        if not self.cpu or self.largest_flops < self.BIG_FLOPS:
            return None
        return (f"{', '.join(p.name for p in self.cpu)} runs on the CPU, where inputs of this size take from seconds "
                f"to minutes a run; fa bench runs each input {self.runs_each} times at least (a warm-up, then "
                f"{'--repeat' if self.repeats else f'at least {MIN_ROUNDS} timed'}): after the warm-up it says what "
                f"the rest will take (--repeat 1 for one timed run, or bench a GPU program)")

    def warmed(self, program: Program, target: Target, wall_s: float, plan: BenchPlan) -> None:
        if program not in self.cpu:
            return
        self.rate = wall_s / max(target.shape.flops, 1)
        self.left_flops -= target.shape.flops
        more = self.repeats or MIN_ROUNDS
        self.current_s[program.name] = more * wall_s
        if wall_s >= self.LONG_S:
            self.say(f"{program.name} on {target.name}: the warm-up run took {wall_s:.1f} s on the CPU; "
                     f"{more} more{'' if self.repeats else ' at least'} for its median: about {more * wall_s / 60:.1f} "
                     "min more (--repeat 1 for one)")

    def timed(self, program: Program, wall_s: float) -> None:
        """A timed run done: less left on the input in hand (at least its minimum of runs)."""
        if program.name in self.current_s:
            self.current_s[program.name] = max(0.0, self.current_s[program.name] - wall_s)

    def left(self) -> float | None:
        """Seconds of the CPU programs' runs still to come (None until a warm-up has run)."""
        if self.rate is None:
            return None
        return self.rate * self.left_flops * self.runs_each + sum(self.current_s.values())


def enough_rounds(plan: BenchPlan, walls: list[list[float]], errors: list[str | None], rounds: int) -> bool:
    """After `rounds` timed rounds (0: the warm-up only): `repeats` of them, or every median known
    within `precision`; at once if every program failed."""
    timed = [w for w, e in zip(walls, errors) if not e]
    if not timed:
        return True  # every program failed
    if plan.repeats is not None:
        return rounds >= plan.repeats
    if rounds < MIN_ROUNDS:
        return False
    return rounds >= MAX_ROUNDS or all(uncertainty(w) <= plan.precision for w in timed)


def order_of(repeat: int, count: int) -> list[int]:
    """The programs' order in one repeat: each repeat starts one program later (A B, B A, A B
    ...), so no program is always first after the input was read or the GPU idled."""
    return [(repeat + i) % count for i in range(count)]


def measure_side_by_side(plan: BenchPlan, programs: list[Program], target: Target, workdir: Path,
                         controls: frozenset[int] = frozenset(), outlook: BenchOutlook | None = None) -> list[dict]:
    """One warm-up run of each program, then rounds in which every program runs once,
    interleaved (order_of), until enough_rounds; one result record per program. `controls`: the
    indices of programs that repeat an earlier one (an A/A row, marked `control` in its record)."""
    flush_to_disk(target.input_path)
    count = len(programs)
    outs = [workdir / f"{target.name}.{i}.out" for i in range(count)]
    walls: list[list[float]] = [[] for _ in programs]
    stages: list[dict[str, list[float]]] = [{} for _ in programs]
    builds: list[dict] = [{} for _ in programs]
    logs = [""] * count  # the last timed run's stderr: its launch log, where it has one
    errors: list[str | None] = [None] * count
    repeat = 0  # round 0 is the warm-up: page cache, driver, JIT
    while True:
        for i in order_of(repeat, count):
            if errors[i]:
                continue
            settle(outs[i])
            result = run(programs[i], target.input_path, outs[i], plan.launcher, env=plan.env)
            if result.error:
                errors[i] = result.error
            elif repeat == 0 and outlook is not None:
                outlook.warmed(programs[i], target, result.wall_s, plan)
            elif repeat > 0:
                if outlook is not None:
                    outlook.timed(programs[i], result.wall_s)
                walls[i].append(result.wall_s)
                builds[i], logs[i] = result.build, result.stderr
                for key, value in result.timing.items():
                    stages[i].setdefault(key, []).append(value)
        if enough_rounds(plan, walls, errors, repeat):
            break
        repeat += 1
    return [summarize(plan, programs[i], target, outs[i], walls[i], stages[i], builds[i], errors[i], i in controls,
                      logs[i]) for i in range(count)]


def summarize(plan: BenchPlan, program: Program, target: Target, out_path: Path, walls: list[float],
              stages: dict[str, list[float]], build: dict, error: str | None, control: bool, log: str = "") -> dict:
    """One program's runs on one input as a results record: medians, spread, TFLOP/s, error, and
    for a student's hw4.cu or hw4.hip under its judge's layer the estimate of the judge's time
    (judge_column)."""
    fields = dict(plan.fields, control=True) if control else plan.fields
    record = records.new_record(program, target, plan.label, error, plan.kind, plan.launcher,
                                device=device_of_run(build), time_limit=target.time_limit,
                                repeats=len(walls), build=build, **fields)
    if error:
        return record
    timing = {k: statistics.median(v) for k, v in stages.items()}
    wall = statistics.median(walls)
    record.update(
        wall_s={"median": wall, "ci95": list(median_interval(walls)), "min": min(walls), "max": max(walls),
                "all": walls},
        timing=timing,
        tflops_process=target.shape.flops / wall / 1e12,
        tflops_kernel=target.shape.flops / timing["kernel"] / 1e12 if timing.get("kernel") else None,
        **judge_column.record_fields(target.shape, wall, log, program),
    )
    check = verify.against_reference(AttentionInput(target.input_path), open_output(out_path, target.shape),
                                     plan.tol, plan.check)
    record.update(max_err=check.max_err, verify_mode=check.mode, passed=check.passed)
    return record


def measure(plan: BenchPlan, program: Program, target: Target, workdir: Path) -> dict:
    """Warm-up plus timed runs of one program on one input (enough_rounds); one result record."""
    return measure_side_by_side(plan, [program], target, workdir)[0]


def controls_of(programs: list[Program]) -> frozenset[int]:
    """Programs given again (the same file, the same environment): A/A control rows."""
    seen, controls = set(), set()
    for i, p in enumerate(programs):
        key = str(Path(p.path).resolve())
        if key in seen:
            controls.add(i)
        seen.add(key)
    return frozenset(controls)


def control_ratios(records_: list[dict]) -> list[str]:
    """One line per A/A control row: its whole-process median over the first run of the same
    program on the same input. Ratios between other rows mean something only beyond this."""
    lines = []
    for r in records_:
        if not r.get("control") or r.get("error"):
            continue
        first = next((o for o in records_ if o["input"] == r["input"] and o["program_path"] == r["program_path"]
                      and not o.get("control") and not o.get("error")), None)
        if first:
            ratio = r["wall_s"]["median"] / first["wall_s"]["median"]
            known = " and ".join(f"+-{uncertainty(x['wall_s']['all']):.1%}" for x in (r, first))
            lines.append(f"A/A control {r['program']} on {r['input']}: whole process {r['wall_s']['median']:.3f} s "
                         f"against {first['wall_s']['median']:.3f} s, ratio {ratio:.3f} "
                         f"({r['repeats']} runs each; medians known within {known}, 95%)")
    return lines


def run_bench(plan: BenchPlan, results: Path, progress: Callable[[int], None] | None = None,
              workdir: Path | None = None, outlook: BenchOutlook | None = None) -> list[dict]:
    """Measure every (input, program) in turn; outputs go to workdir (shared with compute nodes
    when a launcher runs the programs elsewhere) or to a temporary directory. `outlook` hears each
    warm-up run (what the rest will take)."""
    kept = records.load(results)
    new = []
    controls = controls_of(plan.programs)
    with locations.scratch("bench", workdir) as tmp:
        for target in plan.targets:
            new += measure_side_by_side(plan, plan.programs, target, Path(tmp), controls, outlook=outlook)
            records.save(results, kept + new)
            if progress:
                progress(len(plan.programs))
    return new
