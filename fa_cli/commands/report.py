"""fa report: the course's report as markdown, from results files."""
from __future__ import annotations

from pathlib import Path

import click

from ..report import lines, writeup
from .group import main
from .options import force_option


@main.command(name="report")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("-o", "--output", "out_dir", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Folder for report.md and its charts (created if missing).")
@force_option
def report_cmd(files, out_dir) -> None:
    """Your report, in the course's sections, as markdown (and its PNG charts), from results files
    of fa run, bench, profile, resources (--json), ladder and sweep: your programs' records fill
    the sections, with a marked place in each for your own words; fa's own programs' records
    (cpu, cuda, ..., fa ladder) appear only in a last section, labelled as fa's."""
    lines.echo(f"wrote {writeup.write(list(files), out_dir)}")
