"""A class judged from start to end, the pieces in their order: the submissions copied, what is
judged already kept, the rest built then judged (here or over Slurm), and the class's outputs
(the table, the similar pairs, the page). fa class (commands/classroom.py) calls these."""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ..cases import suite
from ..errors import FaError, Terminated
from ..judge import step_times
from ..programs import gpu_shares, processes
from ..report import lines, tables
from . import cluster, judging, page, similarity, submissions, table
from .judging import Task
from .submissions import Submission


@dataclass
class Class:
    folder: Path              # the class folder (absolute)
    cases: list[str]
    sandboxed: bool
    copies: list[Submission]
    tasks: list[Task]
    done: dict[str, dict] = field(default_factory=dict)  # label -> record
    unjudged: dict[str, str] = field(default_factory=dict)  # label -> why its Slurm task left no record

    @property
    def todo(self) -> list[Task]:
        return [t for t in self.tasks if t.label not in self.done]

    @property
    def timed_before(self) -> int:
        """Of todo, the tasks whose cases were timed before (a class run stopped between its halves)."""
        return sum(judging.timed_before(self.folder, t, self.cases, self.sandboxed) for t in self.todo)

    @property
    def kept(self) -> list[dict]:
        """The table's records: each judged task's, and a record saying why for each that Slurm ended
        unjudged (never written: the next fa class judges it)."""
        return [self.done[t.label] if t.label in self.done else
                judging.new_record(t, self.cases, self.sandboxed, why_not_run=self.unjudged[t.label])
                for t in self.tasks if t.label in self.done or t.label in self.unjudged]


def gathered(where: Path, folder: Path, cases: list[str], sandboxed: bool) -> Class:
    """The class's submissions copied (a zip export unpacked, a list of repositories fetched,
    first), with the records that still hold."""
    if where.is_file() and where.suffix == ".csv":
        where = submissions.fetched(where, folder, say=lambda line: lines.echo(f"fa class: {line}"))
    elif where.is_file():
        where = submissions.unpacked(where, folder)
    copies = [submissions.copied(student, source, folder) for student, source in submissions.found(where, folder)]
    tasks = judging.tasks_of(copies)
    if not tasks:
        raise FaError(f"{where}: no student folder holds a {', '.join(submissions.SOURCES)}")
    done = {t.label: r for t in tasks if (r := judging.kept_record(folder, t, cases, sandboxed))}
    return Class(folder, cases, sandboxed, copies, tasks, done)


def judge(c: Class, jobs: int, slurm: dict | None, at_once: int = 1, looked_at_once: int | None = None) -> None:
    """What is to judge, built on every core, then judged here (at_once side by side) or over Slurm
    (slurm: cluster.judge_all's partitions, sbatch_args and throttle); records join c.done as
    they come (an interrupt keeps them)."""
    todo = c.todo
    judging.confine_builds(c.sandboxed)
    limits = sum(suite.case(n).time_limit for n in c.cases)
    start = time.monotonic()
    cases = _Beside(cluster.cases_first, c.cases) if todo else None  # made while the programs build
    with tables.progress("building", len(todo), steps=True, enabled=bool(todo)) as advance:
        built = judging.build_all(todo, jobs, advance)
    if todo:
        lines.echo(f"fa class: {tables.plural(len(todo), 'build')} in {time.monotonic() - start:.1f} s, "
                   f"{judging.workers(jobs)} at once")
        cases.result()
        lines.echo(f"fa class: the cases and their expected outputs ready {time.monotonic() - start:.1f} s after the "
                   "builds began")
    start = time.monotonic()
    try:
        _judge_built(c, todo, built, limits, slurm, at_once, looked_at_once or at_once)
    finally:
        if todo:
            runs = sum(r.get("wall_s") or 0 for t in todo for r in (c.done.get(t.label) or {}).get("runs") or [])
            lines.echo(f"fa class: judged in {time.monotonic() - start:.1f} s, of which the programs' own runs "
                       f"{runs:.1f} s" + (f" ({at_once} programs side by side, each timed run alone on the GPU)"
                                          if at_once > 1 and slurm is None else ""))


