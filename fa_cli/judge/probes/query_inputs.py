"""The scores' other side: which element of Q each term of a row's scores took.

Once ScoreInputs found every term taking its own element of K, or rows whose Q was alike scoring
the keys otherwise (Q read at other places), one run of BATCHES batches reads Q's side. Q is
coded (its values name their element, as score_inputs codes K), every key j is one-hot at dim
j mod d, at sqrt(d) (the score of row r and key j is then q'[r, j mod d] itself), and V is
one-hot at keys 0 .. d - 1 (column c of the output is the weight of key c).
So each row's log weight ratios give Q'[r, c] - Q'[r, 0], where Q' is what the program read for
Q; the one constant per row is found as score_inputs finds K's per dim. Then Q' against Q: every
batch's rows taking batch 0's (a missing batch offset on Q), else one formula of score_inputs'
family for every batch (Q read transposed, rows or dims shifted, rows at another pitch, a tile of
rows written at one pitch and read at another), else the first wrong terms by example.
"""
from __future__ import annotations

import numpy as np

from ..findings import Finding, Kind
from .linear_map import map_rows
from .readings import measured
from .score_inputs import CODE_SEED, OF_K, TINY_WEIGHT, Names, coded, fitting, sources
from .step import Context, Probe, ProbeInput

BATCHES = 2
MATCH_TOL = 2.5e-5  # under half the grid's step for BATCHES * 4096 coded values (4 / 8 / 8192)
ROWS = Names(one="q", whole="Q", items="rows", item="row", index="r", per_row=True)
# The source lines shown: where Q (or a tile of it) is indexed.
LOOK = ("Q's index", r"\b[qQ]\w*\s*\[[^\]]*\]")


def design(N: int, d: int, q: np.ndarray) -> ProbeInput:
    """BATCHES batches: Q coded, key j one-hot at dim j mod d (sqrt(d)), V one-hot at keys 0 .. d - 1."""
    k = np.zeros((N, d), dtype=np.float32)
    k[np.arange(N), np.arange(N) % d] = np.sqrt(d)
    v = np.zeros((N, d), dtype=np.float32)
    v[np.arange(d), np.arange(d)] = 1.0
    return ProbeInput(q, np.broadcast_to(k, q.shape), np.broadcast_to(v, q.shape), "the query side's batches")


def read_terms(out: np.ndarray) -> np.ndarray:
    """(B*N, d) differences Q'[r, c] - Q'[r, 0] from each row's log weight ratios (NaN where a
    weight is 0): one constant per row to find, as score_inputs.sources finds one per dim."""
    B, N, d = out.shape
    W = out.reshape(B * N, d).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        logs = np.where(W > TINY_WEIGHT, np.log(np.maximum(W, TINY_WEIGHT)), np.nan)
    return logs - logs[:, :1]


