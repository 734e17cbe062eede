"""The command line: fa's group (group.py) and one module per command, each parsing its options
and calling the modules that do the work. A command's module is imported when the command is
asked for (group.COMMAND_MODULES), so that `fa run` loads what run needs and no more."""
from .group import main

__all__ = ["main"]
