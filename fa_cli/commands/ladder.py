"""fa ladder: the homework kernel's optimization steps."""
from __future__ import annotations

import sys

import click

from .. import locations
from ..errors import ExitStatus
from ..measure import ladder
from ..report import charts, tables
from ..report.records import check_extendable
from .group import main
from .options import launcher_options, measure_options, program_option
from .shared import check_names, make_launcher, program_for, runnable, save_and_plot, show, targets_for


@main.command(name="ladder")
@click.argument("case", required=False)
@program_option("cuda", does="measures the steps of", help="cuda, hip-cuda or hip.")
@click.option("--list", "list_only", is_flag=True, help="Only list the steps (from the program's kernel registry).")
@measure_options
@launcher_options
def ladder_cmd(case, program, list_only, repeats, tol, with_profile, profiler, results, plot, as_markdown, launcher,
               partition, gres, srun_args) -> None:
    """Run the homework kernel's optimization steps on CASE, one by one: each verified, with its
    kernel time, TFLOP/s and speed-up over the step before (and the course's metrics with --profile)."""
    if not list_only and not case:
        raise click.UsageError("give a CASE (t27, a file, ...), or --list")
    check_extendable(results)
    if list_only:  # no GPU needed: the program's kernel registry
        prog = program_for(program)
        show(*ladder.listing(ladder.steps_for(prog)), as_markdown, f"fa ladder: the steps of {prog.name}")
        return
    runner = make_launcher(launcher, partition, gres, srun_args)
    check_names([case])
    prog = runnable(program, runner, try_cpu=False)
    steps = ladder.steps_for(prog)  # refused before any input is generated
    [target] = targets_for([case])
    plan_args = dict(repeats=repeats, tol=tol, launcher=runner)
    with locations.shared_workdir(runner is not None) as workdir, tables.progress("ladder steps", len(steps), steps=True) as advance:
        records = ladder.run_ladder(prog, target, plan_args, steps, with_profile, profiler, workdir, advance)
    show(*ladder.rows(records), as_markdown, f"fa ladder: {prog.name} on {records[0]['device']}, {target.name}")
    save_and_plot(records, results, plot, charts.ladder_chart)
    sys.exit(ExitStatus.OK if all(not r.get("error") and r.get("passed") for r in records) else ExitStatus.FAILED)