def batch_of_reading(found: np.ndarray, B: int, N: int, d: int) -> tuple[str, np.ndarray] | None:
    """Where every batch's rows read one batch's Q: (words, the terms as that batch's own indices)."""
    per = found.reshape(B, N, d)
    owner = np.where(per >= 0, per // (N * d), -1)
    if (owner == np.arange(B)[:, None, None]).mean() >= OF_K:
        return "", per - (np.arange(B) * N * d)[:, None, None]
    if B > 1 and (owner == 0).mean() >= OF_K:
        return "every batch's scores take batch 0's Q (a missing batch offset on Q); ", per
    return None


class QueryInputs(Probe):
    """Which element of Q each term of each row's scores took, read back in one run."""

    name = "the scores read back: which element of Q each term took"

    def applies(self, ctx: Context) -> bool:
        N, d = ctx.probe.shape.N, ctx.probe.shape.d
        return not ctx.facts.named and ctx.facts.query_side and map_rows(N, d, ctx.kind) >= d

    def run(self, ctx: Context) -> list[Finding]:
        N, d = map_rows(ctx.probe.shape.N, ctx.probe.shape.d, ctx.kind), ctx.probe.shape.d
        q = coded((BATCHES, N, d), CODE_SEED + 1)
        got = ctx.run(design(N, d, q))
        where = f"{BATCHES} batches of {N} rows, Q coded, key j one-hot at dim j mod d"
        if got is None:
            return [Finding(Kind.OBSERVED, [f"probe: no output of the right size on the {where}: Q's side not read"])]
        terms = read_terms(got)
        if np.isfinite(terms).mean() < 0.5:
            return [Finding(Kind.OBSERVED, [f"probe: Q's side read back ({where}): {np.isnan(terms).mean():.0%} of "
                                            "the terms have a weight of 0 (their key's, or key 0's in their row): "
                                            "no term of Q is read from them"])]
        found = sources(terms, q, MATCH_TOL).T  # (B*N, d): the flat index into Q of each term
        right = found == np.arange(found.size).reshape(found.shape)
        if right.all():
            return []
        if (found >= 0).mean() < OF_K:
            return [Finding(Kind.OBSERVED, [
                f"probe: Q's side read back ({where}): {(found >= 0).mean():.0%} of the terms land on an element "
                "of Q: its rows' weights are no softmax of q' . k over elements of Q"])]
        head = (f"probe: Q's side read back ({where}): {int(right.sum())} of {found.size} terms q[r, x] k[j, x] "
                f"take q[r, x]; {int((found < 0).sum())} take no element of Q")
        batch = batch_of_reading(found, BATCHES, N, d)
        if batch is not None:
            said = {fitting(local, N, d, ROWS) if not (local == np.arange(N * d).reshape(N, d)).all() else "right"
                    for local in batch[1]}
            if len(said) == 1 and None not in said and (batch[0] or said != {"right"}):
                words = batch[0] + ("" if said == {"right"} else f"every term fits {said.pop()}")
                return measured(ctx, [f"{head}; {words.removesuffix('; ')}"], look=LOOK, query_inputs=words)
        if (second := second_rows_take_the_first(found, right, N, d)) is not None:
            words, q_index = second
            return measured(ctx, [f"{head}; {words}"], look=LOOK if q_index else None, query_inputs=words)
        said = one_row_of_each_tile(right, N) or examples(found, right, N, d)
        return [Finding(Kind.OBSERVED, [f"{head}; {said}; no formula of those tried fits (another batch's Q, "
                                        "transposed, shifted rows or dims, another pitch, a tile's two pitches)"])]


ROW_TILES = (8, 16, 32, 64, 128)  # the query tiles whose one row a slot of shared memory may hold wrong


def one_row_of_each_tile(right: np.ndarray, N: int) -> str | None:
    """Where exactly row t of every tile of R rows is wrong (every batch), the rest right: said so,
    with what fits (that row's slot of a Q tile not loaded, or written over: a buffer before it in
    shared memory written past its end; or that row read from elsewhere); None otherwise."""
    rows = np.arange(right.shape[0]) % N
    wrong = (~right).any(axis=1)
    for R in ROW_TILES:
        ts = np.unique(rows[wrong] % R)
        if N % R == 0 and ts.size == 1 and (wrong == (rows % R == ts[0])).all():
            t = int(ts[0])
            return (f"exactly row {t} of every tile of {R} rows is wrong (rows {t}, {t + R}, {t + 2 * R}, ... of every "
                    f"batch; {int((~right[wrong]).sum())} of their {right[wrong].size} terms), the rows between them "
                    f"right: as where that row's slot of a Q tile in shared memory is not loaded, or is written over "
                    f"after its load (a buffer placed before it written past its end: a tile stored at a pitch of "
                    f"d + 1 in a space of d a row), or that row is read from another place")
    return None


SECOND_ROWS_AT = (32, 64, 128)  # R: a thread's rows q0 + t and q0 + R + t, blocks of 2R rows


def second_rows_take_the_first(found: np.ndarray, right: np.ndarray, N: int, d: int) -> tuple[str, bool] | None:
    """Exactly the second R rows of every 2R wrong, and the terms of theirs that land on Q (half of
    them at least) all on row r - R's own element: (the words, whether Q's index may be the place).
    Every term landing: row q0 + R + t read q0 + t's Q, or was given its scores; some landing on no
    element: not one row's Q read for another (that lands every term), a thread's two rows mixed in
    its weights."""
    rows = np.arange(found.shape[0])
    wrong = (~right).any(axis=1)
    for R in SECOND_ROWS_AT:
        if N % (2 * R) or not (wrong == (rows % N % (2 * R) >= R)).all():
            continue
        lands = found[wrong] >= 0
        first = (rows[wrong] - R)[:, None] * d + np.arange(d)
        if lands.mean() < 0.5 or not (found[wrong][lands] == first[lands]).all():
            continue
        head = (f"rows q0 + {R} .. q0 + {2 * R - 1} of every {2 * R} are wrong, and each of their terms that lands "
                f"on Q ({lands.mean():.0%}) takes row r - {R}'s own element")
        if lands.all():
            return (f"{head}: row q0 + {R} + t scored with row q0 + t's Q (an index of Q that leaves out {R}), or a "
                    f"thread that owns both rows giving the second the first's scores"), True
        return (f"{head}, the others no element of Q (one row's Q read for another would land every term): the "
                f"second row of a thread that owns rows q0 + t and q0 + {R} + t has weights partly its first "
                "row's"), False
    return None


def examples(found: np.ndarray, right: np.ndarray, N: int, d: int) -> str:
    """Where the wrong terms are, and the first three: which element each took, by batch."""
    def at(flat: int) -> str:
        return f"Q[{flat // (N * d)}][{flat // d % N}, {flat % d}]"

    def took(a: int, b: int) -> str:  # most dims of a row on one element: a read of it, or a value met by chance
        if found[a, b] < 0:
            return "no element of Q"
        same = int((found[a] == found[a, b]).sum()) - 1
        return at(found[a, b]) + ("" if 2 * (same + 1) <= d else
                                  f", as did {same} other dims of its row (one element read for many, or a value of "
                                  "another buffer met by chance where the row was overwritten)")
    said = "; ".join(f"batch {a // N}, row {a % N}, dim {b} took {took(a, b)}" for a, b in np.argwhere(~right)[:3])
    rows = np.flatnonzero((~right).any(axis=1))
    return f"wrong in {rows.size} of {right.shape[0]} rows (batch 0 {(rows < N).sum()}, later {(rows >= N).sum()}); " \
        f"e.g. {said}"
