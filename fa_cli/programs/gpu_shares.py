"""Shares of the GPU among searches for a cause side by side (fa class's second half): fa class
writes down, as each search starts and ends, how many run at once; a search's budget counts each
second of its wall time as its share of that second (1/k while k searches run). So a search
beside eleven others reaches the steps it reaches alone, and the last one left, alone on the GPU,
is charged in full. Where FA_GPU_SHARES names no log (fa run alone), a second is a second.

The log is one line per change, "MONOTONIC_SECONDS COUNT", appended by the one fa class process
(CLOCK_MONOTONIC is the same clock in every process of the machine)."""
from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from .. import settings


class Sharing:
    """The writer, in fa class: `with sharing.one():` around each search."""

    def __init__(self, log: Path):
        self.log, self.running, self.lock = log, 0, threading.Lock()
        log.write_text("")

    @contextlib.contextmanager
    def one(self) -> Iterator[None]:
        self._change(+1)
        try:
            yield
        finally:
            self._change(-1)

    def _change(self, by: int) -> None:
        with self.lock:
            self.running += by
            with open(self.log, "a") as f:
                f.write(f"{time.monotonic():.6f} {self.running}\n")


def charged(start: float, end: float, log: str | None = None) -> float:
    """The seconds from start to end (time.monotonic) as a search's budget counts them: each second
    divided by the searches running then, as the log says (before its first line, and with no log:
    one)."""
    log = log if log is not None else settings.gpu_shares()
    if not log or end <= start:
        return max(0.0, end - start)
    changes = _read(log)
    total, count, at = 0.0, 1, start
    for when, running in changes:
        if when <= start:
            count = running
            continue
        if when >= end:
            break
        total += (when - at) / max(count, 1)
        at, count = when, running
    return total + (end - at) / max(count, 1)


def _read(log: str) -> list[tuple[float, int]]:
    try:
        text = Path(log).read_text()
    except OSError:  # no log left (the class ended): a second is a second
        return []
    changes = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            changes.append((float(parts[0]), int(parts[1])))
    return changes
