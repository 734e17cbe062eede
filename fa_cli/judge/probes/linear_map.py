"""The output read whole as a linear map of V, in one run: what each output value is made of.

For fixed Q and K nearly every program's output is linear in V: O[r, c] = sum over k, c' of
T[r, c, k, c'] V[k, c']. One input holds N*d batches, each with the failing batch's Q and K
(cut to map_rows: 4096 / d rows at most) and V one-hot at (k, c'): batch k*d + c' writes
T[:, :, k, c']. Two more batches: V all zero (the output's part that is no map of V, taken off
T; said where it is not 0) and the case's own V, the check: where T applied to it gives what the
program wrote there, T is what the program computes (and its batches did not meet). Then T
against the right map, P times the identity (each reading named with the source lines of its kind,
where fa has the source):

  pairs       every entry one of P's weights, met with another element of V (pairing.py)
  columns     T is zero across columns but its weights differ by output column: P times a factor a
              row for each column (each lane's own share of l), a tile's whole weight on one row of
              V (pairing.py), else which columns share weights (lanes, halves, tiles), and for each
              set the online softmax with one step written otherwise (softmax_steps.set_words), or
              the scores it used, read back as log W = a . (q * k) + row constant: which of
              q . k's d terms each score took, and at what scale
  map         every output value is a right value of another place: the map, as a formula where
              one fits (columns or rows moved, a layout of the block: written or read column by
              column, transposed twice the same way, tiles transposed in place), else examples
  scores      one set of weights for all columns, from scores of some dims only: said the same
              way (one factor on every dim is the Factors step's to name; weights that no scores
              fit come of the softmax, and the steps after read it)

Where T is P times the identity at this size, or one set of weights from the right scores, the
step says nothing and the later steps go on.
"""
from __future__ import annotations

import re

import numpy as np

from ..diagnose import source_lines
from ..mistakes import SUM_LINES, V_LINES
from ..findings import Finding, Kind
from . import map_formulas, pairing, row_weights, softmax_steps, tile_sums, unmet_keys, warp_tiles
from .crossed_shuffles import crossed
from .map_formulas import map_formula
from .readings import measured
from .score_fit import FIT_RESIDUAL, TINY_WEIGHT, distinct, score_fit, score_terms, score_words
from .step import Context, Probe, ProbeInput, fmt, logits, run_many, softmax_rows, spans

MAX_BATCHES = 4096  # N*d batches in the run at most: 200 MB of input (N = 128 at d = 32, 64 at d = 64)
MAX_BATCHES_CPU = 2048  # a CPU program's: its run costs N^3 d^2, a GPU's seconds a CPU's minute (N = 64 at d = 32)
SETS_SAID = 4  # sets of columns said one by one
MAP_ATOL = 2e-5  # a float32 program's T against the right one (values of P, at most 1)
ROUNDING = 4 * 2.0 ** -8  # the check's slack, of the output's largest value: four of bf16's unit roundoffs
# The source lines shown under what was named, the first kind of them the source has: where lanes
# split a row's dims (weights by column: the reduction across lanes; where a set of columns is made
# of no V, the lanes' width), where the output is written (values moved, a part made of no V), where
# a key loop is bound by the row (a band of keys).
WEIGHT_MEETS_V = r"\+=[^;\n]*\*[^;\n]*\b[vV]\w*|\+=[^;\n]*\b[vV]\w*[^;\n]*\*"  # acc += w * v (or v * w)
LANES = ("lanes", r"warpSize|\blane\b|threadIdx\.x\s*[%&]")
# a loop of 8, 16 or 32 steps over something other than keys, warps or shuffle offsets: d = 32's count of columns
COLUMN_LOOP_32 = r"for\s*\(\s*(?:int\s+|unsigned\s+)?(?!(?:j|jj|k|kk|t|w|s|off\w*|key\w*|tile\w*|warp\w*)\b)(\w+)" \
    r"\s*=[^;]*;\s*\1\s*<\s*(8|16|32)\s*;"
