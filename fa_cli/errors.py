"""User-facing errors: one line of text and an exit status, never a traceback (unless asked)."""
import enum
import signal


class ExitStatus(enum.IntEnum):
    """What fa's exit code means, for every command."""

    OK = 0
    FAILED = 1  # a check, a case or a run did not pass, or a tool it ran failed
    BAD_INPUT = 2  # unusable input, arguments or setup: fix it and run again (also click's usage errors)
    INTERRUPTED = 128 + signal.SIGINT  # Ctrl-C
    TERMINATED = 128 + signal.SIGTERM


class Terminated(BaseException):
    """SIGTERM or SIGHUP, raised where fa is (commands/group.py), so that it unwinds like Ctrl-C:
    running programs are stopped and temporary files removed on the way out."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def stopped_how(stopped: BaseException) -> tuple[str, int]:
    """How a run was stopped (Ctrl-C, or the signal of a Terminated), in words, and its exit status."""
    signum = stopped.signum if isinstance(stopped, Terminated) else signal.SIGINT
    if signum == signal.SIGINT:
        return "interrupted", ExitStatus.INTERRUPTED
    return f"stopped by {signal.Signals(signum).name}", 128 + signum


class FaError(Exception):
    """An error the user can act on."""

    def __init__(self, message: str, exit_code: ExitStatus = ExitStatus.BAD_INPUT):
        super().__init__(message)
        self.exit_code = exit_code


class FormatError(FaError):
    """A file cannot be used as it is (exit code 2): an input or output of the course's format,
    or a place fa may not write to."""
