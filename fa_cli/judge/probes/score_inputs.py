"""The scores the program used, read back: which element of the input each term of a score took.

One run. Every batch has the same K, coded: values drawn without repeat from one place in SLOTS
of a grid in [-2, 2), so that a value read back names the one element it came from. Batch x * n + t has every row's Q
one-hot at dim x, at sqrt(d) (the score's term for dim x is then k[j, x] itself), and V one-hot
at keys t*d .. t*d + d - 1 (column c of the output is then the weight of key t*d + c). So each
row's weights are read for Q along each dim in turn, and their log ratios are the scores'
differences: s[j] - s[j0] = K'[j, x] - K'[j0, x], where K' is what the program read for K. The
one constant per dim is an element of K less the term of one of the first four keys: the one
under which the most of 12 terms land on elements of K, then applied to all (a few of the N*d
may hold what the input does not: memory never written). Where that fits no formula, the terms
are read again batch by batch, each against a key of its batch with constants of its own (a
program that reads past K's end reads V, whose values differ by batch: the batches' softmax sums
differ), and taken only where a formula fits them. Then K' against K, element by element:

  right       every term takes k[j, x]: the scores are right; the step says nothing
  formula     one of a family fits every term read: K read transposed (K[x*N + j]), keys or dims
              shifted, rows read at another pitch (K[j*P + x]), a tile of K's rows read at another
              pitch (K[j0*d + jj*P + x]), a tile of keys written at one pitch and read at
              another (its pad slots never written), dims swizzled (K[j, x xor (j mod m)]),
              K transposed and read with rows of d, or each T x T block of K read transposed
              in place: said with its figures
  patterns    where no formula fits (key_patterns.py): keys no row weighs, in a pattern that
              repeats (never scored), keys read right in a pattern that repeats (rows a load
              never wrote), two sets of keys off by one factor a row (merged without
              one max), a few keys counted c times (slots clamped to the last key), one map of dims,
              a run of dims read a fixed number of floats off their place
  examples    otherwise, which element the first wrong terms took

Where the weights are not those of scores (weights of 0, rows that disagree), or fewer than OF_K
of the terms land on elements of K, it says so in numbers and names nothing.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from ...programs import wave64
from ..findings import Finding, Kind
from ..mistakes import KEY_TILES
from .key_patterns import (LOAD_LOOK, MASK_LOOK, MATCH_TOL, dim_map, dims_shifted, keys_apart, keys_by_group,
                           keys_by_tile, keys_counted, keys_in_part, keys_unweighed, nearest, tile_at_pitches)
from .linear_map import map_rows
from .readings import TINY_WEIGHT, measured
from .step import Context, Probe, ProbeInput, run_many, spans

CODE_SEED = 20261129
SLOTS = 8  # K's values take one grid place in this many
OF_K = 0.75  # the share of terms that must land on an element of K for the reading to say which
ROWS_AGREE = 1e-2  # the rows' log ratios of one key, all alike within this: one score per key
PITCHES = (-1, 1, 2, 4)  # a pitch of d plus these: padding of a row, or a row read short
SWIZZLES = (4, 8, 16, 32, 64)  # a tile's rows whose dims are xor-ed with the row's index within m rows
# The source lines shown: where a tile of K is indexed with a pitch (its writes and its reads).
LOOK = ("a tile's pitch", r"\[\s*\w+\s*\*\s*\(?\s*\w+\s*(\+\s*\d+)?\s*\)?\s*\+\s*\w+\s*\]")


def coded_keys(N: int, d: int) -> np.ndarray:
    """K of the run: N*d values that name their element, drawn without repeat from SLOTS times as
    many places a grid step apart in [-2, 2): a term read back with a wrong constant lands on one
    of them one time in SLOTS."""
    return coded((N, d))


def coded(shape: tuple[int, ...], seed: int = CODE_SEED) -> np.ndarray:
    """Values that name their element (coded_keys), of any shape."""
    rng = np.random.default_rng(seed)
    count = int(np.prod(shape))
    places = SLOTS * count
    chosen = rng.choice(places, size=count, replace=False)
    return ((chosen - places / 2) * (4.0 / places)).astype(np.float32).reshape(shape)


def design(N: int, d: int, k: np.ndarray) -> ProbeInput:
    """d * ceil(N/d) batches: batch x*n + t with Q one-hot at dim x (sqrt(d)), V one-hot at keys t*d + c."""
    n = -(-N // d)
    q = np.zeros((d * n, N, d), dtype=np.float32)
    v = np.zeros((d * n, N, d), dtype=np.float32)
    for x in range(d):
        q[x * n:(x + 1) * n, :, x] = np.sqrt(d)
    for t in range(n):
        keys = np.arange(t * d, min(N, (t + 1) * d))
        v[t::n, keys, keys - t * d] = 1.0
    return ProbeInput(q, np.broadcast_to(k, q.shape), v, "the scores' batches")


def weights_by_dim(out: np.ndarray, N: int, d: int) -> np.ndarray:
    """(d, N, N): the weights of every row with Q along dim x."""
    n = -(-N // d)
    W = np.zeros((d, N, n * d))
    for x in range(d):
        W[x] = out[x * n:(x + 1) * n].transpose(1, 0, 2).reshape(N, n * d)
    return W[:, :, :N]


def read_terms(W: np.ndarray, block: int | None = None) -> tuple[np.ndarray, float]:
    """(d, N) differences K'[j, x] - K'[j0, x] (NaN where a weight is 0), from the rows' log ratios
    (their median), j0 the first key of j's block of `block` keys (all N by default) that every row
    holding values weighs (a row never written is left out), and the largest disagreement between
    rows. A block is one batch's keys: batches whose softmax sums differ (a program that reads V's
    values as K's past K's end) share no constant."""
    d, rows, N = W.shape
    block = block or N
    with np.errstate(divide="ignore", invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a key no row weighs: its term is NaN, said as such
        logs = np.where(W > TINY_WEIGHT, np.log(np.maximum(W, TINY_WEIGHT)), np.nan)
        diffs = np.full_like(logs, np.nan)
        written = np.isfinite(logs).any(axis=(0, 2))  # rows that hold values: a row never written weighs nothing
        for start in range(0, N, block):
            keys = logs[:, :, start:start + block]
            weighed = np.flatnonzero(np.isfinite(keys[:, written]).all(axis=(0, 1)))
            if weighed.size:
                diffs[:, :, start:start + block] = keys - keys[:, :, weighed[0]:weighed[0] + 1]
        terms = np.nanmedian(diffs, axis=1)
        spread = np.nanmax(np.abs(diffs - terms[:, None, :])) if np.isfinite(diffs).any() else np.inf
    return terms, float(spread)


def unread(W: np.ndarray) -> str:
    """Why most terms could not be read, as measured: values that are no weight (NaN, infinite or
    negative), the batches (one a dim of Q) that hold 0 everywhere, rows that hold 0, and keys that
    the rows holding weights do not all weigh."""
    d, N, _ = W.shape
    said = []
    odd = ~np.isfinite(W) | (W < -TINY_WEIGHT)
    if odd.any():
        said.append(f"{odd.mean():.0%} of the values read are no weight (NaN, infinite or negative)")
    held = np.isfinite(W) & (W > TINY_WEIGHT)
    dims = held.any(axis=(1, 2))  # a dim's batches that hold a weight
    rows = held[dims].any(axis=(0, 2))
    zero = np.where(np.isfinite(W), np.abs(W) <= TINY_WEIGHT, False)
    if not dims.all() and zero[~dims].all():
        said.append(f"the batches of {d - int(dims.sum())} of the {d} dims of Q hold 0 everywhere (never written, or "
                    "computed as 0)")
    if dims.any() and not rows.all() and zero[dims][:, ~rows].all():
        said.append(f"{N - int(rows.sum())} of {N} rows hold 0 in every column for every Q (never written, or "
                    "computed as 0)")
    if dims.any() and rows.any():
        unweighed = int((~held[dims][:, rows].all(axis=(0, 1))).sum())
        if unweighed:
            said.append(f"{unweighed} of {N} keys are not weighed by every row that holds weights, in every dim "
                        "that does (each row's weights fall on keys of their own)")
    return "; ".join(said or ["the weights could not be read"]) + ": no score is read"


def sources(terms: np.ndarray, k: np.ndarray, tol: float = MATCH_TOL) -> np.ndarray:
    """(N, d) the flat index into K of the element each term took (-1: none within MATCH_TOL), each
    dim's constant the one under which the most terms are elements of K."""
    d, N = terms.shape
    order = np.argsort(k.ravel())
    values = k.ravel()[order].astype(np.float64)
    found = np.full((N, d), -1)
    for x in range(d):
        known = np.isfinite(terms[x])
        if not known.any():
            continue
        seen, best = terms[x][known], None
        # the constant K'[0, x] is an element of K less the term of one of the first keys read (the next
        # where key 0's own term holds no element of K)
        for r in range(min(4, seen.size)):
            hits, at = _matches(values, values - seen[r], seen, tol)
            if best is None or hits.sum() > best[0].sum():
                best = hits, at
            if hits.sum() >= 0.9 * seen.size:
                break
        found[np.flatnonzero(known), x] = np.where(best[0], order[best[1]], -1)
    return found


