"""Processes that draw pieces of an input into its file, for generate.py: numpy takes the GIL for
every batch's stream, so threads queue on it where an input has many small batches (suite c's c11:
13600), and processes do not.

Each is a Python process of fa's own, forked from fa where fa has one thread (_Forked), else
started anew (BOOTSTRAP); started once per fa process, in a session of its own, so that Ctrl-C
reaches fa alone; it ends when its standard input closes, which fa's end
does however it ends (a kill -9 too), at the end of the task in hand. A
task is a pickled (path, first value, values, fill, reserve) on its standard input, with fill a partial of
one of generate.py's module functions; it maps that part of the file, fills it, and answers one
line: "ok", or the error. A process that dies breaks the pool (Broken): generate.py draws the
pieces it did not in fa itself, in their turn, and starts a new pool for the next input. Not
multiprocessing: its spawn and forkserver start each worker by running
the parent's main module again, which for `python -m fa_cli` is fa itself.
"""
from __future__ import annotations

import atexit
import functools
import mmap
import os
import pickle
import queue
import signal
import struct
import subprocess
import sys
import threading
import warnings
from concurrent.futures import Future
from pathlib import Path
from typing import Callable

import numpy as np

from .. import settings
from .format import HEADER_BYTES

LENGTH = struct.Struct("<Q")  # each pickled task is preceded by its length


class Broken(Exception):
    """A drawing process died or answered nonsense."""


class DrawingProcesses:
    def __init__(self, count: int):
        self.tasks: queue.SimpleQueue = queue.SimpleQueue()
        # Forked where fa has no other thread (a few ms each, numpy loaded already); else started
        # anew (BOOTSTRAP), each loading Python and numpy: 0.9 s for 16 of them on the H200, which a
        # re-run waited for before its first case. No death signal from the kernel: the thread that
        # starts them may end before fa does; their input's end is fa's.
        fork = hasattr(os, "fork") and threading.active_count() == 1
        self.procs = [_Forked() if fork else _started() for _ in range(count)]
        self.ready = [threading.Event() for _ in self.procs]
        for proc, ready in zip(self.procs, self.ready):  # a feeder thread each: it waits on the answer, not the GIL
            threading.Thread(target=self._feed, args=(proc, ready), daemon=True).start()
        atexit.register(self.close)

    def wait_ready(self) -> None:
        """Until every process has loaded what it draws with (or died): fa runs no program while
        they start, so that a timed run has the machine to itself."""
        for ready in self.ready:
            ready.wait()

    def submit(self, path: str, start: int, count: int, fill, reserve: bool = True) -> Future:
        future: Future = Future()
        self.tasks.put((future, pickle.dumps((path, start, count, fill, reserve))))
        return future

    def _feed(self, proc: subprocess.Popen | _Forked, ready: threading.Event) -> None:
        try:
            proc.stdout.readline()  # "ready" (or nothing: it died, and its tasks will say so)
        except (OSError, ValueError):
            pass
        ready.set()
        while True:
            item = self.tasks.get()
            if item is None:
                return
            future, task = item
            try:
                proc.stdin.write(LENGTH.pack(len(task)) + task)
                proc.stdin.flush()
                answer = proc.stdout.readline().decode(errors="replace").strip()
            except (OSError, ValueError):
                answer = ""
            if answer == "ok":
                future.set_result(None)
            else:
                future.set_exception(Broken(answer or f"a drawing process ended (exit status {proc.poll()})"))

    def close(self) -> None:
        for _ in self.procs:
            self.tasks.put(None)
        for proc in self.procs:
            try:
                proc.stdin.close()
            except OSError:
                pass

def _started() -> subprocess.Popen:
    """A drawing process started anew: a Python of its own that loads fa_cli and numpy."""
    package_parent = str(Path(__file__).resolve().parent.parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_parent, settings.python_path()]))}
    return subprocess.Popen([sys.executable, "-c", BOOTSTRAP, package_parent], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, start_new_session=True)


class _Forked:
    """A drawing process forked from fa (only where fa has one thread: a lock another thread held
    would stay held in the child), in a session of its own, with nothing of fa's open but its two
    pipes (standard input and output) and /dev/null for errors; what Popen offers of it to fa."""

    def __init__(self):
        task_r, task_w = os.pipe()
        answer_r, answer_w = os.pipe()
        with warnings.catch_warnings():
            # Python 3.12 warns of any other OS thread: here numpy's BLAS threads, idle (BLAS forks
            # cleanly, with handlers of its own), and a drawing process never calls BLAS.
            warnings.simplefilter("ignore", DeprecationWarning)
            self.pid = os.fork()
        if self.pid == 0:
            try:
                os.setsid()
                os.dup2(task_r, 0)
                os.dup2(answer_w, 1)
                os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
                os.closerange(3, 1 << 16)
                serve(open(0, "rb", closefd=False), open(1, "wb", closefd=False))
            finally:
                os._exit(0)
        os.close(task_r)
        os.close(answer_w)
        self.stdin, self.stdout = open(task_w, "wb"), open(answer_r, "rb")
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self) -> int:
        if self.returncode is None:
            self.returncode = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
        return self.returncode

    def kill(self) -> None:
        if self.poll() is None:
            os.kill(self.pid, signal.SIGKILL)