LOOK_SHUFFLES = ("shuffles", r"__shfl\w*|__reduce\w*_sync")
LOOK = {"columns": (LOOK_SHUFFLES, LANES),
        "width": (("a loop bound of 8, 16 or 32 (d = 32's values, float2s or float4s)", COLUMN_LOOP_32),
                  ("a lanes' width of 32", r"=\s*32\s*;|[%&/]\s*32\b|\b32\s*[*/%]"), LANES),
        "place": (("the output's index", r"\b(o|out|O|output)\s*\["),),
        "packed": (("a pack or a vector of values", r"__floats?2half2\w*|__float22half2\w*|\bhalf2\b|make_float[24]|"
                                                   r"\bfloat[24]\b"), ("the output's index", r"\b(o|out|O|output)\s*\[")),
        "sums": (("the row's sum summed across lanes", r"(\w*sum\w*|\bl\w*)\s*\+?=[^;\n]*(__shfl\w*|__reduce\w*)"),
                 ("the output's division", r"\b(o|out|O|output|dst)(_\w*)?\s*\[[^;]*\]\s*(=[^;]*/\s*[A-Za-z_(]|/=)"),
                 ("the row's sum", SUM_LINES)),
        "max shuffle": (("the max's shuffle", r"max\w*\s*\([^;]*__shfl\w*"), LOOK_SHUFFLES),
        "sum shuffle": (("the sum's shuffle", r"\+=?\s*__shfl\w*|__shfl\w*\([^;]*\)\s*\+"), LOOK_SHUFFLES),
        "rows of V": (("V's index", V_LINES),),
        "weights met": (("where a weight meets V", WEIGHT_MEETS_V),),
        "shuffles": (LOOK_SHUFFLES, ("where a weight meets V", WEIGHT_MEETS_V)),
        "key count": (unmet_keys.KEY_COUNT_LOOK,),
        "band": (("a loop bound by the row's index", r"for\s*\([^;]*;[^;]*[<>]=?\s*\(?\s*(i|row|r|qi|q_row|gi|global_row)\b"),)}
TELLING = 1e-4  # a key with this much of P that the program gives no weight is a key left out


