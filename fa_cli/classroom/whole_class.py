"""A class judged from start to end, the pieces in their order: the submissions copied, what is
judged already kept, the rest built then judged (here or over Slurm), and the class's outputs
(the table, the similar pairs, the page). fa class (commands/classroom.py) calls these."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..cases import suite
from ..errors import FaError
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

    @property
    def todo(self) -> list[Task]:
        return [t for t in self.tasks if t.label not in self.done]

    @property
    def kept(self) -> list[dict]:
        return [self.done[t.label] for t in self.tasks if t.label in self.done]


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


def judge(c: Class, jobs: int, slurm: dict | None) -> None:
    """What is to judge, built on every core, then judged here one at a time or over Slurm
    (slurm: cluster.judge_all's partitions, sbatch_args and throttle); records join c.done as
    they come (an interrupt keeps them)."""
    todo = c.todo
    judging.confine_builds(c.sandboxed)
    limits = sum(suite.case(n).time_limit for n in c.cases)
    with tables.progress("building", len(todo), steps=True, enabled=bool(todo)) as advance:
        built = judging.build_all(todo, jobs, advance)
    if slurm is not None and todo:
        cluster.inputs_first(c.cases)
        cluster.judge_all(c.folder, todo, c.cases, limits, c.sandboxed, built, **slurm)
        c.done.update({t.label: r for t in todo if (r := judging.kept_record(c.folder, t, c.cases, c.sandboxed,
                                                                             whole=False))})
        return
    with tables.progress("judging", len(todo), steps=True, enabled=bool(todo)) as advance:
        for task in todo:
            c.done[task.label] = judging.judge(c.folder, task, c.cases, limits, c.sandboxed, built[task.label])
            advance()


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
