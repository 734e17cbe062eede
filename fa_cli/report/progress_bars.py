"""Progress on stderr: a rich bar on a terminal, numbered lines in a log or a pipe."""
from __future__ import annotations

import contextlib
import sys
import threading
import time
from typing import Iterator

from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                           TimeRemainingColumn)
from rich.text import Text

err_console = Console(stderr=True)


# Progress of a step that is long: where stderr is not a terminal, a line after TICK_AFTER_S and
# then every TICK_EVERY_S (on a terminal the bar itself moves), with the time left where known.
TICK_AFTER_S, TICK_EVERY_S = 10.0, 5.0
_live: Progress | None = None  # the bar on the terminal: a step inside another adds a line to it
_tickers: list = []  # steps under way, innermost last: only it speaks


class _Ticker:
    """Counts what is done and, from a thread, says how far it is while the step is long."""

    def __init__(self, description: str, total: int | None, left=None):
        self.description, self.total, self.done = description, total, 0
        self.left = left  # seconds left, where the caller knows better than a share of the steps
        self.start = time.monotonic()
        self.stop = threading.Event()
        _tickers.append(self)
        self.thread = threading.Thread(target=self._tick, daemon=True)
        self.thread.start()

    def line(self) -> str:
        elapsed = time.monotonic() - self.start
        text = f"fa: {self.description}: "
        if self.total:
            text += f"{self.done} of {self.total} done ({100 * self.done / self.total:.0f}%), {elapsed:.0f} s so far"
            left = self.left() if self.left is not None else None
            if left is not None:
                text += f", about {left:.0f} s left"
            elif self.done:
                text += f", about {elapsed * (self.total - self.done) / self.done:.0f} s left"
        else:
            text += f"{elapsed:.0f} s so far"
        return text

    def _tick(self) -> None:
        if self.stop.wait(TICK_AFTER_S):
            return
        while True:
            if self._speaker() is self:
                print(self.line(), file=sys.stderr, flush=True)
            if self.stop.wait(TICK_EVERY_S):
                return

    @staticmethod
    def _speaker():
        """The innermost step that has been going for TICK_AFTER_S: it alone speaks (a short
        step inside a long one leaves the long one's lines going)."""
        now = time.monotonic()
        return next((t for t in reversed(list(_tickers)) if now - t.start >= TICK_AFTER_S), None)

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        _tickers.remove(self)


class TimeLeftColumn(TimeRemainingColumn):
    """rich's time remaining, or the caller's count of what remains (progress's left)."""

    def render(self, task) -> Text:
        left = task.fields.get("left")
        seconds = left() if left else None
        return Text(f"about {seconds:.0f} s left") if seconds is not None else super().render(task)


@contextlib.contextmanager
def progress(description: str, total: int | None, enabled: bool = True, steps: bool = False,
             left=None) -> Iterator:
    """A progress bar on stderr (total None: unknown); yields a callback that advances it by n.
    On a terminal, a step inside another is one more line of the same bar. Where stderr is not a
    terminal (a log, a pipe), `steps` progress (a command's cases, programs, targets) is one line
    per step, `fa: judging: 2 of 30 done`; and any step still going after TICK_AFTER_S says how far
    it is every TICK_EVERY_S, with the time left: left() where given (seconds, of what remains),
    else the steps' share."""
    global _live
    if not enabled:
        yield lambda n=1: None
        return
    if not err_console.is_terminal:
        ticker = _Ticker(description, total, left)

        def advance(n=1):
            ticker.done += n
            if steps:
                print(f"fa: {description}: {ticker.done}{'' if total is None else f' of {total}'} done",
                      file=sys.stderr, flush=True)

        try:
            if steps and total:
                advance(0)  # at once: the command has started
            yield advance
        finally:
            ticker.close()
        return
    if _live is not None:
        bar = _live
        task = bar.add_task(description, total=total, left=left)
        try:
            yield lambda n=1: bar.advance(task, n)
        finally:
            bar.remove_task(task)
        return
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TimeLeftColumn(), console=err_console, transient=True) as bar:
        _live = bar
        try:
            task = bar.add_task(description, total=total, left=left)
            yield lambda n=1: bar.advance(task, n)
        finally:
            _live = None
