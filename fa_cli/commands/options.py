"""Click types for fa's options: every number and output path is checked where it is parsed,
before any work, so that a bad one is a usage error (exit 2), never a traceback later."""
from __future__ import annotations

import math
from pathlib import Path

import click

from ..cases.format import MAX_INT32
from ..files import check_output_path, replace_students_files

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
