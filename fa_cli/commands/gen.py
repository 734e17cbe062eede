"""fa gen: a seeded input, or a suite case, written."""
from __future__ import annotations


import click

from ..cases import generate, suite
from ..cases.format import AttentionInput, check_shape
from ..files import remove_placed
from ..report import tables
from .group import main
from .options import SEED, OutputPath, Size, force_option
from .shared import note


@main.command()
@click.option("-B", "batches", type=Size("B"), help="Batch size. Required unless --suite.")
@click.option("-N", "seq_len", type=Size("N"), help="Sequence length. Required unless --suite.")
@click.option("-d", "head_dim", type=int, help="Head dimension, 32 or 64. Required unless --suite.")
@click.option("--seed", type=SEED, default=0, show_default=True,
              help="Seed of the random values: the same arguments give the same bytes on every machine.")
@click.option("--dist", type=click.Choice(list(generate.DISTRIBUTIONS)), default="uniform", show_default=True,
              help="Distribution of the values in [-3, 3]; all but uniform stress the softmax.")
@click.option("-o", "--output", type=OutputPath(), help="Input file to write. Required unless --suite.")
@click.option("--expected", type=OutputPath(),
              help="Also write the float64 reference output (rounded to float32) here.")
@click.option("--suite", "case_name",
              help="Generate a suite case (t01..t30, c01..c30) instead, checked against its sha256; "
                   "to -o if given, else to the suite's place.")
@click.option("--strict", is_flag=True, help="Refuse shapes outside the course's ranges.")
@force_option
def gen(batches, seq_len, head_dim, seed, dist, output, expected, case_name, strict) -> None:
    """Write a seeded random input (byte-identical for the same arguments)."""
    if case_name:
        c = suite.case(case_name)
        if output:
            generate.check_replaceable(output)
        with tables.progress(f"generating {c.name}", c.shape.B) as advance:
            path = suite.write_case(c, output, advance) if output else suite.ensure_input(c, advance, note)
        click.echo(f"{path}: {c.shape}, {c.dist}, seed {c.seed}, sha256 matches the manifest")
        return
    if None in (batches, seq_len, head_dim) or output is None:
        raise click.UsageError("give -B, -N, -d and -o (or --suite NAME)")
    shape = check_shape(batches, seq_len, head_dim, "gen")
    if strict:
        suite.check_course_ranges(shape)
    generate.check_outputs(output, expected, shape)
    with tables.progress(f"writing {output}", shape.B) as advance:
        written = generate.write_input(output, shape, seed, dist, advance)
    click.echo(f"{output}: {shape}, {dist}, seed {seed}, {shape.input_bytes} bytes")
    if expected:
        try:
            with tables.progress(f"reference {expected}", shape.B) as advance:
                generate.write_expected(AttentionInput(output), expected, advance)
        except BaseException:  # both files or neither: the input just written goes too (the file, not a
            remove_placed(output, written)  # link to it; a device or FIFO written in place stays)
            raise
        click.echo(f"{expected}: float64 reference, {shape.output_bytes} bytes")