def _matches(values: np.ndarray, constants: np.ndarray, seen: np.ndarray,
             tol: float) -> tuple[np.ndarray, np.ndarray]:
    """For the constant under which the most terms land on a value of K (chosen on a few terms, then
    applied to all): which do, and where."""
    few = seen[np.linspace(0, seen.size - 1, min(seen.size, 12)).astype(int)]
    best = int(nearest(values, constants[:, None] + few[None, :], tol)[1].sum(axis=1).argmax())
    at, hit = nearest(values, constants[best] + seen, tol)
    return hit, at


@dataclass(frozen=True)
class Names:
    """How the words name the operand read back: K's keys by default, Q's rows for query_inputs."""

    one: str = "k"
    whole: str = "K"
    items: str = "keys"
    item: str = "key"
    index: str = "j"
    per_row: bool = False  # one constant per row (Q's side), not per dim (K's)


KEYS = Names()


def formulas(N: int, d: int, names: Names = KEYS):
    """(words, what a term placed on no element of the operand is, the flat index each term would
    take: -1 for none) of the families tried."""
    j, x = np.meshgrid(np.arange(N), np.arange(d), indexing="ij")
    o, W, i, it = names.one, names.whole, names.index, names.items
    past = f"past {W}'s last element"
    yield f"{W} read as if stored d x N: {o}[{i}, x] taken from {W}[x*N + {i}]", past, x * N + j
    for s in range(1, min(N, 4)):
        yield f"{it} shifted: {o}[{i}, x] taken from {W}[{i} + {s}, x]", past, np.where(j + s < N, (j + s) * d + x, -1)
        yield f"{it} shifted: {o}[{i}, x] taken from {W}[{i} - {s}, x]", f"before {W}", \
            np.where(j >= s, (j - s) * d + x, -1)
    for s in range(1, min(d, 4)):
        yield f"dims shifted: {o}[{i}, x] taken from {W}[{i}, (x + {s}) mod d]", past, j * d + (x + s) % d
    for m in SWIZZLES:  # a tile stored with its dims xor-ed by the row (no bank conflicts), read plain
        dim = x ^ (j % m)
        if m <= N:
            yield (f"dims swizzled: {o}[{i}, x] taken from {W}[{i}, x xor ({i} mod {m})]: a tile of {m} {it} stored "
                   f"with element ({names.item}, c) at c xor {names.item} and read without it (or the reverse)"), \
                past, np.where(dim < d, j * d + dim, -1)
    for L in (d,):  # K transposed by the program (d x N, N a dim) and read with another row length
        flat = x * L + j
        yield (f"{W} transposed (d x N: a row of N {it} a dim) and read with rows of {L}: {o}[{i}, x] taken from "
               f"the transpose's flat element x*{L} + {i}, which is {W}[(x*{L} + {i}) mod N, (x*{L} + {i}) div N]"), \
            past, np.where(flat < N * d, (flat % N) * d + flat // N, -1)
    for T in (8, 16, 32):  # a transpose through a shared tile: each block moved, its inside left as it was
        row, dim = j - j % T + x % T, x - x % T + j % T
        if T <= d and T < N:
            yield (f"each {T} x {T} block of {W} read transposed in place: {o}[{i}, x] taken from "
                   f"{W}[{i} - {i} mod {T} + x mod {T}, x - x mod {T} + {i} mod {T}] (a tile of {T} {it} stored "
                   f"transposed and read as stored, or a tiled transpose that moves each block and leaves its inside "
                   f"as it was: tile[r][c] written back where tile[c][r] belongs)"), past, \
                np.where((row < N) & (dim < d), row * d + dim, -1)
    for lanes in (4, 8, 16, 32):  # a row's dims dealt to lanes: by blocks on one side, strided on the other
        per = d // lanes
        if d % lanes == 0 and per > 1:
            yield (f"dims in another order: {o}[{i}, x] taken from {W}[{i}, x div {per} + {lanes}*(x mod {per})]: the "
                   f"other operand's dims dealt to {lanes} lanes {per} in a row (lane h: h*{per} ...) where these are "
                   f"every {lanes}th (lane h: h, h + {lanes}, ...)"), past, j * d + x // per + lanes * (x % per)
            yield (f"dims in another order: {o}[{i}, x] taken from {W}[{i}, (x mod {lanes})*{per} + x div {lanes}]: "
                   f"the other operand's dims dealt to {lanes} lanes every {lanes}th where these are {per} in a "
                   "row"), past, j * d + (x % lanes) * per + x // lanes
    yield from vectors_transposed(j, x, N, d, names)
    for p in PITCHES:
        flat = j * (d + p) + x
        yield (f"rows read at a pitch of {d + p} floats (d {p:+d}): {o}[{i}, x] taken from {W}'s flat element "
               f"{i}*{d + p} + x"), past, np.where(flat < N * d, flat, -1)
    for tile in KEY_TILES:
        for wrote in (d, *(d + p for p in PITCHES)):
            for read in (d, *(d + p for p in PITCHES)):
                if wrote == d and read != d and tile < N:  # K's own rows, a tile of them read at another pitch
                    yield (f"a tile of {tile} {it} read at a pitch of {read} floats a {names.item} where {W}'s rows "
                           f"are d = {d}: {names.item} {i}0 + {i}{i}, dim x takes {W}'s flat element {i}0*{d} + "
                           f"{i}{i}*{read} + x"), past, tile_at_pitches(j, x, tile, wrote, read, N, d)
                elif wrote != read and tile < N:
                    yield (f"a tile of {tile} {it} written at a pitch of {wrote} floats a {names.item} and read at "
                           f"{read}: {names.item} {i}0 + {i}{i}, dim x takes the tile's float {i}{i}*{read} + x, "
                           f"which holds {names.item} ({i}{i}*{read} + x) // {wrote}, dim ({i}{i}*{read} + x) % "
                           f"{wrote} of the tile"), \
                        "on the tile's pad slots, never written", tile_at_pitches(j, x, tile, wrote, read, N, d)


def vectors_transposed(j: np.ndarray, x: np.ndarray, N: int, d: int, names: Names):
    """A tile of T rows moved in vectors of w floats (float4, float2, float), its vectors stored by one
    decomposition of their index and read by the other: slot (r, x div w) holding the tile's vector
    (x div w)*T + r in file order (stored transposed, read plain), or the reverse."""
    o, W, i, it = names.one, names.whole, names.index, names.items
    for T in KEY_TILES:
        for w in (4, 2, 1):
            if T > N or d % w:
                continue
            j0, r, c, per = j - j % T, j % T, x // w, d // w
            inside = j0 + T <= N
            ahead = c * T + r  # the file-order vector a slot holds, stored transposed
            back = (r * per + c) % T * per + (r * per + c) // T  # and the reverse
            what = f"vectors of {w} floats" if w > 1 else "single floats"
            for formula, vector in ((f"(x div {w})*{T} + {i}{i}", ahead),
                                    (f"(({i}{i}*{per} + x div {w}) mod {T})*{per} + ({i}{i}*{per} + x div {w}) div {T}",
                                     back)):
                yield (f"a tile of {T} {it} moved in {what}, stored by one decomposition of a vector's index and read "
                       f"by the other: {o}[{i}, x] ({i} = {i}0 + {i}{i}) taken from the tile's vector {formula} in "
                       f"file order, {W}'s flat element {i}0*{d} + that*{w} + x mod {w} (a float"
                       f"{w if w > 1 else ''} index split as row, vector where the store or the read splits it as "
                       "vector, row)"), \
                    "past the last whole tile", np.where(inside, j0 * d + vector * w + x % w, -1)


def fitting(found: np.ndarray, N: int, d: int, names: Names = KEYS) -> str | None:
    """The words of the first family that gives every term it places on K (at least half of them),
    with a quarter at most read as none of K or placed off K (a pad slot, past the last key); where
    it places none, what was read must be no element of K but by chance (a few distinct ones: a
    pad that happens to hold a value of K), not K's elements of another formula."""
    read = found >= 0
    for words, off, predicted in formulas(N, d, names):
        placed = predicted >= 0
        strays = np.unique(found[~placed & read])
        if names.per_row:  # a row most of whose terms fall off has its one constant from the few: unknown
            placed &= (placed.sum(axis=1, keepdims=True) * 2 > d)
        if ((found == predicted) | ~placed | ~read).all() and (read & placed).sum() >= N * d // 2 \
                and (~read).sum() <= N * d // 4 and (~placed).sum() <= N * d // 4 \
                and strays.size <= max(2, (~placed).sum() // 4):
            return words + (f" ({int((~placed).sum())} terms {off})" if (~placed).any() else "")
    return None


class ScoreInputs(Probe):
    """Which element of K each term of each score took, read back in one run."""

    name = "the scores read back: which element of K each term took"

    def applies(self, ctx: Context) -> bool:
        shape = ctx.probe.shape
        return not ctx.facts.named and ctx.facts.out is not None and map_rows(shape.N, shape.d, ctx.kind) >= 4 \
            and ctx.facts.out.any()  # zeros everywhere: no weight to read a score from

    def run(self, ctx: Context) -> list[Finding]:
        N, d = map_rows(ctx.probe.shape.N, ctx.probe.shape.d, ctx.kind), ctx.probe.shape.d
        k = coded_keys(N, d)
        inp = design(N, d, k)
        got, apart = run_many(ctx, inp)
        where = f"{inp.shape.B} batches of {N} rows, Q one-hot by dim, K coded"
        if apart:
            return [Finding(Kind.OBSERVED, [f"probe: the scores read back ({where}): {apart}"])]
        if got is None:
            return [Finding(Kind.OBSERVED, [f"probe: no output of the right size on the {where}: the scores not read"])]
        W = weights_by_dim(got.astype(np.float64), N, d)
        terms, spread = read_terms(W)
        if np.isfinite(terms).mean() < 0.5:
            return [Finding(Kind.OBSERVED, [f"probe: the scores read back ({where}): {unread(W)}"])]
        if spread > ROWS_AGREE:
            ctx.facts.query_side = True  # rows alike in Q that score the keys otherwise: Q read at other places?
            return [Finding(Kind.OBSERVED, [
                f"probe: the scores read back ({where}): the rows' weights disagree by up to {spread:.3g} in their "
                "log ratios: not one score per key shared by the rows (the rows' scores differ, or the weights "
                "are no softmax of scores)"])]
        found = sources(terms, k)
        right = found == np.arange(N * d).reshape(N, d)
        if right.all():
            ctx.facts.query_side = True  # Q's side is read next (query_inputs.py)
            return []
        if (words := fitting(found, N, d)) is None:  # read again by batch: batches whose softmax sums differ
            by_batch = read_by_batch(W, k, N, d)
            if words := fitting(by_batch, N, d):
                found, right = by_batch, by_batch == np.arange(N * d).reshape(N, d)
        hip = ctx.source is not None and wave64.emulates(ctx.source)  # 64-lane wavefronts
        if words is None and (unweighed := keys_unweighed(W, terms, k, TINY_WEIGHT, hip)):
            return measured(ctx, [f"probe: the scores read back ({where}): {unweighed}"], look=MASK_LOOK,
                            keys_unweighed=unweighed)
        if words is None and (grouped := keys_by_group(terms, k)):  # a merge's factors, not the scores
            return [Finding(Kind.OBSERVED, [f"probe: the scores read back ({where}): {grouped}"])]
        if words is None and (part := keys_in_part(terms, k)):
            return measured(ctx, [f"probe: the scores read back ({where}): {part}"], look=LOAD_LOOK, keys_in_part=part)
        if words is None and (apart := keys_apart(terms, k)):
            return measured(ctx, [f"probe: the scores read back ({where}): {apart}"], keys_apart=apart)
        if words is None and (counted := keys_counted(terms, k)):
            return measured(ctx, [f"probe: the scores read back ({where}): {counted}"], keys_counted=counted)
        if words is None and (by_tile := keys_by_tile(terms, k)):  # a softmax step's factor, not the scores
            return [Finding(Kind.OBSERVED, [f"probe: the scores read back ({where}): {by_tile}"])]
        if words is None and (found >= 0).mean() < OF_K:  # the log ratios are no differences of K's values
            return [Finding(Kind.OBSERVED, [
                f"probe: the scores read back ({where}): {(found >= 0).mean():.0%} of the terms land on an element "
                f"of K (one in {SLOTS} would by chance): its weights are no softmax of scores q . k' over elements of "
                "K (a factor on the scores, or a step of the softmax written otherwise: the later steps look)"])]
        head = (f"probe: the scores read back ({where}): {int(right.sum())} of {N * d} terms q[x] k[j, x] take "
                f"k[j, x]; {int((found < 0).sum())} take no element of K")
        if words:
            return measured(ctx, [f"{head}; every term fits {words}"], look=LOOK, score_inputs=words)
        if mapped := dim_map(found, N, d) or dims_shifted(found, N, d):
            return measured(ctx, [f"{head}; {mapped}"], score_inputs=mapped)
        return [Finding(Kind.OBSERVED, [f"{head}; {examples(found, right, d)}; no formula of those tried fits "
                                        "(transposed, shifted keys or dims, another pitch, a tile's two pitches)"],
                        dict(scores_read_otherwise=True))]


def read_by_batch(W: np.ndarray, k: np.ndarray, N: int, d: int) -> np.ndarray:
    """The terms read with each batch's keys against a key of that batch, each batch's constants its
    own: for a program whose batches' softmax sums differ (it reads past K's end into V, whose values
    differ by batch), where one constant per dim does not hold across them. Only a formula that fits
    it is taken (a batch of a few keys leaves its constant loosely fixed)."""
    terms, _ = read_terms(W, block=d)
    return np.concatenate([sources(terms[:, start:start + d], k) for start in range(0, N, d)])


def examples(found: np.ndarray, right: np.ndarray, d: int, names: Names = KEYS) -> str:
    """Where the wrong terms are, and the first three: which element each took."""
    wrong = np.argwhere(~right)[:3]
    W = names.whole
    said = "; ".join(f"{names.item} {a}, dim {b} took " + (f"{W}[{found[a, b] // d}, {found[a, b] % d}]"
                                                          if found[a, b] >= 0 else f"no element of {W}")
                     for a, b in wrong)
    return f"wrong in {names.items} {spans(np.flatnonzero((~right).any(axis=1)))[:80]}; e.g. {said}"
