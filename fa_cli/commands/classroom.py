"""fa class: a TA's class judged in one command (fa_cli/classroom does the work)."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from .. import settings
from ..cases import suite
from ..classroom import cluster, judging, page, similarity, submissions, table
from ..errors import ExitStatus, FaError
from ..programs import sandbox
from ..report import lines, tables
from .group import main
from .options import case_options
from .shared import check_names, selected_cases


@main.command("class")
@click.argument("folder", metavar="SUBMISSIONS", type=click.Path(path_type=Path))
@case_options
@click.option("-o", "--output", "class_folder", type=click.Path(path_type=Path), required=True,
              help="The class folder: the submissions' copies, the class's cache (inputs and expected outputs, "
                   "made once), a record and a report per program, class.csv and class.json.")
@click.option("--unsandboxed", is_flag=True,
              help="Build and run every submission unconfined (where bubblewrap cannot be had): each row says so.")
@click.option("--jobs", type=click.IntRange(min=1), default=None,
              help="Builds at once (default: one a core).")
@click.option("--launcher", type=click.Choice(["direct", "slurm"]), default="direct", show_default=True,
              help="Judge here, one program at a time, or as Slurm job arrays (CLASS where the nodes see it).")
@click.option("--partition", "partitions", multiple=True,
              help="With --launcher slurm: NAME for every platform, or PLATFORM=NAME (cuda=nvidia, hip=amd, cpu=...).")
@click.option("--sbatch-arg", "sbatch_args", multiple=True, help="Extra sbatch option (--gres=gpu:1, say); repeatable.")
@click.option("--throttle", type=click.IntRange(min=1), default=4, show_default=True,
              help="With --launcher slurm: array tasks at once (each on a node of its own).")
def class_(folder, cases, all_cases, suite_text, class_folder, unsandboxed, jobs, launcher, partitions, sbatch_args,
           throttle) -> None:
    """Judge a class: SUBMISSIONS is a folder of student folders (each with hw4.cu, hw4.hip or
    hw4.cpp, and its Makefile if any), or a course site's zip export of them. Each is copied and hashed, built on every core and judged
    as `fa run` judges it, confined (bubblewrap), one at a time; a re-run judges only what changed.

    \b
    fa class submissions/ -o hw4-class --all --suite c"""
    names = selected_cases(cases, all_cases, suite_text)
    if launcher == "direct" and (partitions or sbatch_args):
        raise click.UsageError("--partition and --sbatch-arg need --launcher slurm")
    partition_of = cluster.partitions_of(partitions) if launcher == "slurm" else {}
    if launcher == "slurm" and not partition_of:
        raise click.UsageError("--launcher slurm needs --partition")
    if not names or not all(suite.is_case_name(n) for n in names):
        raise click.UsageError("name the suite cases to judge on (t01..t30, c01..c30), or give --all [--suite c]")
    check_names(names)
    if not unsandboxed and (line := sandbox.missing_line()):
        raise FaError(f"{line}; or give --unsandboxed to run every submission unconfined", exit_code=ExitStatus.FAILED)
    class_folder.mkdir(parents=True, exist_ok=True)
    settings.use_cache_dir(str((class_folder / "cache").resolve()))
    class_folder = class_folder.resolve()
    if folder.is_file():  # a course site's zip export
        folder = submissions.unpacked(folder, class_folder)
    copies = [submissions.copied(student, where, class_folder) for student, where in submissions.found(folder)]
    tasks = judging.tasks_of(copies)
    if not tasks:
        raise FaError(f"{folder}: no student folder holds a {', '.join(submissions.SOURCES)}")
    done = {t.label: r for t in tasks if (r := judging.kept_record(class_folder, t, names, not unsandboxed))}
    todo = [t for t in tasks if t.label not in done]
    lines.echo(f"fa class: {tables.plural(len(tasks), 'program')} of {tables.plural(len(copies), 'student')}; "
               f"{len(done)} judged before and unchanged, {len(todo)} to judge"
               + ("" if not unsandboxed else "; UNSANDBOXED: every build and run sees this machine as you do"))
    judging.confine_builds(not unsandboxed)
    limits = sum(suite.case(n).time_limit for n in names)
    stopped = False
    try:
        with tables.progress("building", len(todo), steps=True, enabled=bool(todo)) as advance:
            built = judging.build_all(todo, jobs or 0, advance)
        if launcher == "slurm" and todo:
            cluster.inputs_first(names)
            cluster.judge_all(class_folder, todo, names, limits, not unsandboxed, built, partition_of, sbatch_args,
                              throttle)
            done.update({t.label: r for t in todo if (r := judging.kept_record(class_folder, t, names,
                                                                               not unsandboxed, whole=False))})
        else:
            with tables.progress("judging", len(todo), steps=True, enabled=bool(todo)) as advance:
                for task in todo:
                    done[task.label] = judging.judge(class_folder, task, names, limits, not unsandboxed,
                                                     built[task.label])
                    advance()
    except KeyboardInterrupt:
        stopped = True
    kept = [done[t.label] for t in tasks if t.label in done]
    csv_path, _ = table.write(class_folder, kept)
    tables.show(table.terminal_table(kept))
    found = similarity.pairs(copies)
    table.write_json(class_folder / "similarity.json", {"pairs": found})
    for line in similarity.lines_of(found):
        lines.echo(f"similar: {line}")
    texts = {(c.student, name): (c.folder / name).read_text(errors="replace") for c in copies for name in c.files}
    index = page.write(class_folder, kept, found, texts)
    lines.echo(f"{table.summary(kept, csv_path)}; the page: {index}")
    if stopped:
        lines.echo(f"interrupted: {len(kept)} of {len(tasks)} programs judged; fa class again goes on from there")
        sys.exit(ExitStatus.INTERRUPTED)
    sys.exit(ExitStatus.OK if len(kept) == len(tasks) else ExitStatus.FAILED)


@main.command("class-task", hidden=True)
@click.argument("plan", type=click.Path(path_type=Path, exists=True))
@click.argument("index", type=int)
def class_task(plan, index) -> None:
    """One array task of `fa class --launcher slurm`, on a compute node: one program judged."""
    cluster.run_task(plan, index)
