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

from . import reference

# Key-tile widths a program may use (Bc): the tile mistakes are tried with each.
KEY_TILES = (16, 32, 64, 128)
# Query-tile heights (Br) a block may take: the mistake about a tile's rows is tried with each.
QUERY_TILES = (8, 16, 32, 64, 128)
# Softmax over the queries needs every score of a batch: tried only up to this much work per batch
# (N*N*d multiply-adds: N = 4096 at d = 64).
QUERY_AXIS_WORK = 1 << 28
QUERY_AXIS_BATCHES = 2  # of the sampled batches, those the softmax over the queries is tried on
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


def batch_offset_times(s: Sample) -> Iterator[Candidate]:
    """Batch b's output written at batch f * b's place (an output offset f times too large: bytes
    added to a float pointer, f = 4): judged on the sampled batches f * b, which hold batch b's
    (not batch 2 for f = 2: it would hold batch 1's for an offset of one batch as well)."""
    for f in OFFSET_FACTORS:
        judged = (s.batches > 0) & (s.batches % f == 0) & (s.batches // f != s.batches - 1)
        if not judged.any():
            continue
        values = np.zeros_like(s.correct)
        for g in np.flatnonzero(judged):
            q, k, v = (np.asarray(x, dtype=np.float64) for x in s.qkv_of(int(s.batches[g]) // f))
            values[g] = softmax_times(np.matmul(q[s.rows], k.T) / np.sqrt(s.d), v)
        yield Candidate(values, f"f = {f}", judged=np.broadcast_to(judged[:, None], s.got.shape[:2]))


OFFSET_FACTORS = (4, 2, 3, 8)  # sizeof(float) first: a byte count added to a float pointer


def state_carried(s: Sample) -> Iterator[Candidate]:
    """m, l and o carried from row i - T into row i (set once, not for each query tile of T rows):
    row i's output is the right outputs of rows i, i - T, i - 2T, ... weighted by each row's whole
    softmax sum, sum_j exp(s_rj). Judged on the rows from T on; a batch of at most MAX_CARRIED_N rows."""
    if s.N > MAX_CARRIED_N:
        return
    logits = np.matmul(s.q, s.k.transpose(0, 2, 1)) / np.sqrt(s.d)  # (G, N, N): every row's
    top = logits.max(axis=2, keepdims=True)
    p = np.exp(logits - top)
    mass = p.sum(axis=2)  # (G, N): each row's sum, times exp(-its max)
    log_mass = np.log(mass) + top[..., 0]  # the log of sum_j exp(s_rj)
    right = np.matmul(p, s.v) / mass[..., None]
    for T in QUERY_TILES:
        if T >= s.N:
            continue
        weight = np.exp(log_mass - log_mass.max(axis=1, keepdims=True))
        num, den = right * weight[..., None], weight.copy()
        for r in range(T, s.N):  # each row adds the carried sums of the row T before it
            num[:, r] += num[:, r - T]
            den[:, r] += den[:, r - T]
        judged = np.broadcast_to(s.rows[None, :] >= T, s.got.shape[:2])
        yield Candidate((num / den[..., None])[:, s.rows], f"query tiles of {T}", judged=judged)


MAX_CARRIED_N = 1024  # the N x N scores of each sampled batch: larger batches are not tried


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


def times_sqrt_d(s: Sample) -> Iterator[Candidate]:
    yield Candidate(softmax_times(s.logits(np.sqrt(s.d)), s.v))


def from_batch_zero(s: Sample) -> Iterator[Candidate]:
    """Every batch computed from batch 0's Q, K and V (a missing batch offset); batch 0 not judged."""
    judged = np.broadcast_to((s.batches > 0)[:, None], s.got.shape[:2])
    if judged.any():
        q, k, v = (np.asarray(x, dtype=np.float64) for x in s.qkv_of(0))
        first = softmax_times(np.matmul(q[s.rows], k.T) / np.sqrt(s.d), v)
        yield Candidate(np.broadcast_to(first, s.correct.shape), judged=judged)


def later_batches_zero(s: Sample) -> Iterator[Candidate]:
    """Batch 0 right, every later batch left as allocated: zeros (a bound of N rows for B*N)."""
    if (s.batches > 0).any():
        yield Candidate(np.where((s.batches > 0)[:, None, None], 0.0, s.correct))


def over_queries(s: Sample) -> Iterator[Candidate]:
    """softmax over the queries: each column j of S (a key) normalized over the rows i."""
    if s.N * s.N * s.d > QUERY_AXIS_WORK:
        return
    values = np.zeros_like(s.correct)
    judged = np.zeros(s.got.shape[:2], dtype=bool)
    judged[:QUERY_AXIS_BATCHES] = True
    chunk = max(1, (64 << 20) // (8 * s.N))
    for g in range(min(len(s.batches), QUERY_AXIS_BATCHES)):
        q, k = s.q[g], s.k[g]
        top = np.full(s.N, -np.inf)
        for i0 in range(0, s.N, chunk):  # every key's largest score, over all queries
            top = np.maximum(top, (np.matmul(q[i0:i0 + chunk], k.T) / np.sqrt(s.d)).max(axis=0))
        total = np.zeros(s.N)
        for i0 in range(0, s.N, chunk):
            total += np.exp(np.matmul(q[i0:i0 + chunk], k.T) / np.sqrt(s.d) - top).sum(axis=0)
        p = np.exp(np.matmul(q[s.rows], k.T) / np.sqrt(s.d) - top) / total
        values[g] = np.matmul(p, s.v[g])
    yield Candidate(values, judged=judged)


def last_tile_dropped(s: Sample) -> Iterator[Candidate]:
    """The keys of the last, partial tile left out (a tile loop of N / Bc tiles)."""
    logits = s.logits()
    for bc in KEY_TILES:
        whole = s.N - s.N % bc
        if s.N % bc and whole > 0:
            yield Candidate(softmax_times(logits[..., :whole], s.v[:, :whole]), f"key tiles of {bc}")


def last_key_skipped(s: Sample) -> Iterator[Candidate]:
    if s.N > 1:
        yield Candidate(softmax_times(s.logits()[..., :-1], s.v[:, :-1]))


def read_as_d_by_n(x: np.ndarray) -> np.ndarray:
    """(G, N, d) as a program reads it with x[c * N + j] for x[j * d + c]: the same values taken as
    a d x N matrix."""
    G, N, d = x.shape
    return np.ascontiguousarray(x).reshape(G, d, N).transpose(0, 2, 1)


def k_read_transposed(s: Sample) -> Iterator[Candidate]:
    yield Candidate(softmax_times(s.logits(k=read_as_d_by_n(s.k)), s.v))


def v_read_transposed(s: Sample) -> Iterator[Candidate]:
    yield Candidate(softmax_times(s.logits(), read_as_d_by_n(s.v)))


def tile_first_row(s: Sample) -> Iterator[Candidate]:
    """Each query tile's first row written to every row of the tile (a row index without the
    thread's own offset)."""
    for br in QUERY_TILES:
        if s.N > br:
            firsts = np.broadcast_to(s.rows // br * br, (len(s.batches), len(s.rows)))
            yield Candidate(reference.attention(s.q, s.k, s.v, firsts), f"query tiles of {br}")


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
    look: str | tuple[str, ...] = ""  # the source lines where such a mistake is written (source_lines): a
                                      # pattern, or patterns of which the first line of each


# Source lines a mistake is written in, by what they do.
SCALE_LINES = r"sqrt|rsqrt|scale"
# an exponential: exp, expf, exp2f, their intrinsics, one passed by name, PTX's ex2
EXP_LINES = r"\bexp2?f?\s*\(|__expf|__exp2f|\bexp2f?\b|\bex2\b|\b\w+_exp2?\s*\("  # fast_exp(, approx_exp2(
SUM_LINES = (r"(\b(?:l|li|l_\w+|l\d+)\b|\w*sum\w*|denom\w*)\s*(=|\+=|\*=)"  # l, l_i, psum, row_sum =; not lane =
             r"|/\s*(\b(?:l|li|l_\w+|l\d+)\b|\w*sum\w*|denom\w*)")
KEY_LOOP_LINES = r"for\s*\(.*(<|<=)\s*[^;]*\b(N|n|seq\w*|Tc|num_tiles)\b"
BATCH_LINES = r"blockIdx\.(y|z)|\bbatch\w*\s*\*|\bb\s*\*\s*\(?\s*(N|n|3)|\bB\s*\*"
# what covers every batch's rows: the output's copy back to the host, then the kernels' launch (one line of each)
COVER_LINES = (r"Memcpy\w*\s*\([^;]*(DeviceToHost|D2H)", r"<<<|hipLaunchKernelGGL")
ROW_LINES = r"threadIdx\.(x|y)|\brow\w*\s*="
# where the host sizes the grid: a dim3 grid, or a launch (its grid written in it); not a ceiling division of
# N alone, which a kernel's key-tile count is too
GRID_LINES = r"dim3\s+\w*[Gg]rid\w*\s*[({]|\b[Gg]rid\w*\s*=\s*dim3|<<<|hipLaunchKernelGGL"
ROWS_COVERED_LINES = (GRID_LINES, GRID_LINES, ROW_LINES)  # two grid or launch lines (one a d), then a thread's index
# an array's use, not its declaration (`__shared__ float Vs[BC * D];`, `float4 kreg[4];`: no line does a mistake there)
ARRAY_TYPE = r"(?:float[24]?|double|int|unsigned|size_t|__half2?|half2?|__nv_bfloat16)"
NOT_DECLARED = r"^(?!(?:extern\s+)?(?:static\s+)?__shared__\b|(?:const\s+)?" + ARRAY_TYPE + r"\s+\w+\s*\[[^=]*$)"
# a matrix's element (k[...]), or a pointer set to a place in it (`const float* vr = Vs + jj * D;`)
K_LINES = NOT_DECLARED + r".*(?:\b[Kk]\w*\s*\[|\*\s*\w+\s*=\s*[Kk]\w*\s*\+)"
V_LINES = NOT_DECLARED + r".*(?:\b[Vv]\w*\s*\[|\*\s*\w+\s*=\s*[Vv]\w*\s*\+)"
OUT_LINES = NOT_DECLARED + r".*(?:\bO\w*\s*\[|\bout\w*\s*\[|\bo\s*\[)"


MISTAKES = (
    Mistake("no 1/sqrt(d) scale", "scores should be Q K^T / sqrt(d)", no_scale, SCALE_LINES),
    Mistake("scaled by 1/d instead of 1/sqrt(d)",
            "scores should be Q K^T / sqrt(d); 1/d is 1/sqrt(d) applied twice", scaled_by_one_over_d, SCALE_LINES),
    Mistake("no row max subtracted", "exp(s) overflows float32 where logits pass 88; use exp(s - m)", no_row_max,
            EXP_LINES),
    Mistake("not normalized", "O must be divided by the row sum l at the end", not_normalized, SUM_LINES),
    Mistake("normalized by the last key tile's sum only",
            "l must carry over tiles: l = l * exp(m_old - m_new) + sum of this tile", last_tile_sum_only, SUM_LINES),
    Mistake("only the first key tile attended", "the loop over K/V tiles stops after one tile, or every tile "
            "loads the first tile's keys again (a K/V tile pointer or offset that never advances)", first_tile_only,
            KEY_LOOP_LINES),
    Mistake("rows not written", "the grid (or a bound) covers too few query rows", rows_not_written,
            ROWS_COVERED_LINES),
    Mistake("batch b holds batch b-1's output", "an offset of one batch in the output (or input) index",
            previous_batch, BATCH_LINES),
    Mistake("batch b's output written at batch f * b's place", "an output offset f times too large: a size in "
            "bytes added to a float pointer (f = 4), the batch's rows beyond f * b left as they were",
            batch_offset_times, BATCH_LINES),
    Mistake("the softmax state carried from row i - T into row i (m l o not reset)",
            "m = -inf, l = 0 and o = 0 belong inside the loop over query tiles: each tile's rows start anew",
            state_carried, SUM_LINES),
    Mistake("O written transposed (d x N per batch)", "O's index should be row * d + column", transposed, OUT_LINES),
    Mistake("Q and K swapped (softmax(K Q^T) V)", "scores are q_i . k_j for query row i", q_and_k_swapped),
    Mistake("V returned as O", "the output is V itself: nothing was computed or copied back", v_as_output),
    Mistake("all zeros", "nothing was written, or the copy back to the host is missing", all_zeros),
    Mistake("scores multiplied by sqrt(d) instead of divided", "scores should be Q K^T / sqrt(d), not * sqrt(d)",
            times_sqrt_d, SCALE_LINES),
    Mistake("every batch computed from batch 0's Q/K/V",
            "a missing batch offset: batch b's Q, K, V start at b * 3 * N * d in the input", from_batch_zero,
            BATCH_LINES),
    Mistake("batches after the first not written (zeros)",
            "a copy back, a grid or a bound of N rows where there are B * N: every batch needs its rows",
            later_batches_zero, COVER_LINES),
    Mistake("softmax normalized over the queries (each column of S) instead of the keys",
            "the max and the sum run over j, the keys of one query row i", over_queries, SUM_LINES),
    Mistake("the last key tile dropped where N is not a multiple of the tile",
            "the tile count should be (N + Bc - 1) / Bc, with the keys past N masked", last_tile_dropped,
            KEY_LOOP_LINES),
    Mistake("the last key skipped", "an off-by-one in the key loop: j < N, not j < N - 1", last_key_skipped,
            KEY_LOOP_LINES),
    Mistake("K read as if stored d x N (K[x*N + j] for K[j*d + x])", "row j of K starts at j * d", k_read_transposed,
            K_LINES),
    Mistake("V read as if stored d x N (V[x*N + j] for V[j*d + x])", "row j of V starts at j * d", v_read_transposed,
            V_LINES),
    Mistake("each query tile's first row written to every row of the tile",
            "the query row of a thread is tile * Br + its own index", tile_first_row, ROW_LINES),
)
