"""The usual mistakes of the FlashAttention homework, each written as what it computes.

Every entry of MISTAKES is a small function of a Sample (Q, K and V of a few batches of the
input, the rows looked at, and the output the program wrote there) that yields the output the
mistake would give on those rows, in float64: a Candidate. diagnose.py names a mistake only
when its candidate agrees with the program's output on nearly every value looked at and on
nearly every wrong one; fa never guesses beyond that.

A candidate may look at some rows only (`judged`), and may say that some rows are not written
at all (`unwritten`: zero or garbage, anything but the right answer).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np

# Key-tile widths a program may use (Bc): the tile mistakes are tried with each.
KEY_TILES = (16, 32, 64, 128)
# exp(x) overflows float32 past this: where a row's largest logit exceeds it, a program that
# does not subtract the row max gets inf, and inf / inf = NaN.
FLOAT32_EXP_LIMIT = float(np.log(np.finfo(np.float32).max))


@dataclass
class Sample:
    """What a mistake's function sees: batches `batches` of the input (q, k, v as float64,
    shaped (G, N, d)), the same `rows` of each, and the program's output there (G, R, d)."""

    batches: np.ndarray
    rows: np.ndarray
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    got: np.ndarray
    correct: np.ndarray  # float64 attention on the same rows
    wrong: np.ndarray  # (G, R, d) booleans: got is over the tolerance (or not finite)
    qkv_of: Callable[[int], tuple]  # any batch's q, k, v (float32 views), for neighbours
    # (G,) each sampled batch's first wrong row in the check of every row (N: none wrong), where
    # that check was made: a mistake about rows then names the row the location lines name
    first_wrong: np.ndarray | None = None

    @property
    def N(self) -> int:
        return self.k.shape[1]

    @property
    def d(self) -> int:
        return self.k.shape[2]

    def logits(self, scale: float | None = None, q: np.ndarray | None = None, k: np.ndarray | None = None):
        """(G, R, N) scores of the sampled rows: (q k^T) * scale, 1/sqrt(d) by default."""
        q = self.q if q is None else q
        k = self.k if k is None else k
        scale = 1.0 / np.sqrt(self.d) if scale is None else scale
        return np.matmul(q[:, self.rows], k.transpose(0, 2, 1)) * scale


@dataclass
class Candidate:
    values: np.ndarray  # (G, R, d): the output this mistake gives
    label: str = ""  # the variant, e.g. "key tiles of 32"
    judged: np.ndarray | None = None  # (G, R) rows this candidate speaks for (None: every row)
    unwritten: np.ndarray | None = None  # (G, R) rows it says were never written


def softmax_times(logits: np.ndarray, v: np.ndarray) -> np.ndarray:
    """softmax(logits) v, the row max subtracted."""
    p = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return np.matmul(p, v) / p.sum(axis=-1, keepdims=True)


def no_scale(s: Sample) -> Iterator[Candidate]:
    yield Candidate(softmax_times(s.logits(1.0), s.v))


def scaled_by_one_over_d(s: Sample) -> Iterator[Candidate]:
    yield Candidate(softmax_times(s.logits(1.0 / s.d), s.v))


def no_row_max(s: Sample) -> Iterator[Candidate]:
    logits = s.logits()
    overflow = logits.max(axis=-1) > FLOAT32_EXP_LIMIT
    if overflow.any():
        values = s.correct.copy()
        values[overflow] = np.nan
        yield Candidate(values)


def not_normalized(s: Sample) -> Iterator[Candidate]:
    logits = s.logits()
    yield Candidate(np.matmul(np.exp(logits - logits.max(axis=-1, keepdims=True)), s.v))


def last_tile_sum_only(s: Sample) -> Iterator[Candidate]:
    logits = s.logits()
    p = np.exp(logits - logits.max(axis=-1, keepdims=True))
    for bc in KEY_TILES:
        if s.N > bc:
            last = (s.N - 1) // bc * bc
            yield Candidate(np.matmul(p, s.v) / p[..., last:].sum(axis=-1, keepdims=True), f"key tiles of {bc}")


def first_tile_only(s: Sample) -> Iterator[Candidate]:
    logits = s.logits()
    for bc in KEY_TILES:
        if s.N > bc:
            yield Candidate(softmax_times(logits[..., :bc], s.v[:, :bc]), f"the first {bc} keys")


