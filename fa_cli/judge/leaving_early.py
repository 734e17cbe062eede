"""Threads that leave their kernel before a barrier: a classic mistake of a block whose last rows
are past N. `if (i >= N) return;` at the top of a kernel lets those threads skip their share of
the block's shared-memory loads and the barriers after them, so the block's other threads compute
with a tile loaded only in part (and wait at a barrier not every thread reaches: undefined). What
shows, measured: the judged output is wrong in exactly the rows of the last, partial block, and
right in every whole block. The step names it where the source has such a return before a
barrier of the same kernel, with both lines:

  measured: wrong in exactly the rows of the last, partial block of 128 rows (128..199 of N = 200)
  and right in every whole block; hw4.cu:123 `if (!valid) return;` lets the threads past row N
  leave before the kernel's barrier at hw4.cu:137 `__syncthreads();` ...
"""
from __future__ import annotations

import re
from pathlib import Path

from .findings import Finding, Kind
from .steps import Context, Step

KERNEL = re.compile(r"__global__")
# a return guarded by a condition, on one line: if (row >= N) return; / if (!valid) { return; }
GUARDED_RETURN = re.compile(r"\bif\s*\(.*\)\s*\{?\s*return\s*;")
BARRIER = re.compile(r"\b__syncthreads\s*\(")
SHOWN = 70  # characters of a line shown


def returns_before_barriers(source: Path) -> list[tuple[tuple[int, str], tuple[int, str]]]:
    """Each guarded return inside a kernel that a barrier of the same kernel follows: (its line,
    the first barrier after it), each as (number, text), comments left out."""
    try:
        lines = [line.split("//")[0].rstrip() for line in source.read_text(errors="replace").splitlines()]
    except OSError:
        return []
    found, kernel, leaving = [], False, None
    for number, code in enumerate(lines, 1):
        if KERNEL.search(code):
            kernel, leaving = True, None  # a new kernel: a return of the one before does not count
        elif kernel and GUARDED_RETURN.search(code):
            leaving = leaving or (number, code.strip()[:SHOWN])
        elif kernel and leaving and BARRIER.search(code):
            found.append((leaving, (number, code.strip()[:SHOWN])))
            leaving = None
    return found


class LeftBeforeBarrier(Step):
    """A GPU program wrong in exactly the last, partial block's rows, whose source returns early
    before a barrier of its kernel."""

    name = "threads that leave before a barrier"

    def applies(self, ctx: Context) -> bool:
        return ctx.kind in ("cuda", "hip") and ctx.program.source is not None and ctx.verdict == "WRONG" \
            and bool(ctx.pattern.get("last_partial_tiles"))

    def run(self, ctx: Context) -> list[Finding]:
        pairs = returns_before_barriers(ctx.program.source)
        if not pairs:
            return []
        N, T = ctx.case_shape.N, max(ctx.pattern["last_partial_tiles"])
        name = ctx.program.source.name
        (leave, leaving), (wait, waiting) = pairs[0]
        return [Finding(Kind.MEASURED, [
            f"measured: wrong in exactly the rows of the last, partial block of {T} rows ({N - N % T}..{N - 1} of "
            f"N = {N}) and right in every whole block; {name}:{leave} `{leaving}` lets the threads past row N leave "
            f"before the kernel's barrier at {name}:{wait} `{waiting}`: that block's other rows then compute with "
            "the shared data those threads never loaded, at a barrier not every thread reaches (undefined); a "
            "thread past N must still load its share and reach every barrier, only its store left out"],
            dict(left_at=leave, barrier_at=wait))]
