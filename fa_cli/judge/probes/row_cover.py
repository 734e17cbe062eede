"""Rows never written at the probe's N, looked at over other Ns: rows that are a batch's last ones
at every N fit a count of row tiles that stops short; rows never written with rows after them
written do not: the blocks' map onto the row tiles leaves some unvisited (an XOR swizzle of
blockIdx over groups of tiles applied to a partial last group: set44's s04; a persistent loop's
start or step)."""
from __future__ import annotations

import numpy as np

from . import design
from .step import Context, spans

OTHER_NS = (1000, 1800)  # remainders of every kind modulo row tiles of 8 to 128; a second or so a run
RUNS_S = 3.0  # the budget the runs need left: a few runs of a small probe
TRIAL_BATCHES = 2

# the lines that map a block onto its row tile: a swizzle (an XOR of an index with its own shifted
# bits), blockIdx taken modulo or XOR something, a persistent loop stepping by the grid
TILE_MAP_LOOK = ("the block's row tile (a remap of blockIdx, a persistent loop's step)",
                 (r"\b(?:tile|blk|block|bx|x)\w*\s*\^\s*\(\s*\(?\s*(?:tile|blk|block|bx|x)\w*\s*>>",
                  r"blockIdx\.\w\s*[\^%&]", r"\+=\s*gridDim\.\w"))


def unwritten_rows(ctx: Context, N: int) -> tuple[np.ndarray, np.ndarray] | None:
    """((B, N) rows that hold 0 in two runs with different V, (B, N) rows right in the first run) at
    N rows (the probe grown or cut to N, its first TRIAL_BATCHES batches): None where a run wrote no
    output of the right size."""
    first = design.shrunk(ctx.probe, B=min(TRIAL_BATCHES, ctx.probe.shape.B))
    inp = design.grown(first, N) if N > first.shape.N else design.shrunk(first, N)
    outs = [ctx.run(inp), ctx.run(inp.with_v(-inp.v - 1.0, f"{inp.label} with V -V - 1"))]
    if any(out is None for out in outs):
        return None
    with np.errstate(invalid="ignore"):
        right = (np.abs(outs[0] - inp.output()) <= ctx.tol).all(axis=2)
    return np.logical_and.reduce([(out == 0).all(axis=2) for out in outs]), right


def rows_skipped(ctx: Context) -> str | None:
    """Words for rows never written with later rows written and right, the same rows in every batch,
    at the first of OTHER_NS that shows them (None where every N's unwritten rows are a batch's last
    ones, or the budget is short)."""
    for N in OTHER_NS:
        if ctx.budget.left < RUNS_S or N == ctx.probe.shape.N:
            continue
        found = unwritten_rows(ctx, N)
        if found is None or not found[0].any():
            continue
        still, right = found
        rows = np.flatnonzero(still[0])
        if not (still == still[0]).all() or rows[-1] == N - 1:
            continue  # batches apart, or rows to the last one: a count that stops short fits
        after = np.arange(rows[-1] + 1, N)
        if not right[:, after].all():
            continue
        return (f"at N = {N} (2 runs, V and -V - 1) rows {spans(rows)} of every batch hold 0 in both (never written, "
                f"or computed from values of V that read 0) while the {after.size} rows after them are right: not a "
                "count of row tiles that stops short; the blocks' map onto the row tiles leaves some unvisited (a "
                "remap or swizzle of blockIdx that is no permutation where the tiles do not fill its group, a "
                "persistent loop's start or step)")
    return None


# the lines that decode a row's place by a power of two: a shift by a log, a mask built by a shift,
# and where the log is taken (log2, __ffs / __clz, a loop doubling up to N)
SHIFT_DECODE_LOOK = ("a row's place decoded by a power of two (a shift or mask, the log taken)",
                     (r">>\s*\(?\s*\w*(?:log|lg|shift)\w*", r"&\s*\(\s*\(?\s*\w+\s*<<",
                      r"\blog2f?\s*\(|__ffs|__clz|<<\s*\w+\s*\)\s*<=\s*[\w.]*N\b"))


def power_of_two_cut(ctx: Context, rows: np.ndarray, N: int) -> str | None:
    """Words for rows never written from the largest power of two under N on, where a run at another
    N shows the same (rows from its largest power of two on) and a count of row tiles of that
    power would stop elsewhere: a row's place decoded with log2 N rounded down. None otherwise."""
    P = 1 << (N.bit_length() - 1)
    if P == N or not np.array_equal(rows, np.arange(P, N)):
        return None
    for other in OTHER_NS:
        Q = 1 << (other.bit_length() - 1)
        if ctx.budget.left < RUNS_S or other // P * P == Q:  # tiles of P would stop at Q there too
            continue
        found = unwritten_rows(ctx, other)
        if found is None or not (found[0] == found[0][0]).all() or \
                not np.array_equal(np.flatnonzero(found[0][0]), np.arange(Q, other)):
            return None
        return (f"at N = {other} too (2 runs, V and -V - 1) rows {Q}..{other - 1} of every batch hold 0 in both: at "
                f"each N the rows from the largest power of two under it on ({P} of {N}, {Q} of {other}), where row "
                f"tiles of {P} would stop at {other // P * P}: a row's place decoded by a shift or a mask of log2 N "
                "rounded down, right only where N is a power of two")
    return None
