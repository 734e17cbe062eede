"""Where the right values went: the output's layout, found by search.

Each wrong value of the program's output on the probe input is looked up among the true output's
values; the pairs (where it was written, where it belongs) are fitted, robustly (random minimal
samples, integer coefficients, the model most pairs agree with), to

    written at = alpha * b + beta * r + gamma * c + delta      (a flat offset of the output)

for the value that belongs at batch b, row r, column c. A transposition, a batch offset, a row or
column shift are all such a formula; fa says the formula and what it means.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..findings import Finding
from ..mistakes import V_LINES
from .readings import measured
from .step import Context, Probe, spans

MATCH_ATOL = 2e-6  # a written value "is" a true value within this (float32 against float64)
CANDIDATES = 3  # true values tried per written value
TRIES = 400
EXPLAINED = 0.9  # of the wrong values the formula must place


def pairs(out: np.ndarray, true: np.ndarray, tol: float) -> tuple[np.ndarray, np.ndarray]:
    """(written at, belongs at) flat offsets: each wrong value against the true values it equals
    (out: the values written, flat, as many as the program wrote)."""
    got, want = out.ravel().astype(np.float64), true.ravel()
    right = np.zeros(got.size, dtype=bool)
    n = min(got.size, want.size)
    right[:n] = np.abs(got[:n] - want[:n]) <= tol
    wrong = np.flatnonzero(~right & np.isfinite(got))
    order = np.argsort(want)
    sorted_want = want[order]
    lo = np.searchsorted(sorted_want, got[wrong] - MATCH_ATOL)
    dest, src = [], []
    for k in range(CANDIDATES):
        at = np.minimum(lo + k, want.size - 1)
        hit = np.abs(sorted_want[at] - got[wrong]) <= MATCH_ATOL
        dest.append(wrong[hit])
        src.append(order[at[hit]])
    return np.concatenate(dest), np.concatenate(src)


def fit(dest: np.ndarray, src: np.ndarray, shape: tuple[int, int, int], wrong: int, seed: int = 0):
    """(alpha, beta, gamma, delta) and the wrong values it places, or None. Where a sample's values
    all belong to one batch b0, alpha and delta cannot be told apart: for batch 1 the whole offset
    is taken as alpha (delta 0: batch b at b * alpha, as a batch offset written otherwise makes it);
    for any other batch alpha is taken as N*d and the shift as delta (nothing says the batches
    between moved too)."""
    B, N, d = shape
    b, rest = np.divmod(src, N * d)
    r, c = np.divmod(rest, d)
    X = np.stack([b, r, c, np.ones_like(b)], axis=1).astype(np.float64)
    rng = np.random.default_rng(seed)
    best, placed = None, 0
    for _ in range(TRIES):
        pick = rng.choice(len(dest), size=4, replace=False)
        one = np.unique(X[pick, 0])  # a sample of one batch: alpha and delta apart by the rule above
        fixed = {} if one.size > 1 else {3: 0.0} if one[0] == 1 else {0: float(N * d)}  # column: its coefficient
        free = [i for i in range(4) if i not in fixed]
        known = sum(X[pick, i] * v for i, v in fixed.items())
        coef = np.zeros(4)
        coef[free], *_ = np.linalg.lstsq(X[pick][:, free], dest[pick].astype(np.float64) - known, rcond=None)
        for i, v in fixed.items():
            coef[i] = v
        coef = np.round(coef)
        hits = len(np.unique(dest[(X @ coef).astype(np.int64) == dest]))
        if hits > placed:
            best, placed = coef.astype(int), hits
    matched = len(np.unique(dest))
    if best is None or placed < EXPLAINED * matched or placed < wrong / 3:  # a third: two batches, one garbage
        return None
    best = one_batch_form(best, dest, src, shape)
    return best, len(np.unique(dest[placed_by(dest, src, best, shape)]))


ONE_BATCH = 0.98  # of the values a formula places, from one batch: the rest are chance matches


def one_batch_form(coef, dest, src, shape) -> np.ndarray:
    """A formula whose values come from one batch b0 (but for a few values that equal a true value by
    chance, in a batch of garbage) was seen only as alpha * b0 + delta: a sample that took a chance
    match fixed alpha at random. Written by fit's one-batch rule instead."""
    B, N, d = shape
    batches, counts = np.unique(src[placed_by(dest, src, coef, shape)] // (N * d), return_counts=True)
    if counts.size == 0 or counts.max() < ONE_BATCH * counts.sum():
        return coef
    b0 = int(batches[np.argmax(counts)])
    offset = int(coef[0]) * b0 + int(coef[3])
    alpha, delta = (offset, 0) if b0 == 1 else (N * d, offset - N * d * b0)
    return np.array([alpha, coef[1], coef[2], delta], dtype=int)


def meaning(coef, shape) -> str:
    """The formula in words, where it is a usual one."""
    B, N, d = shape
    alpha, beta, gamma, delta = (int(x) for x in coef)
    if (alpha, beta, gamma) == (N * d, 1, N) and delta == 0:
        return "O_b written as d x N (transposed): at c*N + r of its batch"
    if (alpha, beta, gamma) == (N * d, d, 1) and delta % (N * d) == 0:
        k = delta // (N * d)
        return f"in batch b {'+' if k > 0 else '-'} {abs(k)} (the output's batch offset)"
    if (alpha, beta, gamma) == (N * d, d, 1) and delta % d == 0:
        k = delta // d
        return f"at row r {'+' if k > 0 else '-'} {abs(k)} (the output's row index)"
    if (alpha, beta, gamma) == (N * d, d, 1):
        return f"{delta:+d} values ({4 * delta:+d} bytes) from its place (the offset of the output or of its file)"
    if (alpha, beta, gamma, delta) == (0, d, 1, 0):
        return "in batch 0 whatever b: no batch offset in the output's index, or one batch short where only " \
               "batch 1 was seen there"
    if (beta, gamma, delta) == (d, 1, 0) and alpha > 0:
        why = {N: ": N, a batch offset missing its * d", 3 * N * d: ": 3*N*d, the input's batch stride"}.get(alpha, "")
        return f"batch b's rows written from b * {alpha} floats where b * N*d = b * {N * d} belongs ({alpha}{why})"
    return "the output's index expression"


class OutputLayout(Probe):
    """Whether the right values were written in other places, and the mapping."""

    name = "where the right values went"

    def applies(self, ctx: Context) -> bool:
        return (ctx.facts.out is not None or ctx.facts.raw is not None) and not ctx.facts.named

    def run(self, ctx: Context) -> list[Finding]:
        true = ctx.facts.true
        out = ctx.facts.out
        if out is None:  # the wrong size: compared where it overlaps, every value placed by the search
            raw = ctx.facts.raw
            out = np.full(true.size, np.nan, dtype=np.float32)
            out[:min(raw.size, true.size)] = raw[:true.size]
            out = out.reshape(true.shape)
            extra = raw[true.size:]
        else:
            extra = np.zeros(0, dtype=np.float32)
        shape = (ctx.probe.shape.B, ctx.probe.shape.N, ctx.probe.shape.d)
        if not (~(np.abs(out - true) <= ctx.tol)).any():
            return []
        found = moved(out, true, ctx.tol, shape, extra)
        if found is None:
            return input_held(ctx, out, shape)
        (alpha, beta, gamma, delta), placed, wrong, where, (dest, src) = found
        rest = rest_of_wrong(out, true, ctx.tol, placed, wrong)
        placed_pairs = placed_by(dest, src, (alpha, beta, gamma, delta), shape)
        moved_from = np.unique(dest[placed_pairs] // (shape[1] * shape[2]))
        only = f", all in batch {moved_from[0]}" if len(moved_from) == 1 and shape[0] > 1 else ""
        share = f"for {placed} of the {wrong} wrong values on {ctx.probe.label}{only}{rest}"
        whole_batches = (beta, gamma) == (shape[2], 1) and delta % (shape[1] * shape[2]) == 0
        copies = copied(out, true, ctx.tol, dest, src, (alpha, beta, gamma, delta), shape)
        if whole_batches and delta == shape[1] * shape[2] and (groups := straddling(out, true, ctx.tol, shape)):
            return measured(ctx, [f"measured: batch b + 1's first rows hold batch b's rows: the value of batch b, row "
                                  f"r, column c is at {where}, {share}; {straddle_words(groups, shape)}"],
                            look=STRADDLE_LOOK, layout=[alpha, beta, gamma, delta], straddling_groups=groups)
        if copies and whole_batches:
            first = list(np.unique(src[placed_pairs] // (shape[1] * shape[2]))) == [0]  # copies of batch 0 alone
            also = (", or every later batch computed from batch 0's own input: its input's batch offset missing, "
                    "as a launch or index given the first batch's pointer for every batch") if first else ""
            rows = np.unique(dest[placed_pairs] // shape[2] % shape[1])
            what = "whole batches repeated" if rows.size == shape[1] else \
                f"rows {spans(rows)} of a batch repeated at the same rows of a later one"
            said = (f"measured: copies, not moves: the right value of batch b, row r, column c is also at {where}, "
                    f"and still in its own place, {share}: {what} (a copy back, or its offset, that "
                    f"takes a batch twice, or a batch index two blocks share{also}); look at the copy back and the "
                    "batch index")
        elif copies and (columns := within_rows(dest[placed_pairs], src[placed_pairs], delta, shape)):
            return measured(ctx, [f"measured: copies, not moves: the right value of batch b, row r, column c is also "
                                  f"at {where}, and still in its own place, {share}: {columns}"],
                            look=("V's index", V_LINES), layout=[alpha, beta, gamma, delta])
        elif copies:
            said = (f"measured: copies, not moves: the right value of batch b, row r, column c is also at {where}, "
                    f"and still in its own place, {share}: two threads computed the same row (a write to a wrong place "
                    "would move the value, not copy it); look at the row a thread takes its Q row or its scores from "
                    "(its row index, a broadcast or shuffle across rows), not at the output's write")
        else:
            said = (f"measured: the right values in the wrong places: the value of batch b, row r, column c was "
                    f"written at {where}, {share}; look at the index of the output's write")
        return measured(ctx, [said], layout=[alpha, beta, gamma, delta])


class Move(NamedTuple):
    """Where an output's wrong values are right values of other places."""
    coef: tuple[int, int, int, int]  # written at = alpha b + beta r + gamma c + delta
    placed: int  # the wrong values the formula places
    wrong: int  # the wrong values
    where: str  # "offset FORMULA of the output (MEANING)"
    pairs: tuple[np.ndarray, np.ndarray]  # (written at, belongs at): what it was fitted on


def moved(out: np.ndarray, true: np.ndarray, tol: float, shape, extra: np.ndarray | None = None) -> Move | None:
    """The Move that places the output's wrong values, or None where no formula places them. extra:
    values written past the output's size, searched too."""
    bad = ~(np.abs(out - true) <= tol)
    wrong = int(np.count_nonzero(bad))
    flat = out.ravel() if extra is None else np.concatenate([out.ravel(), extra])
    dest, src = pairs(flat, true, tol)
    written = wrong - int(np.count_nonzero(out[bad] == 0))  # zeros: places nothing was written to, no move
    found = fit(dest, src, shape, written) if len(np.unique(dest)) >= written / 3 and len(dest) >= 4 else None
    if wrong == 0 or found is None:
        return None
    (alpha, beta, gamma, delta), placed = found
    formula = " + ".join(t for t in (term(alpha, "b"), term(beta, "r"), term(gamma, "c")) if t)
    formula += f" {'+' if delta >= 0 else '-'} {abs(delta)}" if delta else ""
    where = f"offset {formula} of the output ({meaning((alpha, beta, gamma, delta), shape)})"
    return Move((alpha, beta, gamma, delta), placed, wrong, where, (dest, src))


def within_rows(dest: np.ndarray, src: np.ndarray, delta: int, shape) -> str:
    """Where every copy stays in its own row, delta columns on (0 < delta < d): columns delta.. of
    those rows (counted) computed again from V's first columns, in words; else ''."""
    d = shape[2]
    if not 0 < delta < d or not (dest // d == src // d).all():
        return ""
    cols, rows = np.unique(dest % d), np.unique(dest // d).size
    which = "each row" if rows == shape[0] * shape[1] else f"{rows} of the {shape[0] * shape[1]} rows"
    return (f"columns {spans(cols)} of {which} hold the right values of columns {spans(cols - delta)}: the upper "
            f"columns computed with V's first ones (a pass, lane or thread over columns {delta}.. that reads V from "
            "column 0: V's column offset left out), or the first columns' values stored twice; look at V's index")


COPIED = 0.9  # of the values placed, still right in their own place: copies, not moves
HELD = 0.9  # of an output batch's values, the same bits as an input block's: that block, copied


def input_held(ctx: Context, out: np.ndarray, shape) -> list[Finding]:
    """Where each output batch holds, bit for bit, a block of N*d floats of the input (Q, K or V of
    some batch): which block, as a formula of b (the input in its order: a copy back from the
    input's buffer; V_b: nothing computed)."""
    B, N, d = shape
    blocks = ctx.probe.flat().reshape(3 * B, N * d)
    held = []
    for b in range(B):
        same = (blocks == out[b].reshape(1, -1).astype("<f4")).mean(axis=1)
        # the block it holds, where no other block is anywhere near as alike (inputs of repeated values)
        second = np.sort(same)[-2] if same.size > 1 else 0.0
        held.append(int(np.argmax(same)) if same.max() >= HELD and second <= HELD / 2 else -1)
    if -1 in held:
        return []
    m = np.array(held)
    names = [f"{'QKV'[x % 3]}_{x // 3}" for x in held]
    slope = int(m[1] - m[0]) if B > 1 else 0
    formula = (f"block {slope}*b + {m[0]}" if B > 1 and (m == m[0] + slope * np.arange(B)).all() else
               "blocks " + ", ".join(map(str, held)))
    what = "the input in its own order (Q_0, K_0, V_0, Q_1, ...): a copy back whose source is the input's " \
        "buffer (or another pointer into it), not the output's" if (m == np.arange(B)).all() else \
        "blocks of the input: nothing of the attention reaches the output"
    return measured(ctx, [
        f"measured: the output holds the input's values, bit for bit: output batch b is input {formula} of N*d "
        f"floats ({', '.join(names[:4])}{' ...' if B > 4 else ''}) on {ctx.probe.label}: {what}; look at the copy "
        "back's source and the output's pointer"], look=("copies", r"Memcpy\w*\s*\("), held_blocks=held)


def placed_by(dest, src, coef, shape) -> np.ndarray:
    """Which pairs the formula places: the value that belongs at src written at dest."""
    B, N, d = shape
    b, rest = np.divmod(src, N * d)
    r, c = np.divmod(rest, d)
    return (coef[0] * b + coef[1] * r + coef[2] * c + coef[3]) == dest


def copied(out, true, tol, dest, src, coef, shape) -> bool:
    """Whether the values the formula places are also right where they belong (copied there)."""
    hit = placed_by(dest, src, coef, shape)
    if not hit.any():
        return False
    home = src[hit]
    return bool(np.mean(np.abs(out.ravel()[home].astype(np.float64) - true.ravel()[home]) <= tol) >= COPIED)


FLAT_GROUPS = (2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)  # rows a block (or a warp) takes of the flat B*N rows
# where the batch comes from a flat row: `first / N`, `row / N`, `blockIdx.x * ROWS / N`
STRADDLE_LOOK = ("the batch taken from a flat row", r"(?:row|first|flat|idx|gid|base|blockIdx\.\w)\w*[^;=]*/\s*"
                                                     r"(?:N|n|seq\w*|len\w*)\b")


def straddling(out, true, tol, shape) -> list[int]:
    """The group sizes R (of FLAT_GROUPS) for which the wrong rows are exactly, in every batch b >= 1,
    the flat rows b*N up to the next multiple of R: a group of R flat rows that straddles two batches
    computes all of its rows in its first row's batch. [] where none fits, or fewer than two batches
    start inside a group: one batch's first rows alone fit some R whatever made them wrong."""
    B, N, _ = shape
    wrong = (~(np.abs(out - true) <= tol)).any(axis=2).ravel()
    fits = []
    for R in (r for r in FLAT_GROUPS if r < N and N % r):  # a group within a batch's rows: no whole batch wrong
        expect = np.zeros(B * N, dtype=bool)
        inside = [b for b in range(1, B) if b * N % R]  # batches that start inside a group
        for b in inside:
            expect[b * N:min(-(-b * N // R) * R, (b + 1) * N)] = True
        if len(inside) >= 2 and np.array_equal(wrong, expect):
            fits.append(R)
    return fits


def straddle_words(groups: list[int], shape) -> str:
    R, N = " or ".join(map(str, groups)), shape[1]
    return (f"the wrong rows are, in each batch after the first, exactly its rows before the next multiple of {R} "
            f"flat rows (b*N + i): a group of {R} flat rows (a block's, or a warp's) that straddles two batches takes "
            f"the batch of its first row for all of its rows, reading batch b's Q, K and V where batch b + 1's belong "
            f"(N = {N} is no multiple of {R}); look at where the batch index is taken: once for the group where each "
            "row's own b = row / N belongs")


def term(coef: int, name: str) -> str:
    return "" if coef == 0 else name if coef == 1 else f"{coef}*{name}"


def rest_of_wrong(out, true, tol, placed, wrong) -> str:
    """What the wrong values the formula does not place hold, where it leaves some."""
    if placed >= wrong:
        return ""
    bad = out[~(np.abs(out - true) <= tol)]
    zeros = int(np.count_nonzero(bad == 0))
    return f" (of the other {wrong - placed}, {zeros} are 0: places nothing was written to)" if zeros else ""
