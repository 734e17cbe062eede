"""fa gen: a seeded input, or a suite case, written."""
from __future__ import annotations


import click

from ..cases import generate, suite
from ..cases.format import AttentionInput, check_shape
from ..files import remove_placed
from ..report import lines, tables
from .group import main
from .options import SEED, OutputPath, Size, case_options, force_option
from .shared import note, parse_shape, selected_cases


@main.command()
@case_options
@click.option("--shape", "shape_text", help="B,N,d of the input, as fa bench's --shape.")
@click.option("-B", "batches", type=Size("B"), help="Batch size; required for a shape without --shape.")
@click.option("-N", "seq_len", type=Size("N"), help="Sequence length; required for a shape without --shape.")
@click.option("-d", "head_dim", type=int, help="Head dimension, 32 or 64; required for a shape without --shape.")
@click.option("--seed", type=SEED, default=0, show_default=True,
              help="Seed of the random values: the same arguments give the same bytes on every machine.")
@click.option("--dist", type=click.Choice(list(generate.DISTRIBUTIONS)), default="uniform", show_default=True,
              help="Distribution of the values in [-3, 3]; all but uniform stress the softmax.")
@click.option("-o", "--output", type=OutputPath(), help="Input file to write; required with a shape.")
@click.option("--expected", type=OutputPath(),
              help="Also write the float64 reference output (rounded to float32) here.")
@click.option("--strict", is_flag=True, help="Refuse shapes outside the course's ranges.")
@force_option
def gen(cases, all_cases, suite_text, shape_text, batches, seq_len, head_dim, seed, dist, output, expected, strict) -> None:
    """Write suite cases (CASES as fa run takes them: t01 c05, or --suite), checked against their
    sha256, to the suite's place (or -o, for one case); or a seeded random input of a shape
    (--shape B,N,d, or -B -N -d, with -o), byte-identical for the same arguments."""
    names = selected_cases(cases, all_cases, suite_text)
    if names:
        if shape_text or batches or seq_len or head_dim:
            raise click.UsageError("give suite cases or a shape, not both")
        if output and len(names) > 1:
            raise click.UsageError("-o names one file: give one case with it")
        for name in names:
            write_case(suite.case(name), output)
        return
    if shape_text:
        shape = parse_shape(shape_text)
        batches, seq_len, head_dim = shape.B, shape.N, shape.d
    if None in (batches, seq_len, head_dim) or output is None:
        raise click.UsageError("give suite cases (t01 c05, --suite c), or a shape (--shape B,N,d or -B, -N, -d) "
                               "and -o")
    shape = check_shape(batches, seq_len, head_dim, "gen")
    if strict:
        suite.check_course_ranges(shape)
    generate.check_outputs(output, expected, shape)
    with tables.progress(f"writing {output}", shape.B) as advance:
        written = generate.write_input(output, shape, seed, dist, advance)
    lines.echo(f"{output}: {shape}, {dist}, seed {seed}, {shape.input_bytes} bytes")
    if expected:
        try:
            with tables.progress(f"reference {expected}", shape.B) as advance:
                generate.write_expected(AttentionInput(output), expected, advance)
        except BaseException:  # both files or neither: the input just written goes too (the file, not a
            remove_placed(output, written)  # link to it; a device or FIFO written in place stays)
            raise
        lines.echo(f"{expected}: float64 reference, {shape.output_bytes} bytes")


def write_case(c: suite.Case, output) -> None:
    """One suite case, to -o or the suite's place, said with its manifest check."""
    if output:
        generate.check_replaceable(output)
    with tables.progress(f"generating {c.name}", c.shape.B) as advance:
        path = suite.write_case(c, output, advance) if output else suite.ensure_input(c, advance, note)
    lines.echo(f"{path}: {c.shape}, {c.dist}, seed {c.seed}, sha256 matches the manifest")
