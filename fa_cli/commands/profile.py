"""fa profile: a program's kernels under the profiler."""
from __future__ import annotations


import click

from .. import locations
from ..measure import profile
from ..programs import programs, ready
from ..report import lines, markdown, tables
from ..report.records import append, check_extendable
from .group import main
from .options import OutputPath, force_option, launcher_options, program_option
from .shared import built, check_names, make_launcher, targets_for


@main.command(name="profile", help="Profile PROGRAM's kernels on test cases or inputs: time, TFLOP/s and the "
              "course's metrics (ncu on sm_70+, nvprof on Pascal, rocprof on AMD), per kernel over its launches."
              "\n\n" + profile.help_tables())
@click.argument("cases", nargs=-1, required=True)
@program_option("best", does="profiles", help=programs.CHOICES + ".")
@click.option("--kernel", help="Only kernels whose name contains this (e.g. attention_tiled).")
@click.option("--set", "metric_set", type=click.Choice(["course", "full"]), default="course", show_default=True,
              help="course: the report's metrics; full: also ncu's full set of sections.")
@click.option("--profiler", type=click.Choice(["auto", *profile.PROFILERS]), default="auto", show_default=True,
              help="auto: rocprof for hip, else ncu (the GTX 1080, Pascal, needs nvprof).")
@click.option("--flops-kernel", help="The kernel that does the 4*B*N*N*d work (default: the one taking most time).")
@click.option("-o", "--output", "results", type=OutputPath(),
              help="Results file (JSON); extended if it exists.")
@click.option("--markdown", "as_markdown", is_flag=True, help="Print a markdown table for a report.")
@force_option
@launcher_options
def profile_cmd(cases, program, kernel, metric_set, profiler, flops_kernel, results, as_markdown, launcher, partition,
                gres, srun_args) -> None:
    check_extendable(results)
    runner = make_launcher(launcher, partition, gres, srun_args)
    check_names(cases)
    prog = programs.resolve(program)
    ready.check_runs_here(prog, runner, program, try_cpu=False)
    tool = profile.choose(profiler, prog.name)
    ready.check_profiler(tool, runner, prog, program)  # both said before any input is generated
    prog = built(prog)
    targets = targets_for(cases)
    records = []
    with locations.shared_workdir(runner is not None) as workdir:
        for t in targets:
            kernels, argv = profile.profile(prog, t, tool, kernel, metric_set == "full", runner, workdir, flops_kernel)
            records += [profile.as_record(k, prog, t, tool, argv, runner) for k in kernels]
    if results:
        append(results, records)
    if as_markdown:
        click.echo(markdown.profile_markdown(records), nl=False)
    else:
        tables.show(tables.profile_table(records))
    if results:
        lines.echo(f"{tables.plural(len(records), 'record')} added to {results}")
