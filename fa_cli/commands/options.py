"""Click types for fa's options: every number and output path is checked where it is parsed,
before any work, so that a bad one is a usage error (exit 2), never a traceback later; and the
groups of options several commands share (--launcher and srun's; repeats, tolerance, outputs)."""
from __future__ import annotations

import math
from pathlib import Path

import click

from ..cases import suite

from ..cases.format import MAX_INT32
from ..files import check_output_path, replace_students_files
from ..measure import profile

SEED = click.IntRange(min=0)  # numpy's seeds are non-negative


class Size(click.ParamType):
    """B or N: a positive int32 (the course's header), said as format.check_shape says it."""

    name = "integer"

    def __init__(self, letter: str):
        self.letter = letter

    def convert(self, value, param, ctx):
        number = click.INT.convert(value, param, ctx)
        if number <= 0:
            self.fail(f"{self.letter} = {number}, must be positive", param, ctx)
        if number > MAX_INT32:
            self.fail(f"{self.letter} = {number}, must be at most {MAX_INT32} (an int32 in the header)", param, ctx)
        return number


class PositiveFinite(click.ParamType):
    """A finite number above 0: a tolerance (a NaN one would pass every NaN output), a time
    limit (an infinite one is --no-time-limit, a NaN one would stop nothing)."""

    name = "float"

    def __init__(self, what: str):
        self.what = what

    def convert(self, value, param, ctx):
        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number", param, ctx)
        if not math.isfinite(number) or number <= 0:
            self.fail(f"{value!r}: {self.what} must be a finite number above 0", param, ctx)
        return number


TOLERANCE = PositiveFinite("a tolerance")
SECONDS = PositiveFinite("a time limit")


class OutputPath(click.Path):
    """A file fa will write: where it goes is checked now (files.check_output_path: not a
    directory, its directory there and writable, its name not too long), in one line."""

    def __init__(self):
        super().__init__(dir_okay=True, path_type=Path)

    def convert(self, value, param, ctx):
        check_output_path(value)  # before click's Path turns '' into '.'
        path = super().convert(value, param, ctx)
        return path


def _set_force(ctx, param, value):
    replace_students_files(bool(value))
    return value


# Eager: set before any output path of the command is checked (OutputPath.convert).
force_option = click.option(
    "--force", is_flag=True, is_eager=True, expose_value=False, callback=_set_force,
    help="Replace an output file that fa would otherwise keep: a source file (.cu .hip .cpp .cc .c .h .py), "
         "a Makefile, or a file that is not what this command writes.")


def program_option(default: str, help: str, does: str):
    """--program of a command that takes one program (`does`: what it does with it, for the line that
    refuses a second): given twice, refused in one line, never the last one taken in silence."""
    def one(ctx, param, given):
        if len(given) > 1:
            raise click.UsageError(f"--program was given {len(given)} times ({', '.join(given)}): fa {ctx.info_name} "
                                   f"{does} one program at a time; run it once per program, or compare them side by "
                                   f"side with fa bench --program A --program B")
        return given[0]
    return click.option("--program", multiple=True, default=(default,), callback=one, show_default=True, help=help)


def case_options(f):
    """CASES, --all and --suite: how run, bench and gen name suite cases (one grammar)."""
    for option in reversed([
        click.argument("cases", nargs=-1),
        click.option("--all", "all_cases", is_flag=True,
                     help="Every case of a suite: t01..t30, or c01..c30 with --suite c."),
        click.option("--suite", "suite_text", is_flag=False, flag_value=suite.DEFAULT_SUITE, default=None,
                     help="The suite of --all and of bare numbers (7: c07 with --suite c): t (fa's own cases, the "
                          "default) or c (the course's 30 shapes); alone, with no case named, the whole suite. "
                          "Also a list: --suite t01,c21."),
    ]):
        f = option(f)
    return f


def launcher_options(f):
    """--launcher direct|slurm and the options of srun, shared by run and bench."""
    for option in reversed([
        click.option("--launcher", type=click.Choice(["direct", "slurm"]), default="direct", show_default=True,
                     help="Run programs here, or on the cluster through srun."),
        click.option("--partition", help="Slurm partition (with --launcher slurm), e.g. nvidia or amd."),
        click.option("--gres", help="Slurm generic resources, e.g. gpu:1."),
        click.option("--srun-arg", "srun_args", multiple=True, help="Extra srun/sbatch option; repeatable."),
    ]):
        f = option(f)
    return f


def measure_options(f):
    """Repeats and tolerance, shared by ladder and sweep."""
    for option in reversed([
        click.option("--repeat", "repeats", type=click.IntRange(min=1), default=3, show_default=True,
                     help="Timed runs per step, after one warm-up run; the median counts."),
        click.option("--tol", type=TOLERANCE, default=1e-4, show_default=True,
                     help="Largest abs error a PASS allows (the course's is 5e-3)."),
        click.option("--profile", "with_profile", is_flag=True,
                     help="Also profile each run (fa profile's course metrics; ncu, or --profiler)."),
        click.option("--profiler", type=click.Choice(profile.PROFILERS), default="ncu", show_default=True,
                     help="The profiler --profile uses (nvprof on Pascal, rocprof on AMD)."),
        click.option("-o", "--output", "results", type=OutputPath(),
                     help="Add the records to this results file (JSON, for fa report); extended if it exists."),
        click.option("--plot", type=OutputPath(), help="Write a chart (PNG) here."),
        click.option("--markdown", "as_markdown", is_flag=True, help="Print a markdown table for a report."),
        force_option,
    ]):
        f = option(f)
    return f
