"""Turns on the GPU for fa processes that judge side by side (fa class judges several students at
once): a timed run (a case's run, whose time is judged) has the GPU to itself; untimed runs (the
reruns, probes and sanitizers that look for a cause) share it with one another, never with a
timed run. Where FA_GPU_TURNS names no lock (one fa alone), no turn is taken.

Two lock files (flock: released by the kernel when their holder dies), a timed turn first in
line: a timed run takes the gate, then the GPU alone, then lets the gate go; an untimed run takes
the gate only to pass it, then the GPU beside others. So untimed runs that keep coming never
keep a timed run waiting past the ones already running.

Where FA_TOOL_SLOTS names a folder and a count (fa class's searches), a compute-sanitizer run
also takes one of that many slots (tool_slot): sanitizer runs on one GPU are served largely one
after another (measured alone: twelve groups of four tools side by side cost 1.9 s of wall each,
four at a time 1.5 s; docs/sandbox.md), so a dozen at once gain nothing over a few."""
from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator

from .. import settings
from . import gpu_shares


SLOT_POLL_S = 0.05
_waited = [0.0]  # seconds this process has waited for its turns: no budget of its own counts them


def waited_s() -> float:
    return _waited[0]


class Turn:
    """A turn held; given back by give_back() (once the program exited: fa's clean-up after it
    needs no GPU) or at the end of its with block, whichever comes first."""

    def __init__(self, fd: int | None = None):
        self.fd = fd

    def give_back(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # the lock goes with the descriptor
            self.fd = None


@contextlib.contextmanager
def turn(timed: bool) -> Iterator[Turn]:
    """The GPU held for one run: alone where timed, beside other untimed runs where not."""
    path = settings.gpu_turns()
    if path is None:
        yield Turn()
        return
    held = Turn(_open(path))
    try:
        asked = time.monotonic()
        with _locked(path + ".gate", fcntl.LOCK_EX):
            fcntl.flock(held.fd, fcntl.LOCK_EX if timed else fcntl.LOCK_SH)
        _waited[0] += time.monotonic() - asked
        yield held
    finally:
        held.give_back()


@contextlib.contextmanager
def tool_slot() -> Iterator[None]:
    """One of FA_TOOL_SLOTS's slots held for one compute-sanitizer run (its tools side by side),
    waited for (a slot is a file locked with flock: its holder's end frees it); no slot where none
    is named. The wait is counted with the turns', as a budget charged it (gpu_shares): no budget
    counts it. Not to be nested: a second slot asked for while one is held may wait for the first."""
    slots = settings.tool_slots()
    if slots is None:
        yield
        return
    folder, count = slots
    asked = time.monotonic()
    while True:
        for i in range(count):
            fd = _open(os.path.join(folder, f"slot-{i}"))
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            try:
                _waited[0] += gpu_shares.charged(asked, time.monotonic())  # as the budget charged it
                yield
            finally:
                os.close(fd)
            return
        time.sleep(SLOT_POLL_S)


@contextlib.contextmanager
def _locked(path: str, how: int) -> Iterator[None]:
    fd = _open(path)
    try:
        fcntl.flock(fd, how)
        yield
    finally:
        os.close(fd)


def _open(path: str) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
