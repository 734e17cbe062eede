"""How long each step of a search for a cause took, where fa class asks (FA_STEP_TIMES names a
file): one JSON line a step (its wall seconds, those spent waiting for the GPU or a sanitizer slot,
and those its budget counted) and one a compute-sanitizer run (its tools, whether each finished).
fa class keeps them in the student's record and names the longest step of its longest searches,
so that a class that takes longer than its programs' runs says where the time went."""
from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Callable

from .. import settings
from ..programs import gpu_turns


def note(what: str, **figures) -> None:
    """One line for `what`, where FA_STEP_TIMES names a file (else nothing)."""
    path = settings.step_times()
    if path:
        with contextlib.suppress(OSError), open(path, "a") as f:  # a record of time, never a search's end
            f.write(json.dumps(dict(what=what, **figures)) + "\n")


@contextlib.contextmanager
def timed(what: str, counted: Callable[[], float] = lambda: 0.0, **figures) -> Iterator[None]:
    """The block's wall seconds, the part of them spent waiting for a turn on the GPU or a sanitizer
    slot, and counted()'s growth (a budget's seconds used) noted as `what`'s."""
    began, waited, used = time.monotonic(), gpu_turns.waited_s(), counted()
    try:
        yield
    finally:
        note(what, wall_s=round(time.monotonic() - began, 2), waited_s=round(gpu_turns.waited_s() - waited, 2),
             counted_s=round(counted() - used, 2), **figures)


def read(path: Path) -> list[dict]:
    """The lines kept at path (none where there is no file; a line cut short by a stop, or one that
    is not fa's, is left out)."""
    try:
        text = path.read_text()
    except OSError:
        return []
    kept = []
    for line in text.splitlines():
        with contextlib.suppress(ValueError):
            entry = json.loads(line)
            if isinstance(entry, dict) and all(isinstance(entry.get(k), (int, float)) for k in ("wall_s", "waited_s")):
                kept.append(entry)  # (another program with the variable in its environment may write here too)
    return kept


def longest(lines: list[dict]) -> str:
    """The step that took the longest wall time, where it took a second or more, in words: "120 s in
    the race check of a passing build; 80 s of it waiting for the GPU"; else empty."""
    steps = [line for line in lines if "counted_s" in line]
    step = max(steps, key=lambda line: line["wall_s"], default=None)
    if step is None or step["wall_s"] < 1:
        return ""
    waited = f"; {step['waited_s']:.0f} s of it waiting for the GPU" if step["waited_s"] >= 1 else ""
    return f"{step['wall_s']:.0f} s in {step['what']}{waited}"
