"""fa init: a student's starting folder."""
from __future__ import annotations

from pathlib import Path

import click

from .. import starter
from ..report import lines
from .group import main


@main.command(name="init")
@click.argument("folder", type=click.Path(path_type=Path))
def init_cmd(folder) -> None:
    """Start a homework in FOLDER: hw4.cu and hw4.hip with the course's input and output done and
    a plain, correct kernel to make fast (marked TODO(tiles)), the course's example Makefile and a
    short README. Overwrites nothing."""
    for path in starter.create(folder):
        lines.echo(f"wrote {path}")
    lines.echo(f"next: cd {folder} && make hw4 && fa run t01 --program ./hw4")
