"""The command line: fa's group (group.py) and one module per command, each parsing its options
and calling the modules that do the work. Importing this package registers every command."""
from . import (bench, cache, compare, devices, gen, init, ladder, profile, report, resources, run, sweep,  # noqa: F401
               system, verify)
from .group import main

__all__ = ["main"]
