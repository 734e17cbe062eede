"""fa's command group: one line and an exit status for every error, Ctrl-C and SIGTERM unwound."""
from __future__ import annotations

import importlib
import os
import signal
import sys

import click

from .. import settings
from ..errors import ExitStatus, FaError, Terminated
from ..report import lines


def raise_terminated(signum, frame):
    raise Terminated(signum)


# Each command and the module that defines it (registering it on `main` when imported).
COMMAND_MODULES = {
    "bench": "bench", "slurm-task": "bench", "cache": "cache", "class": "classroom", "class-task": "classroom",
    "compare": "compare", "devices": "devices", "gen": "gen", "init": "init", "ladder": "ladder", "profile": "profile", "report": "report",
    "resources": "resources", "run": "run", "sweep": "sweep", "system": "system", "verify": "verify",
}


class FaGroup(click.Group):
    """Turns FaError and OSError into one line on stderr and an exit status, never a traceback
    (unless --traceback or FA_DEBUG=1 asks for one); Ctrl-C and SIGTERM into one line too.
    Commands load on demand (COMMAND_MODULES)."""

    def list_commands(self, ctx) -> list[str]:
        return sorted(COMMAND_MODULES)

    def get_command(self, ctx, name: str):
        if name in COMMAND_MODULES and name not in self.commands:
            importlib.import_module(f"{__package__}.{COMMAND_MODULES[name]}")
        return self.commands.get(name)

    def invoke(self, ctx: click.Context):
        signal.signal(signal.SIGTERM, raise_terminated)
        if (threads := settings.math_threads()) is not None:  # fa class's share of the cores for this fa
            import numpy  # noqa: F401  (loaded first: the limit reaches only the libraries loaded)
            from threadpoolctl import threadpool_limits
            threadpool_limits(threads)
        if signal.getsignal(signal.SIGHUP) != signal.SIG_IGN:  # nohup's SIGHUP stays ignored
            signal.signal(signal.SIGHUP, raise_terminated)
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            lines.echo("fa: interrupted", err=True)
            sys.exit(ExitStatus.INTERRUPTED)
        except Terminated as e:
            lines.echo(f"fa: stopped by {signal.Signals(e.signum).name}", err=True)
            sys.exit(128 + e.signum)
        except click.UsageError as e:  # a value refused, an option missing, words left over: one line, as any error
            hint = f" (fa {e.ctx.info_name} --help)" if e.ctx is not None and e.ctx.parent is not None else ""
            lines.echo(f"fa: error: {e.format_message()}{hint}", err=True)
            sys.exit(ExitStatus.BAD_INPUT)
        except BrokenPipeError:  # `fa ... | head`: the reader has what it wanted; nothing to say
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(128 + signal.SIGPIPE)
        except (FaError, OSError, MemoryError) as e:
            if ctx.params.get("traceback") or settings.debug():
                raise
            lines.echo(f"fa: error: {one_line(e)}", err=True)
            sys.exit(e.exit_code if isinstance(e, FaError) else ExitStatus.FAILED if isinstance(e, MemoryError)
                     else ExitStatus.BAD_INPUT)


def one_line(e: Exception) -> str:
    """The error in one line: a name holding a newline or another control character is escaped."""
    if isinstance(e, MemoryError):
        text = "not enough memory for this command (" + " ".join(sys.argv[1:3]) + ")"
    elif isinstance(e, OSError):
        text = f"{e.filename}: {e.strerror}" if e.filename else str(e.strerror or e)
    else:
        text = str(e)
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


@click.group(cls=FaGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(None, "-V", "--version", prog_name="fa", package_name="fa-toolkit")
@click.option("--traceback", is_flag=True, help="Show the traceback of an error (as FA_DEBUG=1 does).")
def main(traceback: bool) -> None:
    """Generate, run, verify and compare FlashAttention homework programs.

    Generated inputs and programs built from an installed fa's sources go to the cache
    directory: FA_CACHE, else the user cache directory (~/.cache/fa on Linux). Exit status:
    0 ok, 1 something did not pass or a tool failed, 2 unusable input or arguments, 130 and
    143 interrupted (Ctrl-C, SIGTERM).
    """
