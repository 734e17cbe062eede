"""fa compare: bench results side by side."""
from __future__ import annotations

from pathlib import Path

import click

from ..measure import compare
from ..programs import wave64
from ..report import lines, tables
from ..report.records import by_kind
from .group import main
from .options import OutputPath, force_option


@main.command(name="compare")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--markdown", "as_markdown", is_flag=True, help="Print a markdown table for a report.")
@click.option("--plot", type=OutputPath(),
              help="Write a chart (PNG) here: stage times per input and run, and time against N.")
@click.option("--wide", is_flag=True, help="One row per input, the runs side by side (wider than 80 columns; "
                                          "with --markdown too).")
@force_option
def compare_cmd(files, as_markdown, plot, wide) -> None:
    """Runs from one or more bench results files, side by side."""
    records = compare.timed_records(by_kind(list(files)))
    if as_markdown:
        click.echo(compare.markdown(records, wide), nl=False)
    else:
        header, body, where = compare.long_rows(records) if not wide else (*compare.rows(records), "")
        tables.show(tables.compare_table(header, body, f"fa compare{where} (whole-process medians)"), wide)
        if note := compare.amd_note(records):
            lines.echo(note)
        for line in compare.judge_words(records):  # a hw4.cu's GTX 1080 time, estimated
            lines.echo(line)
    for line in wave64.compare_findings(records):  # a student's hw4.cu and hw4.hip side by side
        lines.echo(line)
    if plot:
        lines.echo(f"wrote {compare.plot(records, plot)}")
