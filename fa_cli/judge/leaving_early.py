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

from ..report.tables import one_of
from .findings import Finding, Kind
from .steps import Context, Step

KERNEL = re.compile(r"__global__")
# a return guarded by a condition, on one line: if (row >= N) return; / if (!valid) { return; }
GUARDED_RETURN = re.compile(r"\bif\s*\((?P<condition>.*)\)\s*\{?\s*return\s*;")
BARRIER = re.compile(r"\b__syncthreads\s*\(")
THREAD_NAME = re.compile(r"(\w+)\s*=[^;,=][^;,]*")  # a name given a value: `i = blockIdx.x * 128 + threadIdx.x`
SHOWN = 70  # characters of a line shown


def code_lines(source: Path) -> list[str]:
    """The source's lines, comments blanked (// and /* */), line numbers kept."""
    text = re.sub(r"/\*.*?\*/", lambda m: re.sub(r"[^\n]", " ", m.group()), source.read_text(errors="replace"),
                  flags=re.S)
    return [line.split("//")[0].rstrip() for line in text.splitlines()]


def returns_before_barriers(source: Path) -> list[tuple[tuple[int, str], tuple[int, str]]]:
    """Each return inside a kernel, on a condition that differs between the threads of a block
    (it names threadIdx, or a name given a value from it), that a barrier of the same kernel
    follows: (its line, the first barrier after it), each as (number, text). A kernel ends where
    the next top-level line begins (one not indented)."""
    try:
        lines = code_lines(source)
    except OSError:
        return []
    found, kernel, body, leaving, per_thread = [], False, False, None, set()
    for number, code in enumerate(lines, 1):
        top_level = code[:1] not in ("", " ", "\t", "}", "{", ")", ",")
        if KERNEL.search(code) or (top_level and body):  # a kernel begins, or the one before ended
            kernel, body, leaving, per_thread = bool(KERNEL.search(code)), False, None, set()
        body = body or (kernel and "{" in code)  # top-level lines before its body are its signature
        if not kernel:
            continue
        for name, value in ((m.group(1), m.group()) for m in THREAD_NAME.finditer(code)):
            if "threadIdx" in value or any(re.search(rf"\b{n}\b", value.split("=", 1)[1]) for n in per_thread):
                per_thread.add(name)
        guard = GUARDED_RETURN.search(code)
        if guard and ("threadIdx" in guard["condition"]
                      or any(re.search(rf"\b{n}\b", guard["condition"]) for n in per_thread)):
            leaving = leaving or (number, code.strip()[:SHOWN])
        elif leaving and BARRIER.search(code):
            found.append((leaving, (number, code.strip()[:SHOWN])))
            leaving = None
    return found


class LeftBeforeBarrier(Step):
    """A GPU program wrong in exactly the last, partial block's rows, whose source returns early,
    thread by thread, before a barrier of its kernel."""

    name = "threads that leave before a barrier"

    def applies(self, ctx: Context) -> bool:
        return ctx.kind in ("cuda", "hip") and ctx.program.source is not None and ctx.verdict == "WRONG" \
            and bool(ctx.pattern.get("last_partial_tiles"))

    def run(self, ctx: Context) -> list[Finding]:
        pairs = returns_before_barriers(ctx.program.source)
        if not pairs:
            return []
        N, tiles = ctx.case_shape.N, ctx.pattern["last_partial_tiles"]
        first = N - N % tiles[0]
        name = ctx.program.source.name
        (leave, leaving), (wait, waiting) = pairs[0]
        return [Finding(Kind.MEASURED, [
            f"measured: wrong in exactly the rows of the last, partial block of rows ({first}..{N - 1} of N = {N}, "
            f"for blocks of {one_of(tiles)} rows) and right in every whole block; {name}:{leave} `{leaving}` lets the "
            f"threads past row N leave before the kernel's barrier at {name}:{wait} `{waiting}`: that block's other "
            "rows then compute with the shared data those threads never loaded, at a barrier not every thread "
            "reaches (undefined); a thread past N must still load its share and reach every barrier, only its "
            "store left out"], dict(left_at=leave, barrier_at=wait))]