def _judge_built(c: Class, todo: list[Task], built: dict[str, str | None], limits: float, slurm: dict | None,
                 at_once: int, looked_at_once: int) -> None:
    """The built tasks judged here, or over Slurm. Here, in two halves: every program's cases timed,
    at_once side by side (each timed run alone on the GPU: gpu_turns), then every search for a cause
    and race check, more side by side (no timed run left to wait for them), each budget counting
    its share of the GPU (gpu_shares): a search reaches what it reaches alone."""
    if slurm is not None and todo:
        c.unjudged = cluster.judge_all(c.folder, todo, c.cases, limits, c.sandboxed, built, **slurm)
        c.done.update({t.label: r for t in todo if (r := judging.kept_record(c.folder, t, c.cases, c.sandboxed,
                                                                             whole=False))})
        for label, why in c.unjudged.items():
            lines.echo(f"fa class: {label}: {why}")
        return
    turns = c.folder / ".gpu-turns" if at_once > 1 else None
    timing = [t for t in todo
              if built[t.label] is None and not judging.timed_before(c.folder, t, c.cases, c.sandboxed)]
    start = time.monotonic()
    _each("judging", timing, at_once, lambda t: judging.time_cases(c.folder, t, c.cases, limits, c.sandboxed, turns,
                                                                    at_once))
    if timing:
        lines.echo(f"fa class: every case of {tables.plural(len(timing), 'program')} timed in "
                   f"{time.monotonic() - start:.1f} s; then the searches for a cause")

    sharing = gpu_shares.Sharing(c.folder / ".gpu-shares")  # each search's budget counts its share of the GPU

    def finish(task: Task) -> None:
        with sharing.one():
            c.done[task.label] = judging.look_into(c.folder, task, c.cases, limits, c.sandboxed, built[task.label],
                                                   sharing.log, looked_at_once)
    # the longest first: a failing program's search takes up to its budget, a passing one's race check less
    longest_first = sorted(todo, key=lambda t: not judging.failed_when_timed(c.folder, t, c.cases, c.sandboxed))
    start = time.monotonic()
    _each("looking into", longest_first, looked_at_once, finish)
    if todo:
        took = sorted(((c.done[t.label].get("seconds") or {}).get("looked_into") or 0, t.label) for t in todo)[::-1]
        lines.echo(f"fa class: the searches for a cause in {time.monotonic() - start:.1f} s, {looked_at_once} side by "
                   f"side, compute-sanitizer {judging.sanitizers_at_once()} at a time; the longest: "
                   + ", ".join(f"{label} {s:.0f} s" + (f" ({step})" if (step := step_times.longest(
                       c.done[label].get("steps") or [])) else "") for s, label in took[:3]))


class _Beside:
    """A function run on a thread of its own beside the caller's work; result() waits for it and
    raises what it raised. A daemon: an interrupt of fa is not held up by it."""

    def __init__(self, fn, *args):
        self.value, self.error = None, None
        self.thread = threading.Thread(target=self._run, args=(fn, *args), daemon=True)
        self.thread.start()

    def _run(self, fn, *args) -> None:
        try:
            self.value = fn(*args)
        except BaseException as e:  # raised again in the caller's thread
            self.error = e

    def result(self):
        self.thread.join()
        if self.error is not None:
            raise self.error
        return self.value


def _each(what: str, tasks: list[Task], at_once: int, do) -> None:
    """do(task) for every task, at_once side by side, with a progress bar; interrupted, the fa runs
    under way are stopped (another error lets them end first)."""
    with tables.progress(what, len(tasks), steps=True, enabled=bool(tasks)) as advance:
        pool = ThreadPoolExecutor(at_once)
        try:
            for _ in pool.map(lambda task: (do(task), advance()), tasks):  # in order; the first error raised here
                pass
        except (KeyboardInterrupt, Terminated):  # the fa runs under way stopped, not waited for
            processes.stop_all()
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)


def outputs(c: Class) -> None:
    """class.csv, class.json, similarity.json and index.html; the table, the first pairs and the
    summary line on the terminal."""
    kept = c.kept
    csv_path, _ = table.write(c.folder, kept)
    tables.show(table.terminal_table(kept))
    found = similarity.pairs(c.copies)
    table.write_json(c.folder / "similarity.json", {"pairs": found})
    for line in similarity.lines_of(found):
        lines.echo(f"similar: {line}")
    texts = {(s.student, name): (s.folder / name).read_text(errors="replace") for s in c.copies for name in s.files}
    index = page.write(c.folder, kept, found, texts)
    lines.echo(f"{table.summary(kept, csv_path)}; the page: {index}")