def map_rows(N: int, d: int, kind: str = "cuda") -> int:
    """The rows of the map's run: the probe's N, cut so that N*d batches stay within MAX_BATCHES
    (MAX_BATCHES_CPU for a program that computes on the host: kind "cpu")."""
    return min(N, (MAX_BATCHES_CPU if kind == "cpu" else MAX_BATCHES) // d)


class LinearMap(Probe):
    """T read in one run of N*d + 2 batches; named where it differs from P times the identity."""

    name = "the output as a linear map of V, read in one run"

    def applies(self, ctx: Context) -> bool:
        shape = ctx.probe.shape
        return (not ctx.facts.named or ctx.facts.lanes_named) and ctx.facts.out is not None \
            and map_rows(shape.N, shape.d, ctx.kind) >= 2 \
            and ctx.facts.out.any()  # an output of zeros everywhere reads as a map of nothing: W's readings say it

    def run(self, ctx: Context) -> list[Finding]:
        inp, batch = ctx.probe, first_wrong_batch(ctx)
        N, d = map_rows(inp.shape.N, inp.shape.d, ctx.kind), inp.shape.d
        q, k, v = inp.q[batch, :N], inp.k[batch, :N], inp.v[batch, :N]
        got, apart = run_many(ctx, basis_input(q, k, v))
        where = f"{N * d + 2} batches of {N} rows, batch {batch}'s Q and K" + \
            (", on the emulation's 64-lane wavefronts" if ctx.facts.lanes_named else "")
        if apart:
            return [Finding(Kind.OBSERVED, [f"probe: on the {where}: {apart}"])]
        if got is None:
            return [Finding(Kind.OBSERVED, [f"probe: no output of the right size on the {where}, which read the output "
                                            "as a map of V"])]
        if not np.isfinite(got).all():  # NaN or inf in some batch: no map to read (NotFinite's to say where)
            return [Finding(Kind.OBSERVED, [f"probe: the output on the {where} holds NaN or inf in "
                                            f"{int((~np.isfinite(got)).any(axis=(1, 2)).sum())} batches: not read as a "
                                            "map of V"])]
        constant = got[-1].astype(np.float64)  # the output where V is 0: none, for a map of V
        T = as_map(got, N, d) - constant[:, :, None, None]
        checked = np.einsum("rckx,kx->rc", T, v.astype(np.float64)) + constant
        # a program that rounds to a lower precision is linear but for its rounding: a few of bf16's units
        if not np.allclose(checked, got[-2], atol=1e-4 + ROUNDING * np.abs(got[-2]).max(), rtol=0):
            return [Finding(Kind.OBSERVED, [
                f"probe: the output is not a linear map of V on the {where}: the map read from one-hot V, applied "
                f"to the case's V, misses the program's output by up to {fmt(np.nanmax(np.abs(checked - got[-2])))} "
                "(more than a lower precision's rounding: V's values change what it does, or its batches meet)"])]
        if np.abs(got[-2] - ProbeInput(q[None], k[None], v[None]).output()[0]).max() <= ctx.tol:
            return []  # right at this size: what fails needs more rows; the later steps read them
        if np.abs(T).max() <= pairing.NO_WEIGHT and np.abs(constant).max() <= pairing.NO_WEIGHT:
            return [Finding(Kind.OBSERVED, [  # the probe's own N has values (applies): the readings of W look there
                f"probe: on the {where} the output is 0 whatever V is: no row of V reaches it at {N} keys, where the "
                f"probe's {inp.shape.N} give values"])]
        P = softmax_rows(logits(q[None], k[None]))[0]
        mapped = read_map(T, P, q, k, constant, keys_said_here=ctx.facts.lanes_named)
        said = without_v(constant, P, q, k) + mapped
        if not said:
            return []
        paired = bool(mapped) and mapped[0].startswith(pairing.LEAD)  # values made of no V may be all there is
        look = pairing.look(mapped[0], ctx.source) if paired else first_found(ctx, components_look(mapped) or
                                                                              LOOK[look_for(mapped)])
        if not paired and look_for(mapped) == "columns" and (copied := crossed(ctx.source)):
            said.append(copied)  # the lanes measured apart, and a line that would set them apart
        return measured(ctx, [f"probe: the output read as a linear map of V ({where}): {said[0]}", *said[1:]],
                        look=look, map_rows=N)


def look_for(mapped: list[str]) -> str:
    """Which lines of the source to show under what the map says."""
    first = mapped[0] if mapped else ""
    if first.startswith(unmet_keys.LEFT_OUT):
        return "key count"
    if any(unmet_keys.LEAD in line for line in mapped):
        return "weights met" if any(line.endswith(unmet_keys.NOTHING_MET) for line in mapped) else "rows of V"
    if first.startswith(pairing.LEAD_TILES + "each tile"):
        return "rows of V"
    if first.startswith("each row weighs"):
        return "band"
    if row_weights.LEAD in first:
        return "weights met"
    if row_weights.SHIFT_LEAD in first:
        return "shuffles"
    if first.startswith("every column's weights are P's"):
        return "sums"
    if first.startswith(softmax_steps.LANES_OWN):
        return "max shuffle" if warp_tiles.MAX_STEP in first else "sum shuffle" if warp_tiles.SUM_STEP in first \
            else "columns"
    if first.startswith("the weights differ"):
        return "width" if any(line.endswith("made of no row of V") for line in mapped) else "columns"
    if map_formulas.PACKED in first:
        return "packed"
    return "columns" if first.startswith("one set of weights") else "place"


def components_look(mapped: list[str]) -> tuple[tuple[str, str], ...] | None:
    """For a vector's components moved (map_formulas.components_moved): the lines that set one moved
    component from the other (`o.z += p * v.w`), else the vectors' constructors; None otherwise."""
    moves = re.findall(r"\b([xyzw])<-([xyzw])\b", mapped[0]) if mapped and map_formulas.COMPONENTS in mapped[0] else []
    if not moves:
        return None
    crossed = "|".join(rf"\.{x}\s*[-+*/]?=(?!=)[^;\n]*\.{y}\b" for x, y in moves)
    return ("a moved component set from the other", crossed), ("a component set", r"\.[xyzw]\s*[-+*/]?=(?!=)")


def first_found(ctx: Context, looks: tuple[tuple[str, str], ...]) -> tuple[str, str]:
    """The first (what, pattern) whose lines the source has (the last where none has)."""
    return next((look for look in looks if ctx.source and source_lines(ctx.source, look[1])), looks[-1])


def first_wrong_batch(ctx: Context) -> int:
    wrong = ~(np.abs(ctx.facts.out - ctx.facts.true) <= ctx.tol)
    return int(np.argmax(wrong.any(axis=(1, 2))))


def basis_input(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> ProbeInput:
    """N*d batches of the same Q and K, batch k*d + c' with V one-hot at (k, c'); then V itself,
    then V all zero."""
    N, d = q.shape
    V = np.zeros((N * d + 2, N, d), dtype=np.float32)
    V[np.arange(N * d), np.repeat(np.arange(N), d), np.tile(np.arange(d), N)] = 1.0
    V[-2] = v
    return ProbeInput(np.broadcast_to(q, V.shape), np.broadcast_to(k, V.shape), V, "the map's batches")  # views


def as_map(out: np.ndarray, N: int, d: int) -> np.ndarray:
    """T[r, c, k, c'] from the basis batches' outputs (batch k*d + c' holds T[:, :, k, c'])."""
    return out[:N * d].astype(np.float64).reshape(N, d, N, d).transpose(2, 3, 0, 1)


def without_v(constant: np.ndarray, P: np.ndarray | None = None, q: np.ndarray | None = None,
              k: np.ndarray | None = None) -> list[str]:
    """The part of the output that V does not make (the output where V is all zero), where it is not
    0; with the rows of K or Q some keys' weights meet in its place, where that fits (rows_met)."""
    rows, cols = np.nonzero(np.abs(constant) > MAP_ATOL)
    if rows.size == 0:
        return []
    met = rows_met(constant, P, {"K": k, "Q": q}, np.unique(cols)) if P is not None else None
    return [f"with V all zero the output is not: up to {fmt(np.abs(constant).max())} in {np.unique(rows).size} of "
            f"{constant.shape[0]} rows ({spans(np.unique(rows))}), columns {spans(np.unique(cols))}: "
            + (met or "values made of no V (memory never written, or another buffer's)")]


def rows_met(constant: np.ndarray, P: np.ndarray, buffers: dict[str, np.ndarray],
             cols: np.ndarray | None = None) -> str | None:
    """constant = sum over keys j of c_j P[r, j] X[j] for X = K or Q, every c_j 0 or one factor a,
    fitted on `cols` (the columns V does not make; None: all): those keys' weights meet X's rows
    where V's belong, in words; None where no such sum fits."""
    cols = np.arange(constant.shape[1]) if cols is None else cols
    target = constant[:, cols]
    for name, X in buffers.items():
        X = X.astype(np.float64)[:, cols]
        A = (P[:, :, None] * X[None, :, :]).transpose(0, 2, 1).reshape(-1, P.shape[1])  # (r, x) by key j
        c = np.linalg.lstsq(A, target.ravel(), rcond=None)[0]
        keys = np.flatnonzero(np.abs(c) > 0.5 * np.abs(c).max())
        a = float(np.median(c[keys]))
        alike = (np.abs(c[keys] - a) <= 1e-2 * abs(a)).all() and (np.abs(np.delete(c, keys)) <= 1e-2 * abs(a)).all()
        if not alike or np.abs(A @ c - target.ravel()).max() > 1e-3 * np.abs(target).max():
            continue
        factor = "" if abs(a - 1) <= 1e-2 else f" times {a:.4g}"
        if cols.size < constant.shape[1]:
            factor += f" in columns {spans(cols)}"
        return (f"it is the sum over keys {spans(keys)} of P[r, j] times {name}'s row j{factor}: those keys' weights "
                f"meet {name}'s rows where V's belong (a V tile's pointer or index that runs past its rows into "
                f"{name}'s, as an index one past the tile's last row)")
    return None


def column_blocks(groups: list, weights: np.ndarray, P: np.ndarray) -> str:
    """Where the sets are blocks of C consecutive columns, none of them right: what that says of
    the threads that write a row (in words, led by ' '); else ''."""
    C = len(groups[0])
    blocks = all(list(cols) == list(range(cols[0], cols[0] + C)) and cols[0] % C == 0 for cols in groups)
    if not blocks or any(np.abs(weights[cols[0]] - P).max() <= MAP_ATOL for cols in groups):
        return ""
    return (f" (blocks of {C} consecutive columns, none right: the threads that write a row's columns did not agree "
            "on its weights: each block's threads combined their partial scores, max or sum with threads of another "
            "row, or with none)")


def read_map(T: np.ndarray, P: np.ndarray, q: np.ndarray, k: np.ndarray, constant: np.ndarray | None = None,
             keys_said_here: bool = False) -> list[str]:
    """What T is, in sentences of measured figures; empty where it is one set of weights from the
    right scores (the softmax steps' to read) or nothing fits. constant: the output where V is all
    zero (what the keys that meet no row of V met instead is read from it). keys_said_here: one set
    of weights that leaves keys out is said here (where no later reading runs: after the 32-lane
    build named the width); else KeysWithoutWeight says it, at the probe's whole N."""
    N, d = T.shape[:2]
    across = T.copy()
    across[:, np.arange(d), :, np.arange(d)] = 0.0
    if found := moved(T, P):
        return found
    if (pairs := pairing.read_pairs(T, P)) is not None:
        return [pairing.said(*pairs)]
    if np.abs(across).max() > MAP_ATOL:
        return crossing(across)
    weights = T[:, np.arange(d), :, np.arange(d)]  # (d, N, N): column c's weights
    groups = column_groups(weights)
    if len(groups) == 1 and (found := band(weights[0], P)):
        return found
    if len(groups) == 1 and (found := pairing.rows_weighed(weights[0], P) or row_weights.another_rows(
            weights[0], P, MAP_ATOL) or row_weights.shifted_rows(weights[0], P, MAP_ATOL)
            or pairing.tiles_moved(weights[0], P)
            or unmet_keys.unmet(weights[0], P, constant, np.arange(d), {"K": k, "Q": q})
            or keys_said_here and unmet_keys.left_out(weights[0], P)):
        return [found]
    if len(groups) == 1:  # scores of some dims only are said here; one factor on them all is the Factors step's
        fit = score_fit(weights[0], q, k)  # weights no scores fit come of the softmax: the later steps read it
        named = fit is not None and fit[1] <= FIT_RESIDUAL and len(distinct(fit[0])) > 1
        return [f"one set of weights for every column; {score_words(*fit)}"] if named else []
    scores = logits(q[None], k[None])[0]
    if found := lane_sums(weights, P, scores):
        return found
    if found := softmax_steps.lanes_by_column(weights, scores) or warp_tiles.reading(weights, scores):
        return [found]
    if gathered := pairing.tile_gathered(weights, P):
        return [pairing.LEAD_TILES + gathered]
    weighed = [pairing.rows_weighed(weights[cols[0]], P, f"columns {spans(cols)}") for cols in groups]
    if all(weighed) and len(groups) <= MAPPED_SETS:
        return [f"the weights differ by output column: {len(groups)} sets", *weighed]
    lines = [f"the weights differ by output column: {len(groups)} sets{column_blocks(groups, weights, P)}"]
    for cols in groups[:SETS_SAID]:
        W = weights[cols[0]]
        error = np.abs(W - P).max()
        state = "right" if error <= MAP_ATOL else "every weight 0: made of no row of V" if np.abs(W).max() <= MAP_ATOL \
            else one_key(W) or unmet_keys.unmet(W, P, constant, np.array(cols), {"K": k, "Q": q}) \
            or unmet_keys.left_out(W, P) or softmax_steps.set_words(W, scores) \
            or f"max |W - P| {fmt(error)}; {score_terms(W, q, k) or 'scores not read'}"
        lines.append(f"columns {spans(cols)}: {state}")
    if rest := groups[SETS_SAID:]:  # a set for nearly every column: the first said, the others in numbers
        errors = [np.abs(weights[cols[0]] - P).max() for cols in rest]
        lines.append(f"and {len(rest)} more sets (columns {spans(sorted(c for cols in rest for c in cols))}): "
                     f"max |W - P| from {fmt(min(errors))} to {fmt(max(errors))}")
    return lines


def one_key(W: np.ndarray) -> str | None:
    """Every row's whole weight on one key, the same for every row: the columns hold that row of V.
    The last key's: a running state that starts over at every key (alpha = exp(m_old - m_new) = 0
    each time, as where m stays -inf), so l and o end as the last key's alone."""
    N = W.shape[1]
    j = int(W[0].argmax())
    if not (np.abs(W[:, j] - 1.0) <= MAP_ATOL).all() or np.abs(np.delete(W, j, axis=1)).max() > MAP_ATOL:
        return None
    said = f"every row's whole weight on key {j}: these columns hold V's row {j} alone"
    if j == N - 1:
        said += (", the last key's: the running sums start over at every key there (alpha = exp(m_old - m_new) "
                 "is 0 at each key, as where the running max stays -inf: a max kept or updated by another lane "
                 "only), so l and o end as the last key's")
    return said


MAPPED_SETS = 4  # sets of columns, each with a map of its own from V rows to keys, said set by set
LANE_WIDTHS = (32, 64)  # the lanes a row's keys may be dealt to, key j to lane j mod L
# l summed over lanes j = c mod L only: a xor butterfly over 32 lanes missing its offsets below L, or L
# threads a row (keys dealt to them in turn) whose sums are never added: the two give the same weights
PART_SUMS = (2, 4, 8, 16)
FACTOR_RTOL = 1e-3  # a column's weights are P times one factor a row: W / P the same over its keys, to this


def lane_sums(weights: np.ndarray, P: np.ndarray, s: np.ndarray | None = None) -> list[str]:
    """Every column's weights P times a factor per row, each column's its own: said, and where the
    factor is 1 / (P summed over the keys j = c mod L) for a lane width L, named: each lane divides
    by the sum of its own keys' weights, never added across the lanes; else, with the right scores
    s, where a tile's sum merged by a butterfly written otherwise gives it (tile_sums.py)."""
    d = weights.shape[0]
    telling = P > 1e-6
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(telling[None], weights / P[None], np.nan)  # (c, r, j)
    factor = np.nanmedian(ratio, axis=2)  # (c, r)
    if not (np.isfinite(factor).all() and (factor > 0).all()) or np.allclose(factor, 1.0, rtol=FACTOR_RTOL) or \
            not np.all(np.abs(ratio - factor[..., None]) <= FACTOR_RTOL * factor[..., None], where=telling[None]):
        return []  # a column made of no V, the right weights, or weights no factor a row makes
    said = (f"every column's weights are P's times a factor of its own for each row (from {fmt(np.nanmin(factor))} "
            f"to {fmt(np.nanmax(factor))}): the right scores and softmax, divided by another sum in each column")
    right = np.all(np.abs(factor - 1.0) <= 10 * FACTOR_RTOL, axis=1)
    undivided = np.all(np.abs(factor * P.max(axis=1)[None] - 1.0) <= 10 * FACTOR_RTOL, axis=1)  # factor = l
    if (right | undivided).all() and undivided.any():
        return [f"every column's weights are P's times a factor of its own for each row: in columns "
                f"{spans(np.flatnonzero(undivided))} the row's sum l itself (relative to its max), so those columns "
                "are never divided by l" + (f"; columns {spans(np.flatnonzero(right))} are right" if right.any()
                                            else "")]
    keys = np.arange(P.shape[1])
    for L in (*PART_SUMS, *LANE_WIDTHS):
        share = np.stack([P[:, keys % L == c % L].sum(axis=1) for c in range(d)])  # (c, r)
        if not np.allclose(factor * share, 1.0, rtol=10 * FACTOR_RTOL):
            continue
        if L in PART_SUMS:
            return [f"{said}: column c's is P summed over the keys j = c mod {L} alone: l added over only the lanes "
                    f"or threads whose index is c mod {L} (a xor butterfly over a warp's 32 lanes missing its offsets "
                    f"below {L}, or {L} threads a row whose sums are never added); look at the sum's shuffle loop "
                    "(its start and bound) or the threads that share a row"]
        return [f"{said}: column c's is P summed over the keys j = c mod {L} alone, the share of the row's sum "
                f"l that lane c of {L} keeps of its own keys, never added across the lanes (a sum reduced in no "
                "shuffle or shared memory)"]
    if s is not None and (modelled := tile_sums.reading(factor, s) or warp_tiles.reading(weights, s)):
        return [f"{said}: {modelled}"]
    return [said]


def band(W: np.ndarray, P: np.ndarray) -> list[str]:
    """One set of weights that leaves out keys P weighs, by their place from the row's own: row r
    weighs keys r + lo .. r + hi only (a causal mask: hi = 0); and whether the keys kept have the
    right scores' softmax over them alone. Empty where the keys left out make no such band."""
    N = W.shape[0]
    offset = np.arange(N)[None, :] - np.arange(N)[:, None]  # key j's place from row r: j - r
    kept, out = W > TINY_WEIGHT, (np.abs(W) <= TINY_WEIGHT) & (P > TELLING)
    if not out.any() or not kept.any():
        return []
    lo, hi = int(offset[kept].min()), int(offset[kept].max())
    inside = (offset >= lo) & (offset <= hi)
    if out[inside].any():
        return []  # a key inside the band left out: not a band
    renormalised = np.where(inside, P, 0.0) / np.where(inside, P, 0.0).sum(axis=1, keepdims=True)
    which = (f"keys up to its own{f' + {hi}' if hi > 0 else f' - {-hi}' if hi < 0 else ''} (a causal mask)"
             if lo <= -(N - 1) else f"keys r {'+' if lo >= 0 else '-'} {abs(lo)} to r {'+' if hi >= 0 else '-'} {abs(hi)}")
    return [f"each row weighs only {which}: {int(out.sum())} weights of P over {fmt(TELLING)} are 0 (e.g. row "
            f"{int(np.argwhere(out)[0][0])}, key {int(np.argwhere(out)[0][1])}); the keys kept have the right scores' "
            f"softmax over them alone to {fmt(np.abs(W - renormalised).max())}"]


def column_groups(weights: np.ndarray) -> list[list[int]]:
    """Output columns with the same weights, in order of their first column."""
    groups: list[list[int]] = []
    for c in range(weights.shape[0]):
        home = next((g for g in groups if np.abs(weights[c] - weights[g[0]]).max() <= MAP_ATOL), None)
        if home is None:
            groups.append([c])
        else:
            home.append(c)
    return groups


def moved(T: np.ndarray, P: np.ndarray) -> list[str]:
    """Where every output value is one right value (row r', column c') of this batch: the map."""
    N, d = T.shape[:2]
    mass = np.abs(T).sum(axis=2)  # (r, c, c')
    source_col = mass.argmax(axis=2)
    taken = T[np.arange(N)[:, None], np.arange(d)[None, :], :, source_col].reshape(N * d, N)  # (r*d + c, k)
    if (mass.sum(axis=2) - mass.max(axis=2)).max() > MAP_ATOL:
        return []  # a value made of more than one column of V: no move
    nearest = ((taken ** 2).sum(axis=1)[:, None] - 2 * taken @ P.T + (P ** 2).sum(axis=1)[None]).argmin(axis=1)
    if np.abs(taken - P[nearest]).max() > MAP_ATOL:
        return []
    source_row = nearest.reshape(N, d)
    r, c = np.meshgrid(np.arange(N), np.arange(d), indexing="ij")
    if ((source_row == r) & (source_col == c)).all():
        return []  # every value in its place: nothing moved
    formula = map_formula(r, c, source_row, source_col, N, d)
    example = next(((a, b) for a in range(N) for b in range(d) if (source_row[a, b], source_col[a, b]) != (a, b)))
    a, b = example
    return [f"every value is a right value of another place: O's row r, column c holds the right value of "
            f"{formula or 'another row and column (no formula of those tried fits)'}; "
            f"e.g. row {a}, column {b} holds row {source_row[a, b]}, column {source_col[a, b]}'s"]


def crossing(across: np.ndarray) -> list[str]:
    """Terms across columns: which of V's columns each output column takes."""
    d = across.shape[1]
    taken = np.abs(across).max(axis=(0, 2)) > MAP_ATOL  # (c, c')
    shown = [f"{c}<-{spans(np.flatnonzero(taken[c]))}" for c in range(d) if taken[c].any()][:6]
    return [f"output columns take other columns of V: {int(taken.any(axis=1).sum())} of {d} columns "
            f"(column <- V's columns besides its own: {', '.join(shown)}{' ...' if taken.any(axis=1).sum() > 6 else ''}"
            f"); up to {fmt(np.abs(across).max())} a weight"]
