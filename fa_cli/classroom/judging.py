"""Each submission of a class judged as `fa run` judges one program, and its record kept.

Builds first, on every core, confined (programs.sandbox in force) and before any GPU time: each
source built by fa's own builder into the class's cache, so that a build error is in the table
with its reason before a program runs. Then each source that built is judged by `fa run` (a
process of its own, one submission at a time, so that its times are its own) with the class's
cache (FA_CACHE: every input generated once and kept, every expected output computed once; the
sandbox shows each run only its own input, read-only), `--sandbox`, and `-o` its records. A
submission's record (CLASS/records/STUDENT.PLATFORM.json) is written whole or not at all, and
names what it holds for: the submission's sha256, the cases and fa's version; a re-run of fa
class judges again only what is missing or no longer holds.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import fa_cli

from .. import settings
from ..errors import ExitStatus, FaError
from ..files import atomic_file
from ..judge import cause, step_times
from ..programs import programs, sandbox
from ..programs.processes import run_tool
from ..report import records
from .submissions import PLATFORM, Submission

RECORDS = "records"
REPORTS = "reports"
SANITIZERS_AT_MOST = 4  # compute-sanitizer runs among the searches at once (sanitizers_at_once)
LOOKED_INTO_AT_MOST = 12  # searches sharing one GPU: more would leave each less than its budget counts on
WALL_MARGIN_S = 120  # a whole submission's run may take its cases' limits, twice, and this more


@dataclass(frozen=True)
class Task:
    submission: Submission
    source: Path

    @property
    def platform(self) -> str:
        return PLATFORM[self.source.suffix]

    @property
    def label(self) -> str:
        return f"{self.submission.student}.{self.platform}"


def record_path(class_folder: Path, task: Task) -> Path:
    return class_folder / RECORDS / f"{task.label}.json"


def kept_record(class_folder: Path, task: Task, cases: list[str], sandboxed: bool, whole: bool = True) -> dict | None:
    """The task's record where it holds for this submission, these cases, this fa and this
    sandbox, and is whole (a build error, or every case judged: not a run stopped, or one this
    machine could not make; whole=False: as it is); else None (to be judged)."""
    try:
        record = json.loads(record_path(class_folder, task).read_text())
    except (OSError, ValueError):
        return None
    wanted = dict(sha256=task.submission.digest, cases=cases, fa=fa_cli.__version__, sandboxed=sandboxed)
    return record if (is_whole(record) or not whole) and all(record.get(k) == v for k, v in wanted.items()) else None


def is_whole(record: dict) -> bool:
    """A build error, or every case of the record judged: not a run stopped (killed, interrupted),
    nor one this machine could not make."""
    return record.get("build_error") is not None or len(record.get("runs") or []) == len(record.get("cases") or [])


def workers(jobs: int) -> int:
    """Builds at once: `jobs`, or one a core where it is 0."""
    return jobs or cores()


def cores() -> int:
    """The cores this process may use (a Slurm job's or a container's share, not the machine's)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def looked_into_side_by_side(timed_side_by_side: int) -> int:
    """Students looked into at once, once every timed run is done: no run waits for a turn then,
    and the searches for a cause share the GPU; three for every 4 cores (each search is mostly one
    process on one core at a time), LOOKED_INTO_AT_MOST on one GPU, the timed runs' number at least."""
    return max(timed_side_by_side, min(LOOKED_INTO_AT_MOST, cores() * 3 // 4))


def sanitizers_at_once() -> int:
    """compute-sanitizer runs (a few tools side by side) among the searches at once: SANITIZERS_AT_MOST
    (on two H200s of one host, four groups of four tools side by side went through at 1.5 s each,
    twelve at 1.9 s: the runs are served largely one after another; only 1, 4 and 12 were tried),
    one for every 4 cores on a smaller host (a guess, not measured)."""
    return min(SANITIZERS_AT_MOST, max(1, cores() // 4))


def tool_slots(class_folder: Path) -> dict[str, str]:
    """The environment that has the searches side by side share sanitizers_at_once() slots."""
    folder = class_folder / ".tool-slots"
    folder.mkdir(exist_ok=True)
    return settings.tool_slots_through(str(folder), sanitizers_at_once())


def side_by_side() -> int:
    """Students judged at once here: their timed runs take turns on the GPU alone (gpu_turns), the
    rest (fa's checks of an output, the search for a cause) goes on beside them. One for every 4
    cores, 4 at most: on a small machine fa's own work beside a CPU program's timed run would slow it."""
    return max(1, min(4, cores() // 4))


def build_all(tasks: list[Task], jobs: int, advance=lambda: None) -> dict[str, str | None]:
    """Every task's source built (confined where a sandbox is in force), `jobs` at once (0: one a
    core), a GPU source's build for the sanitizers with it (cause.with_lines, kept in the class's
    cache as fa run would keep it): label -> None where it built, else why not, in one line."""
    def build(task: Task) -> str | None:
        try:
            program = programs.from_source(task.source)
            if not program.path.exists() and (error := programs.build_error(program)) is not None:
                return error
            if task.platform in ("cuda", "hip"):  # the tools' build too (-g -lineinfo): none left for the GPU's time
                cause.with_lines(program)
            return None
        except FaError as e:  # a compiler not installed, say: that row's reason, not the class's end
            return str(e)
        finally:
            advance()
    with ThreadPoolExecutor(workers(jobs)) as pool:
        return dict(zip((t.label for t in tasks), pool.map(build, tasks)))


def judge(class_folder: Path, task: Task, cases: list[str], time_limits_s: float, sandboxed: bool,
          build_error: str | None) -> dict:
    """The task judged whole, its cases timed then looked into, in one go (a Slurm task on a GPU of
    its own), and its record written."""
    if build_error is None:
        time_cases(class_folder, task, cases, time_limits_s, sandboxed)
    return look_into(class_folder, task, cases, time_limits_s, sandboxed, build_error)


def time_cases(class_folder: Path, task: Task, cases: list[str], time_limits_s: float, sandboxed: bool,
               turns: Path | None = None, at_once: int = 1) -> None:
    """The first half of the task's fa run: its cases judged and timed (turns: the lock through
    which the at_once fa runs side by side take turns on the GPU, each timed run alone), the
    results kept for look_into (judge/judged_state.py). Kept already for this submission, this fa
    and this sandbox (a class run stopped between the halves): not judged again."""
    timed, state = _halfway(class_folder, task, cases, sandboxed)
    if timed.exists():
        return
    timed.parent.mkdir(parents=True, exist_ok=True)
    for stale in timed.parent.glob(f".{task.label}.*"):  # halves kept for another submission, cases, fa, sandbox
        if stale.name.endswith((".timed.json", ".judged")):
            stale.unlink(missing_ok=True)
    beside = settings.gpu_turns_through(str(turns)) if turns else {}
    words = _fa_run(class_folder, task, cases, time_limits_s, sandboxed, ["--save-judged", str(state)], beside,
                    at_once if turns else 1)
    words["saved"] = state.exists()  # this run's state, none left of another (removed above)
    with atomic_file(timed) as f:
        f.write(json.dumps(words).encode())


def failed_when_timed(class_folder: Path, task: Task, cases: list[str], sandboxed: bool) -> bool:
    """The task's timed half ended other than in a pass of every case (a failure to look into)."""
    try:
        return json.loads(_halfway(class_folder, task, cases, sandboxed)[0].read_text())["exit_code"] != 0
    except (OSError, ValueError, KeyError):
        return False


def timed_before(class_folder: Path, task: Task, cases: list[str], sandboxed: bool) -> bool:
    """The task's cases timed already (its first half kept), its search for a cause still to do."""
    return _halfway(class_folder, task, cases, sandboxed)[0].exists()


def look_into(class_folder: Path, task: Task, cases: list[str], time_limits_s: float, sandboxed: bool,
              build_error: str | None, shares: Path | None = None, at_once: int = 1) -> dict:
    """The second half: the timed results taken back (where the first half kept them), the search
    for a cause (shares: the log of the at_once searches side by side, from which its budget counts
    its share of the GPU: gpu_shares), and the task's record written (or its build error kept, its
    paths told from the class folder)."""
    if build_error is not None:
        build_error = build_error.replace(f"{class_folder}/", "")
    record = new_record(task, cases, sandboxed, build_error)
    if build_error is None and task.source.is_file():  # what fa changed to build it, for the build column
        record["build_note"] = programs.build_note(programs.from_source(task.source))
    timed, state = _halfway(class_folder, task, cases, sandboxed)
    if build_error is None:
        first = json.loads(timed.read_text())
        judged = first["exit_code"] in (ExitStatus.OK, ExitStatus.FAILED) and first.get("saved")  # else: its words
        steps = state.with_name(state.name + ".steps")  # each step's seconds (step_times), kept in the record
        beside = settings.step_times_through(str(steps)) | \
            (settings.gpu_shares_through(str(shares)) | tool_slots(class_folder) if shares else {})
        try:
            steps.unlink(missing_ok=True)
            rest = _fa_run(class_folder, task, cases, time_limits_s, sandboxed, ["--from-judged", str(state)], beside,
                           at_once) if judged else dict(exit_code=first["exit_code"], runs=[], words="", errors="",
                                                        seconds=0.0)
            rest["steps"] = step_times.read(steps)
        finally:
            steps.unlink(missing_ok=True)
        record.update(rest, words=first["words"] + rest["words"], errors=first["errors"] + rest["errors"],
                      seconds=dict(timed=first.get("seconds"), looked_into=rest["seconds"]))  # each half's wall
    path = record_path(class_folder, task)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(path) as f:
        f.write(json.dumps(record, indent=1).encode())
    report = class_folder / REPORTS / f"{task.label}.txt"
    report.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(report) as f:
        f.write((record["words"] + record["errors"] or f"does not build: {build_error}\n").encode())
    timed.unlink(missing_ok=True)
    state.unlink(missing_ok=True)
    return record


def _halfway(class_folder: Path, task: Task, cases: list[str], sandboxed: bool) -> tuple[Path, Path]:
    """Where the first half of a task's fa run leaves its words and its judged cases: named by
    what they hold for (the submission's digest, the cases, fa's version, the sandbox)."""
    holds = json.dumps([task.submission.digest, cases, fa_cli.__version__, sandboxed])
    stem = class_folder / RECORDS / f".{task.label}.{hashlib.sha256(holds.encode()).hexdigest()[:16]}"
    return stem.with_name(stem.name + ".timed.json"), stem.with_name(stem.name + ".judged")


def new_record(task: Task, cases: list[str], sandboxed: bool, build_error: str | None = None,
               why_not_run: str = "") -> dict:
    """A task's record before its runs: what it holds for, its build error; why_not_run, where it
    stays unjudged (a Slurm task that ended without writing it): never kept, judged again next time."""
    return dict(student=task.submission.student, platform=task.platform, source=task.source.name,
                sha256=task.submission.digest, cases=cases, fa=fa_cli.__version__, sandboxed=sandboxed,
                build_error=build_error, exit_code=None, runs=[], words="",
                errors=f"fa: error: {why_not_run}\n" if why_not_run else "")


def _fa_run(class_folder: Path, task: Task, cases: list[str], time_limits_s: float, sandboxed: bool,
            half: list[str], beside: dict[str, str] | None = None, at_once: int = 1) -> dict:
    """fa run of one source, one half of it (half: --save-judged or --from-judged), in a process of
    its own (its own session: a wall limit ends all it started), beside at_once - 1 others (beside:
    the environment through which they share the GPU); its words, its records and its exit status."""
    results = class_folder / RECORDS / f".{task.label}.runs.json"
    results.unlink(missing_ok=True)
    argv = [sys.executable, "-m", "fa_cli", "run", *cases, "--program", str(task.source), "--keep-inputs",
            "-o", str(results), *half, *(["--sandbox"] if sandboxed else [])]
    # its words into pipes, unfolded (no COLUMNS): each message one line, as the cause column takes it
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"} | threads_each(at_once) | (beside or {})
    try:
        # side by side, a run may wait for each of the others' turns as long as for its own
        wall = (2 * time_limits_s + WALL_MARGIN_S) * at_once
        start = time.monotonic()
        proc = run_tool(argv, timeout=wall, cwd=class_folder, env=env,
                        why_timeout=" (fa class: twice the cases' limits and more, for each program side by side)")
        runs = records.load(results) if results.exists() else []
    finally:
        results.unlink(missing_ok=True)
    return dict(exit_code=proc.returncode, runs=runs, words=proc.stdout, errors=proc.stderr,
                seconds=round(time.monotonic() - start, 1))


def threads_each(at_once: int) -> dict[str, str]:
    """The environment that gives each of at_once fa runs side by side its share of the cores for
    NumPy's math library (which takes every core by default: a dozen searches each spinning up as
    many threads as cores leave none for the compute-sanitizer processes beside them)."""
    return settings.math_threads_through(max(1, cores() // max(1, at_once)))


def tasks_of(submissions: list[Submission]) -> list[Task]:
    return [Task(s, source) for s in submissions for source in s.sources()]


def confine_builds(sandboxed: bool) -> None:
    """The class's builds in the sandbox (or not, where --unsandboxed was given by name)."""
    sandbox.use(sandbox.Sandbox(gpu=False) if sandboxed else None)
