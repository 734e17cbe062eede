"""fa system: this machine as the report asks for it."""
from __future__ import annotations

import json

import click

from ..programs import system
from ..report import tables
from .group import main


@main.command(name="system")
@click.option("--json", "as_json", is_flag=True, help="Print it as JSON.")
def system_cmd(as_json) -> None:
    """This machine as the course's report asks for it (section 3a): CPU, cores, memory, disk,
    GPUs, driver, CUDA or ROCm version."""
    spec = system.describe()
    if as_json:
        click.echo(json.dumps(spec, indent=1))
        return
    tables.show(tables.system_table(spec))
