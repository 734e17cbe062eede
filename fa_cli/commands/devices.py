"""fa devices: the GPUs here and what runs here."""
from __future__ import annotations



from ..programs import ready
from ..programs.devices import list_devices
from ..report import lines, tables
from .group import main


@main.command(name="devices")
def devices_cmd() -> None:
    """List GPUs (NVIDIA through the CUDA driver, AMD through hip-python, pip install .[amd]) and
    what can run here: CUDA and HIP programs, the compilers, the profilers."""
    found = list_devices()
    if not found:
        lines.echo("no GPU found")
    else:
        tables.show(tables.devices_table(found))
    lines.echo("\nwhat runs here:\n" + "\n".join(f"  {line}" for line in ready.here()))
