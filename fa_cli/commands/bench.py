"""fa bench: programs timed on inputs (and fa slurm-task, one task of its --slurm-array)."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from .. import locations
from ..errors import ExitStatus
from ..measure import bench, judge_column
from ..programs import ready, slurm, wave64
from ..report import lines, tables
from ..report.records import check_extendable
from .group import main
from .options import OutputPath, case_options, force_option, launcher_options
from .shared import (check_names, check_room_for_inputs, make_launcher, note, parse_shape, runnable, selected_cases,
                     targets_for)


DEFAULT_RESULTS = Path("bench.json")  # in the current folder, extended run after run, as -o would be


@main.command(name="bench")
@case_options
@click.option("--program", "program_names", multiple=True, default=["best"], show_default=True,
              help="cpu, cuda, hip, hip-cuda, torch, best or a path; repeat to compare.")
@click.option("--shape", "shapes", multiple=True, help="B,N,d of a seeded uniform input; repeatable.")
@click.option("--repeat", "repeats", type=click.IntRange(min=1), default=None,
              help="Timed whole-process runs per program and input, after one warm-up; the median counts. "
                   f"Default: as many as it takes ({bench.MIN_ROUNDS} to {bench.MAX_ROUNDS}) for every median to "
                   "be known within --precision.")
@click.option("--precision", type=click.FloatRange(min=0.001, max=0.5), default=bench.DEFAULT_PRECISION,
              show_default=True,
              help="Without --repeat: run until half the 95% interval of every whole-process median is at most "
                   "this fraction of it.")
@click.option("--against", type=click.Choice(["torch"]), help="Add PyTorch SDPA fp32 on the same inputs.")
@click.option("--label", help="Name these runs in comparisons (default: the program's name).")
@click.option("--control", is_flag=True,
              help="Also run the first program a second time, as one more program: an A/A row whose ratio to "
                   "the first shows the noise (a program given twice is one too).")
@click.option("-o", "--output", "results", type=OutputPath(), default=str(DEFAULT_RESULTS), show_default=True,
              help="Results file (JSON); extended if it exists.")
@click.option("--wide", is_flag=True, help="Also the device, the runs and their spread (wider than 80 columns).")
@click.option("--keep-inputs", is_flag=True,
              help="Keep the inputs generated for this benchmark in the cache for later runs (by default they are "
                   "generated into TMPDIR and removed at the end).")
@force_option
@launcher_options
@click.option("--slurm-array", is_flag=True, help="Submit one sbatch job array over the inputs and wait for it.")
def bench_cmd(cases, all_cases, suite_text, program_names, shapes, repeats, precision, against, label, control, results,
              wide, keep_inputs, launcher, partition, gres, srun_args, slurm_array) -> None:
    """Time programs on inputs (CASES as fa run takes them: t01 c05 x.in, --all --suite c; or --shape):
    whole process (median of repeats, with its 95% interval), stages, TFLOP/s, error.

    Each input is flushed to disk first; the programs then take turns, one run each per round,
    each round starting one program later, so the order of --program options cannot change the
    table; each run starts with no output left by the run before and nothing left to write back."""
    if slurm_array and launcher != "slurm":
        raise click.UsageError("--slurm-array needs --launcher slurm --partition NAME")
    names = list(program_names) + (["torch"] if against == "torch" else [])
    if control:
        names.insert(1, names[0])
    wanted = selected_cases(cases, all_cases, suite_text)
    if not wanted and not shapes:
        raise click.UsageError("name cases (t01 c05 x.in), or give --all [--suite c] or --shape B,N,d")
    sizes = [parse_shape(text) for text in shapes]
    check_extendable(results)
    runner = make_launcher(launcher, partition, gres, srun_args)
    check_names(wanted)
    progs = bench.distinct_names([runnable(n, runner) for n in names])
    if keep_inputs:
        ready.announce_disk(wanted, False, note)
    with locations.shared_workdir(runner is not None) as workdir, locations.scratch("inputs", workdir) as scratch:
        if not keep_inputs:
            check_room_for_inputs(wanted, sizes, scratch)
        targets = targets_for(wanted, sizes, None if keep_inputs else scratch)
        plan = bench.BenchPlan(progs, targets, repeats, precision=precision, launcher=None if slurm_array else runner,
                               label=label)
        outlook = bench.BenchOutlook(progs, targets, repeats, note)
        if line := outlook.up_front():
            note(line)
        with tables.progress("benchmarking", len(progs) * len(targets), steps=True, left=outlook.left) as advance:
            if slurm_array:
                records = slurm.bench_array(plan, runner, results, advance)
            else:
                records = bench.run_bench(plan, results, advance, workdir, outlook)
    judge_gpu = judge_column.for_records(records, tables.bench_row)  # a hw4.cu's or hw4.hip's judge's time
    tables.show(tables.bench_table(records, wide, judge_gpu), wide)
    for line in judge_gpu.words if judge_gpu else []:
        lines.echo(line)
    sampled = sorted({r["verify_mode"] for r in records if str(r.get("verify_mode", "")).endswith("sampled")})
    if sampled:  # why the same case's max err differs from fa run's
        lines.echo(f"max err: of {', '.join(sampled)} against float64 (a benchmark checks a sample; "
                   "fa run compares every value, so its max err can be larger)")
    for line in bench.control_ratios(records):
        lines.echo(line)
    for line in wave64.emulated_sources(progs):  # hw4.hip timed on the NVIDIA GPU: said so
        lines.echo(line)
    lines.echo(f"{tables.plural(len(records), 'record')} added to {results}")
    sys.exit(ExitStatus.OK if all(not r.get("error") and r.get("passed") for r in records) else ExitStatus.FAILED)


@main.command(name="slurm-task", hidden=True)
@click.argument("plan", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("index", type=int)
def slurm_task_cmd(plan, index) -> None:
    """One task of `fa bench --slurm-array`, on a compute node: measure one (program, input)."""
    slurm.run_task(plan, index)
