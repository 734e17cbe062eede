"""A warp's lanes as the GPU counts them, against the lanes a kernel names: the GPU cuts a block
into warps of consecutive threads, threadIdx.x first (thread x + bx y of a block bx threads wide),
so where a block is narrower than a warp, one warp holds several values of threadIdx.y. A kernel
that takes its lane from threadIdx.y and shuffles then exchanges values between threads of other
threadIdx.x (other rows, where x is the row). Read from the source and the judged run's launch
log (the blocks' shape), said as an observation beside the measurements.
"""
from __future__ import annotations

import re

from ..programs.timing import launches
from .findings import Finding, Kind
from .launch_errors import base_name
from .leaving_early import SHOWN, code_lines
from .steps import Context, Step

LANE_FROM_Y = re.compile(r"\b\w*lane\w*\s*=\s*(?:\(\s*int\s*\)\s*)?threadIdx\.y\b", re.I)
SHUFFLE = re.compile(r"\b__shfl\w*\s*\(")


def read(lines: list[str], logged: list, width: int) -> list[str]:
    """The words where a logged launch's blocks are narrower than a warp (`width` lanes) with more
    than one threadIdx.y, and the source takes a lane from threadIdx.y and shuffles."""
    lane = next(((n, t) for n, t in enumerate(lines, 1) if LANE_FROM_Y.search(t)), None)
    shuffles = [n for n, t in enumerate(lines, 1) if SHUFFLE.search(t)]
    if lane is None or not shuffles:
        return []
    said = []
    for launch in logged:
        bx, by, bz = launch.block
        if bx >= width or by < 2:
            continue
        shown = ", ".join(map(str, shuffles[:4])) + (", ..." if len(shuffles) > 4 else "")
        said.append(
            f"{base_name(launch.kernel)}'s blocks are {bx} x {by} x {bz} threads (fa's launch log of the judged run), "
            f"and the GPU makes its warps of {width} consecutive threads, thread x + {bx} y: one warp holds "
            f"{min(by, width // max(bx, 1))} values of threadIdx.y, each with all {bx} of threadIdx.x; line {lane[0]} "
            f"takes a lane from threadIdx.y (`{lane[1].strip()[:SHOWN]}`): the shuffles (lines {shown}) exchange "
            "values between threads of other threadIdx.x, not between the lanes it names (blocks "
            f"{width} threads wide with the lane in threadIdx.x keep each threadIdx.y a warp of its own)")
    return list(dict.fromkeys(said))


class WarpLanes(Step):
    """A failing GPU program's lanes against its blocks' shape."""

    name = "a warp's lanes against the blocks' shape"

    def applies(self, ctx: Context) -> bool:
        return ctx.verdict in ("WRONG", "ERROR") and ctx.kind != "cpu" and ctx.source is not None and \
            bool(launches(ctx.run_stderr or ""))

    def run(self, ctx: Context) -> list[Finding]:
        try:
            lines = code_lines(ctx.source)
        except OSError:
            return []
        said = read(lines, launches(ctx.run_stderr), 64 if ctx.kind == "hip" else 32)
        return [Finding(Kind.OBSERVED, [f"read in {ctx.source.name} with the launch log: {s}" for s in said])] \
            if said else []
