"""fa's children: tools and programs started so that they die with fa (SIGKILL from the kernel
when fa ends, however it ends) and can be stopped with everything they started."""
from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import signal
import subprocess
import sys
import threading

PR_SET_PDEATHSIG = 1  # linux/prctl.h
SETTLE_BOUND_S = 15.0  # the most fa waits for a sandbox's watcher after its command ended (sandbox.SETTLE_S and more)


@functools.cache
def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _die_with(parent: int) -> None:
    """In a child of fa's, before exec: SIGKILL from the kernel when fa ends, however it ends.
    A program runs in a session of its own, so that a time limit can stop all it started: a
    SIGKILLed fa, which can stop nothing, would leave it running on otherwise."""
    _libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # fa ended before the line above
        os._exit(128 + signal.SIGKILL)


def die_with_fa():
    """preexec_fn for Popen: the child dies with fa (Linux; elsewhere None, nothing to do)."""
    if not sys.platform.startswith("linux"):
        return None
    _libc()  # loaded here, not in the forked child
    return functools.partial(_die_with, os.getpid())


STOPPING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # the signals that stop fa (errors.py, commands)


class HeldWhileStarting:
    """A Ctrl-C, SIGTERM or SIGHUP that comes while a child is started is held, and raised by
    release() once the start is over, inside the caller's try that stops the child: raised inside
    the fork (in Python's at-fork hooks, which swallow exceptions) it would be lost, and fa would go
    on as though it never came. fa's own handlers come back in release() (or where the start
    failed), SIGINT's last, so that a signal during the hand-back is held too. Signals reach
    Python's handlers in the main thread only: elsewhere this holds nothing."""

    def __enter__(self):
        self.pending, self.handlers = [], {}
        if threading.current_thread() is threading.main_thread():
            for sig in reversed(STOPPING):  # SIGINT restored last
                self.handlers[sig] = signal.signal(sig, lambda number, frame: self.pending.append(number))
        return self

    def __exit__(self, kind, *exc) -> bool:
        if kind is not None:  # the start failed: fa's handlers back, and a held signal raised over the error
            self.release()
        return False

    def release(self) -> None:
        """fa's handlers back; the held signal, if any, delivered again now to fa's own handler."""
        while self.handlers:
            sig, handler = next(iter(self.handlers.items()))
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
            del self.handlers[sig]
        if self.pending:
            signal.raise_signal(self.pending.pop(0))


# The tools run_tool waits on now, in any thread, by pid; once stop_all() is called, each such wait
# ends in KeyboardInterrupt, as the interrupt of the one thread a signal reaches would.
_live: dict[int, subprocess.Popen] = {}
_stopping = threading.Event()


def stop_all() -> None:
    """Every tool run_tool waits on, in every thread, stopped with all it started (fa class
    interrupted while it judges students side by side); their run_tool calls, and any after, raise
    KeyboardInterrupt."""
    _stopping.set()
    for pid in list(_live):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)


def run_tool(argv: list[str], watch=None, timeout: float | None = None, why_timeout: str = "",
             **kwargs) -> subprocess.CompletedProcess:
    """subprocess.run for a tool fa waits on (a compiler, say): in a session of its own that dies
    with fa, and stopped with everything it started if fa is interrupted or past `timeout`
    (then its stderr says so, and why_timeout after); watch(proc), where given, is called once
    it has started (a sandbox's count of what it starts) and the thread it returns joined at the end."""
    if _stopping.is_set():
        raise KeyboardInterrupt
    with HeldWhileStarting() as held:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True, preexec_fn=die_with_fa(), **kwargs)
    _live[proc.pid] = proc
    if _stopping.is_set():  # stop_all() came between the check above and now: it never saw this one
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    watcher = None
    try:
        held.release()
        watcher = watch(proc) if watch is not None else None
        out, err = proc.communicate(timeout=timeout)
        if _stopping.is_set():
            raise KeyboardInterrupt
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        err += f"\nerror: stopped after {timeout:g} s{why_timeout}"
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    finally:
        _live.pop(proc.pid, None)
        if watcher is not None:  # bounded: a process the kernel never reaps is not waited for forever
            watcher.join(SETTLE_BOUND_S)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)
