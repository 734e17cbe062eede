"""fa class: a TA's class judged in one command (fa_cli/classroom does the work)."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from .. import settings
from ..cases import suite
from ..classroom import cluster, judging, whole_class
from ..errors import ExitStatus, FaError, Terminated, stopped_how
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
@click.option("--side-by-side", "at_once", type=click.IntRange(min=1), default=None,
              help="Programs judged at once here: their cases timed, each timed run alone on the GPU while the "
                   "others' checks go on (default: one for every 4 cores, 4 at most), then their searches for a "
                   "cause (default: 3 for every 4 cores, 12 at most).")
@click.option("--launcher", type=click.Choice(["direct", "slurm"]), default="direct", show_default=True,
              help="Judge here, or as Slurm job arrays (CLASS where the nodes see it).")
@click.option("--partition", "partitions", multiple=True,
              help="With --launcher slurm: NAME for every platform, or PLATFORM=NAME (cuda=nvidia, hip=amd, cpu=...).")
@click.option("--sbatch-arg", "sbatch_args", multiple=True, help="Extra sbatch option (--gres=gpu:1, say); repeatable.")
@click.option("--throttle", type=click.IntRange(min=1), default=4, show_default=True,
              help="With --launcher slurm: array tasks at once (each on a node of its own).")
def class_(folder, cases, all_cases, suite_text, class_folder, unsandboxed, jobs, at_once, launcher, partitions,
           sbatch_args, throttle) -> None:
    """Judge a class: SUBMISSIONS is a folder of student folders (each with hw4.cu, hw4.hip or
    hw4.cpp, and its Makefile if any), a course site's zip export of them, or a CSV list of git
    repositories (repository,path,commit). Each is copied and
    hashed, built on every core and judged as `fa run` judges it, confined (bubblewrap), a few side
    by side with every timed run alone on the GPU (or as Slurm job arrays); a re-run judges only
    what changed.

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
    the_class = whole_class.gathered(folder, class_folder.resolve(), names, not unsandboxed)
    lines.echo(f"fa class: {tables.plural(len(the_class.tasks), 'program')} of "
               f"{tables.plural(len(the_class.copies), 'student')}; {len(the_class.done)} judged before and "
               f"unchanged, {len(the_class.todo)} to judge"
               + (f" ({timed} with its cases timed before)" if (timed := the_class.timed_before) else "")
               + ("" if not unsandboxed else "; UNSANDBOXED: every build and run sees this machine as you do"))
    slurm = dict(partitions=partition_of, sbatch_args=sbatch_args, throttle=throttle) if launcher == "slurm" else None
    stopped = None
    try:
        whole_class.judge(the_class, jobs or 0, slurm, at_once or judging.side_by_side(),
                          at_once or judging.looked_into_side_by_side(judging.side_by_side()))
    except (KeyboardInterrupt, Terminated) as e:  # what is judged is kept, and shown
        stopped = e
    whole_class.outputs(the_class)
    judged, programs = sum(map(judging.is_whole, the_class.done.values())), len(the_class.tasks)
    if stopped is not None:
        how, status = stopped_how(stopped)
        lines.echo(f"{how}: {judged} of {programs} programs judged; fa class again goes on from there")
        sys.exit(status)
    sys.exit(ExitStatus.OK if judged == programs else ExitStatus.FAILED)  # a row not run is no verdict


@main.command("class-task", hidden=True)
@click.argument("plan", type=click.Path(path_type=Path, exists=True))
@click.argument("index", type=int)
def class_task(plan, index) -> None:
    """One array task of `fa class --launcher slurm`, on a compute node: one program judged."""
    cluster.run_task(plan, index)
