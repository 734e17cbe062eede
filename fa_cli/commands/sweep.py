"""fa sweep: a kernel, or a student's source, built with each combination of tile sizes."""
from __future__ import annotations

import sys

import click
from click.core import ParameterSource

from .. import locations
from ..errors import ExitStatus, FaError
from ..measure import source_sweep, sweep
from ..report import charts, tables
from ..report.records import check_extendable
from .group import main
from .options import launcher_options, measure_options, program_option
from .shared import check_names, make_launcher, note, program_for, save_and_plot, show, targets_for


@main.command(name="sweep")
@click.argument("case", required=False)
@click.option("--kernel",
              help="The kernel (its FA_KERNEL value), for CASE's d; --list shows each program's, from its kernel "
                   "registry. Default: the homework kernel (the first step of the program's ladder that can be "
                   "swept).")
@click.option("--param", "params", multiple=True, metavar="NAME=V1,V2,...",
              help="A tile parameter and its values; repeatable. The kernel's parameters and their defaults, the "
                   "program's tile for d, are as --list shows them (the homework kernel's: Br, query rows per "
                   "block, and Bc, keys per tile). A source of yours: a macro it tests with #ifndef (BR=16,32 "
                   "builds it with -DBR=16, then -DBR=32).")
@program_option("cuda", does="sweeps",
                help="cuda, hip-cuda or hip, or a source of yours (hw4.cu, hw4.hip) that takes its tile sizes as -D "
                     "macros.")
@click.option("--arch", help="The GPU target the variants are built for (default: this machine's GPU).")
@click.option("--no-run", is_flag=True, help="Only build the variants and report their resources (no GPU needed).")
@click.option("--list", "list_only", is_flag=True,
              help="Only list the kernels and tile parameters the program can be swept over (its kernel registry).")
@measure_options
@launcher_options
def sweep_cmd(case, kernel, params, program, arch, no_run, list_only, repeats, tol, with_profile, profiler, results,
              plot, as_markdown, launcher, partition, gres, srun_args) -> None:
    """Build a kernel with each combination of tile sizes (bin/variants/, reused while up to
    date), run each on CASE and verify it: kernel TFLOP/s and theoretical occupancy (achieved
    with --profile) against Br, one line per Bc. Combinations that cannot be built are listed as
    skipped, with the compiler's reason.

    \b
    Your own tile sizes, where your source takes them as -D macros
    (#ifndef BR / #define BR 32 / #endif), each combination built with the
    course's line:
    fa sweep t17 --program hw4.cu --param BR=16,32 --param BC=32,64 -o sweep.json"""
    if not list_only and not case:
        raise click.UsageError("give a CASE (t27, a file, ...), or --list")
    if no_run and with_profile:
        raise FaError("--no-run and --profile exclude each other")
    check_extendable(results)
    if program not in sweep.PROGRAMS:
        own_sweep(case, program, params, no_run, list_only, with_profile, repeats, tol, results, plot, as_markdown,
                  make_launcher(launcher, partition, gres, srun_args))
        return
    for text in params:  # what needs no build of the program first
        sweep.parse_values(text)
    if arch:
        sweep.check_arch(arch)
    built_program = program_for(program)
    families = sweep.families_of(built_program)
    if list_only:
        show(*sweep.listing(families), as_markdown, f"fa sweep: what {program} can be swept over")
        return
    kernel = kernel or sweep.homework_kernel(built_program)
    if kernel not in families:
        raise FaError(f"--kernel {kernel}: {program} can be swept over {', '.join(families)}")
    family = families[kernel]
    for text in params:
        sweep.parse_param(text, family)  # every bad --param is refused before any variant is built
    [target] = targets_for([case])
    arch = arch or sweep.local_arch(program)
    runner = make_launcher(launcher, partition, gres, srun_args)
    plan_args = dict(repeats=repeats, tol=tol, launcher=runner)
    with locations.shared_workdir(runner is not None) as workdir, tables.progress("sweep variants", None, steps=True) as advance:
        records = sweep.run_sweep(program, target, list(params), arch, plan_args, not no_run, with_profile,
                                  profiler, workdir, note, advance, family)
    show(*sweep.rows(records), as_markdown, f"fa sweep: {program} {kernel} for {arch}, {target.name}",
         keys=sweep.key_columns(records))
    save_and_plot(records, results, plot, charts.sweep_chart)
    ran = [r for r in records if not r.get("skipped")]
    sys.exit(ExitStatus.OK if no_run or all(not r.get("error") and r.get("passed") for r in ran) else ExitStatus.FAILED)


def own_sweep(case, program, params, no_run, list_only, with_profile, repeats, tol, results, plot, as_markdown,
              runner) -> None:
    """fa sweep --program hw4.cu --param BR=16,32: the student's source built with each combination
    of -D values (course's line), each judged and timed; every refusal before any work."""
    source = source_sweep.own_source(program)
    ctx = click.get_current_context()
    given = [o for o in ("kernel", "arch") if ctx.get_parameter_source(o) != ParameterSource.DEFAULT]
    source_sweep.check_options(given, with_profile, case)
    if list_only:
        show(*source_sweep.own_listing(source), as_markdown,
             f"fa sweep: the macros {source.name} tests with #ifndef/#ifdef")
        return
    source_sweep.check_params(list(params), source)
    check_names([case])
    source_sweep.check_runs_here(source, list(params), program, runner, run=not no_run)
    [target] = targets_for([case])
    plan_args = dict(repeats=repeats, tol=tol, launcher=runner)
    with locations.shared_workdir(runner is not None) as workdir, \
            tables.progress("sweep variants", None, steps=True) as advance:
        records = source_sweep.run_own_sweep(source, target, list(params), plan_args, not no_run, workdir, note,
                                             advance)
    show(*source_sweep.rows(records), as_markdown, source_sweep.title(records, source, target),
         keys=source_sweep.key_columns(records))
    save_and_plot(records, results, plot, charts.sweep_chart)
    ran = [r for r in records if not r.get("skipped")]
    sys.exit(ExitStatus.OK if no_run or all(not r.get("error") and r.get("passed") for r in ran) else ExitStatus.FAILED)
