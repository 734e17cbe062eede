"""fa verify: an output checked against its input or an expected output."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from ..cases import suite
from ..cases.format import AttentionInput, Shape, open_output, regular_size
from ..errors import ExitStatus, FaError
from ..judge import diagnose, expected, mistakes, verify
from ..report import lines, tables
from .group import main
from .options import SEED, TOLERANCE
from .shared import ensure_expected, targets_for


VERIFY_HELP = ("Check OUTPUT: max abs error, where it is, how many values exceed --tol; for a failed check "
               "with --input, where the wrong values are and which usual mistake explains them, if one "
               "does. Exit 0 pass, 1 fail.\n\nThe mistakes fa recognises:\n\n\b\n"
               + "\n".join(f"- {m.name}" for m in mistakes.MISTAKES))


@main.command(name="verify", help=VERIFY_HELP)
@click.argument("output", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--input", "input_path", type=click.Path(dir_okay=False, path_type=Path),
              help="The input, a file or a test case (t01, c17): the output is checked against float64 "
                   "attention of it.")
@click.option("--expected", "expected_file", type=click.Path(dir_okay=False, path_type=Path),
              help="An expected output to compare with instead.")
@click.option("--tol", type=TOLERANCE, default=verify.COURSE_TOL, show_default=True, help="Largest allowed abs error.")
@click.option("--sample", "sample_rows", type=click.IntRange(min=1),
              help="A quick look: this many random rows per batch against float64 (a sampled verdict, not the "
                   "course's).")
@click.option("--full", is_flag=True,
              help="Every row against float64 computed now, instead of the cached expected output.")
@click.option("--seed", type=SEED, default=0, show_default=True, help="Seed of the sampled rows.")
def verify_cmd(output, input_path, expected_file, tol, sample_rows, full, seed) -> None:
    if (input_path is None) == (expected_file is None):
        raise click.UsageError("give exactly one of --input or --expected")
    if sample_rows and full:
        raise click.UsageError("--sample and --full exclude each other")
    if input_path is not None:
        # A case name (t01, c17) as fa run takes it: its input, generated if missing.
        case = targets_for([str(input_path)])[0] if not input_path.exists() and \
            suite.is_case_name(str(input_path).lower()) else None
        input_path = case.input_path if case else input_path
        # Read, not mapped: a file cut short while fa reads it is one line, never a SIGBUS.
        inp = AttentionInput(input_path, in_memory=True)
        out = open_output(output, inp.shape, in_memory=True)
        check = verify.RowCheck(sample_rows, full, seed)
        if check.is_default:  # every value, as the course's judge: against the input's expected output
            target = case or suite.Target(input_path.name, input_path, inp.shape, None)
            ensure_expected([target])
            with tables.progress("verifying", inp.shape.elements) as advance:
                result = verify.against_expected(out, expected.output_of(target, in_memory=True), tol, inp.shape,
                                                 advance)
        else:
            with tables.progress("verifying", inp.shape.B) as advance:
                result = verify.against_reference(inp, out, tol, check, advance)
        if not result.passed and result.checked:
            lines.echo(tables.verify_summary(result))
            lines.echo(tables.verify_details(result, diagnose.of_wrong(result, inp.shape, inp, out)))
            sys.exit(ExitStatus.FAILED)
    else:
        size = regular_size(expected_file, "expected output")
        flat = Shape(1, size // 4, 1) if size % 4 == 0 else None
        if flat is None:
            raise FaError(f"{expected_file}: {size} bytes is not a whole number of float32 values")
        exp = open_output(expected_file, flat, "expected output", in_memory=True)
        got = regular_size(output)
        if got != size:
            raise FaError(f"{output}: output has {got} bytes, the expected output {expected_file} has {size} "
                          f"({size // 4} float32 values)", exit_code=ExitStatus.BAD_INPUT)
        out = open_output(output, flat, in_memory=True)
        result = verify.against_expected(out.reshape(-1), exp.reshape(-1), tol)
    lines.echo(tables.verify_summary(result))
    sys.exit(ExitStatus.OK if result.passed else ExitStatus.FAILED)