def rows_not_written(s: Sample) -> Iterator[Candidate]:
    """Rows from some R on left as they were (zero or garbage): a grid too small for N."""
    if s.first_wrong is not None:  # the first wrong row of each batch, from every row checked
        starts = s.first_wrong
    else:  # only the sampled rows are known
        bad_rows = s.wrong.any(axis=2)
        starts = np.where(bad_rows.any(axis=1), s.rows[np.argmax(bad_rows, axis=1)], s.N)
    if starts.min() == 0 or starts.min() >= s.N:
        return
    R = int(starts.min())
    unwritten = s.rows[None, :] >= starts[:, None]
    yield Candidate(np.where(unwritten[..., None], 0.0, s.correct), f"rows from {R} on", unwritten=unwritten)


def previous_batch(s: Sample) -> Iterator[Candidate]:
    """Batch b holds batch b-1's output (an offset of one batch); batch 0 is not judged."""
    values = np.zeros_like(s.correct)
    judged = np.zeros(s.got.shape[:2], dtype=bool)
    for g, b in enumerate(s.batches):
        if b > 0:
            q, k, v = (np.asarray(x, dtype=np.float64) for x in s.qkv_of(int(b) - 1))
            logits = np.matmul(q[s.rows], k.T) / np.sqrt(s.d)
            values[g] = softmax_times(logits, v)
            judged[g] = True
    if judged.any():
        yield Candidate(values, judged=judged)


def transposed(s: Sample) -> Iterator[Candidate]:
    """O_b written as d x N: the file's value at (row r, column c) is O_b[(r*d+c) % N, (r*d+c) // N].
    Judged on the first few sampled rows, which need d rows of O each."""
    G, R, d, N = len(s.batches), len(s.rows), s.d, s.N
    look = min(R, 4)
    flat = s.rows[:look, None] * d + np.arange(d)  # (look, d) positions in the batch's block
    src_row, src_col = flat % N, flat // N
    values = np.zeros_like(s.correct)
    for g in range(G):
        logits = np.matmul(s.q[g][src_row.reshape(-1)], s.k[g].T) / np.sqrt(d)
        o = softmax_times(logits, s.v[g]).reshape(look, d, d)
        values[g, :look] = np.take_along_axis(o, src_col[:, :, None], axis=2)[..., 0]
    judged = np.zeros((G, R), dtype=bool)
    judged[:, :look] = True
    yield Candidate(values, judged=judged)


def q_and_k_swapped(s: Sample) -> Iterator[Candidate]:
    yield Candidate(softmax_times(s.logits(q=s.k, k=s.q), s.v))


def v_as_output(s: Sample) -> Iterator[Candidate]:
    yield Candidate(s.v[:, s.rows])


def all_zeros(s: Sample) -> Iterator[Candidate]:
    yield Candidate(np.zeros_like(s.correct))


@dataclass(frozen=True)
class Mistake:
    name: str  # what fa prints after "looks like:"
    hint: str  # where to look
    outputs: Callable[[Sample], Iterator[Candidate]]


MISTAKES = (
    Mistake("no 1/sqrt(d) scale", "scores should be Q K^T / sqrt(d)", no_scale),
    Mistake("scaled by 1/d instead of 1/sqrt(d)", "scores should be Q K^T / sqrt(d)", scaled_by_one_over_d),
    Mistake("no row max subtracted", "exp(s) overflows float32 where logits pass 88; use exp(s - m)", no_row_max),
    Mistake("not normalized", "O must be divided by the row sum l at the end", not_normalized),
    Mistake("normalized by the last key tile's sum only",
            "l must carry over tiles: l = l * exp(m_old - m_new) + sum of this tile", last_tile_sum_only),
    Mistake("only the first key tile attended", "the loop over K/V tiles stops after one tile", first_tile_only),
    Mistake("rows not written", "the grid (or a bound) covers too few query rows", rows_not_written),
    Mistake("batch b holds batch b-1's output", "an offset of one batch in the output (or input) index",
            previous_batch),
    Mistake("O written transposed (d x N per batch)", "O's index should be row * d + column", transposed),
    Mistake("Q and K swapped (softmax(K Q^T) V)", "scores are q_i . k_j for query row i", q_and_k_swapped),
    Mistake("V returned as O", "the output is V itself: nothing was computed or copied back", v_as_output),
    Mistake("all zeros", "nothing was written, or the copy back to the host is missing", all_zeros),
)