# The processes are started for an input of FROM_BYTES or more; smaller ones are drawn on threads
# (never kept waiting for the processes to start), unless the processes are up already: then they
# draw those too (on the H200, suite c's 16 MB inputs took 25 to 70 ms each on threads, which hold
# the GIL for each batch's stream, against 4 GB/s by the processes).
FROM_BYTES = 64 << 20
_starting = threading.Lock()
_up: list[DrawingProcesses] = []  # the pool, once started (empty again after it broke)


def drawing_way(input_bytes: int, in_place: bool) -> str:
    """"processes" where an input is drawn by these processes (a scratch file rewritten in place,
    of FROM_BYTES or more, or of any size once they are up), else "threads"."""
    return "processes" if in_place and (input_bytes >= FROM_BYTES or _up) else "threads"


@functools.lru_cache(maxsize=1)
def _pool(count: int) -> DrawingProcesses | None:
    try:
        return DrawingProcesses(count)
    except OSError:
        return None


def pool(count: int) -> DrawingProcesses | None:
    """The drawing processes, started once (by whichever thread asks first); None where they
    cannot be started."""
    with _starting:
        processes = _pool(count)
        _up[:] = [processes] if processes is not None else []
        return processes


def start(count: int) -> None:
    """The pool started: now, where it can be forked (a few ms), else on a thread of its own beside
    fa's work (each process loading Python and numpy)."""
    if hasattr(os, "fork") and threading.active_count() == 1:
        pool(count)
    else:
        threading.Thread(target=pool, args=(count,), daemon=True).start()


def _clear() -> None:
    """After the pool broke: the next input of FROM_BYTES or more starts a new one."""
    _up.clear()
    _pool.cache_clear()


pool.cache_clear = _clear


# A drawing process imports fa_cli from fa's own package folder (argv[1]), never from the folder
# it was started in: `python -m` and `-c` put that folder first, where a student's queue.py or a
# copy of fa_cli would be imported instead, and a proven input's bytes are not hashed again.
BOOTSTRAP = ("import sys; sys.path[:] = [sys.argv[1]] + [p for p in sys.path if p not in ('', '.')]; "
             "from fa_cli.cases.drawing_processes import serve; serve()")


def serve(stdin=None, stdout=None) -> None:
    """A drawing process: "ready" once loaded (numpy), then tasks from standard input until it
    closes (a task's fill, unpickled, imports generate.py)."""
    stdin, stdout = stdin or sys.stdin.buffer, stdout or sys.stdout.buffer
    stdout.write(b"ready\n")
    stdout.flush()
    while header := stdin.read(LENGTH.size):
        path, start, count, fill, reserve = pickle.loads(stdin.read(LENGTH.unpack(header)[0]))
        try:
            fill_part(path, start, count, fill, reserve)
            stdout.write(b"ok\n")
        except Exception as e:  # said to fa, which draws the input on threads instead
            stdout.write(f"{type(e).__name__}: {e}".replace("\n", " ").encode() + b"\n")
        stdout.flush()


def fill_part(path: str, start: int, count: int, fill: Callable[[np.ndarray], None], reserve: bool = True) -> None:
    """In a drawing process: the piece's values drawn into its part of the file, through a mapping of
    the pages that hold them, reserved first where `reserve` (a full disk is an error answered).
    Not on a file system in memory: reserving there takes the file's lock, so the pages of a new
    input would be allocated and zeroed on one core at a time, where faults take them on every
    core; a full one kills this process (SIGBUS), and fa reserves the piece itself and says so."""
    first = HEADER_BYTES + 4 * start
    page = first - first % mmap.ALLOCATIONGRANULARITY
    fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    try:
        if reserve:
            os.posix_fallocate(fd, first, 4 * count)
        with mmap.mmap(fd, first + 4 * count - page, offset=page) as pages:
            dest = np.frombuffer(pages, dtype="<f4", count=count, offset=first - page)
            fill(dest)
            del dest
    finally:
        os.close(fd)
