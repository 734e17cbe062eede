"""fa resources: the kernels' compiler reports and occupancy."""
from __future__ import annotations

import dataclasses
import json

import click

from ..measure import pascal, resources
from ..report import lines, tables
from .group import main
from .options import program_option


@main.command(name="resources")
@program_option("cuda", does="reports on",
                help="cuda, hip-cuda, hip, or a source file of your own (hw4.cu, hw4.hip).")
@click.option("--arch", "archs", help="Targets, comma-separated, from: " + ", ".join(resources.TARGETS)
              + " (default: sm_75,sm_80,sm_90 for CUDA, gfx908,gfx90a for HIP).")
@click.option("--json", "as_json", is_flag=True, help="Print the records as JSON.")
def resources_cmd(program, archs, as_json) -> None:
    """Registers, spills, shared memory, threads and theoretical occupancy of every kernel on
    every target, from nvcc's and hipcc's own reports (no GPU needed). sm_61, the course's GTX
    1080, where this nvcc has it no more (CUDA 13): CUDA 12's ptxas assembles nvcc's PTX, and
    refuses what Pascal lacks on its source line (pip install 'fa-toolkit[gtx1080]')."""
    source, hip_source, ours, targets = resources.what_to_compile(program, archs.split(",") if archs else None)
    kernels, commands, notes = [], [], []
    with tables.progress("compiling", len(targets), steps=True) as advance:
        for t in targets:
            found, argv, note = resources.report(source, t, hip_source, ours)
            kernels += found
            commands.append(" ".join(argv))
            notes += [note] if note and note not in notes else []
            advance()
    for note in notes:  # on stderr, the JSON on stdout stays whole
        lines.echo(f"fa: {note}", err=True)
    if as_json:
        click.echo(json.dumps({"records": resources.as_records(kernels, program), "commands": commands,
                               "targets": {t: dataclasses.asdict(resources.TARGETS[t]) for t in targets}}, indent=1))
    else:
        tables.show(tables.resources_table(kernels))
        for line in tables.resources_notes(kernels):
            lines.echo(line)
        if any(pascal.needs_old_ptxas(t) for t in targets):
            lines.echo(pascal.NOTE)
