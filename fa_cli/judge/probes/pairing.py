"""Which weight meets which element of V: the linear map T read as pairs.

Where every value of T[r, c, :, :] is one of P's weights of row r, the program multiplies key j's
weight by one element of V in output column c, V[k, c'], where it should multiply V[j, c]. The
pairs (c, j) -> (k, c') are read from T by value (each large enough entry against row r's
weights, where exactly one is that close), agreed by the rows, checked by building T back from P
and the pairs, and then said by formula:

  xor       V's row j xor (c mod W): the weights of a warp's lanes paired by an xor of the lane
            (a shuffle's source lane an xor where the key's own lane was meant)
  swizzle   V[j, c xor (j mod T)]: a V tile stored with an XOR swizzle and read plain (or the reverse)
  rotated   V's row j0 + ((j - j0 + c) mod T) within its tile of T keys
  tile      the V tile of T keys stored transposed (d x T) and read as T x d, or the reverse: key
            j0 + jj meets the tile's element jj*d + c counted in the other layout

else with examples. Where a column's entries are sums of weights instead, each key tile's whole
weight on one row of V (tile_gathered), the row is said: j0 + (c mod T), a V row indexed by the
lane's own key. Where one set of weights serves every column, V's row k weighed with key f(k)'s
weight (rows_weighed): f by formula (a lane read at a quarter of its place, a tile's upper keys
all given one key's weight), else examples. A GPU program's mechanics (which weight meets which V
row), not its softmax.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from .step import fmt, spans

SURE_WEIGHT = 1e-4  # entries of T this large are paired with a weight of P by value
MATCH_RTOL = 1e-4  # an entry "is" a weight of P within this share of it (a float32 program's exp)
APART = 20.0  # the next nearest weight of the row must be this many times further: one weight, no doubt
AGREE = 0.9  # of the rows that pair (c, j) the same way
CHECK_ATOL = 1e-4  # T built back from P and the pairs against the T read (weights below SURE_WEIGHT unpaired)
EXAMPLES = 4
SCREEN = 4096  # entries of T tried first: where most are no weight of P, the rest are not read
LEAD = "in output column c, key j's weight multiplies "
LEAD_TILES = "the weights differ by output column: "


def read_pairs(T: np.ndarray, P: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(K, C), each (d, N): key j's weight in output column c meets V[K[c, j], C[c, j]] (-1 where no
    row told); None where T is not made of P's weights paired so, or is the right map."""
    N, d = T.shape[:2]
    r, c, k, cc = np.nonzero(np.abs(T) > SURE_WEIGHT)
    if r.size == 0:
        return None
    values = T[r, c, k, cc]
    few = np.random.default_rng(0).choice(r.size, size=min(r.size, SCREEN), replace=False)
    if weights_matched(P, r[few], values[few])[1].mean() < 0.5:
        return None  # most entries are no weight of P (a few thousand tell): not a pairing
    j, sure = weights_matched(P, r, values)
    if sure.mean() < 0.5:
        return None
    K, C = np.full((d, N), -1), np.full((d, N), -1)
    key, code = c[sure] * N + j[sure], k[sure] * d + cc[sure]
    combos, counts = np.unique(key * (N * d) + code, return_counts=True)
    by_key = combos // (N * d)
    for kk in np.unique(by_key):
        mine = by_key == kk
        top = np.argmax(counts[mine])
        if counts[mine][top] < AGREE * counts[mine].sum():
            return None  # the rows disagree on what key j's weight meets: no one pairing
        K.flat[kk], C.flat[kk] = divmod(int(combos[mine][top] % (N * d)), d)
    if ((K == np.arange(N)[None, :]) | (K < 0)).all() and ((C == np.arange(d)[:, None]) | (C < 0)).all():
        return None  # every weight meets its own V element: the right pairing (or another weight's problem)
    return (K, C) if np.abs(rebuilt(P, K, C, d) - T).max() <= CHECK_ATOL else None


def weights_matched(P: np.ndarray, rows: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each value of T in its row: the key whose weight of P it is, and whether that is sure
    (within MATCH_RTOL of it, and the row's next nearest weight APART times further)."""
    N = P.shape[0]
    lifted = (P + 2.0 * np.arange(N)[:, None]).ravel()  # every row's weights on one line, rows 2 apart
    order = np.argsort(lifted)
    line = np.r_[-np.inf, -np.inf, lifted[order], np.inf, np.inf]  # two beyond each end: never the nearest
    at = np.searchsorted(line, values + 2.0 * rows)
    around = at[None, :] + np.arange(-2, 2)[:, None]  # the two weights below and the two above
    with np.errstate(invalid="ignore"):
        distance = np.abs(line[around] - 2.0 * rows - values)
    nearest = np.argsort(distance, axis=0)
    best, second = np.take_along_axis(distance, nearest[:2], axis=0)
    pick = np.take_along_axis(around, nearest[:1], axis=0)[0]
    sure = (best <= MATCH_RTOL * values) & (second > APART * np.maximum(best, MATCH_RTOL * values))
    return order[pick - 2] % N, sure


def rebuilt(P: np.ndarray, K: np.ndarray, C: np.ndarray, d: int) -> np.ndarray:
    """T made of P's weights paired as (K, C) say."""
    N = P.shape[0]
    T = np.zeros((N, d, N, d))
    c, j = np.nonzero(K >= 0)
    np.add.at(T, (slice(None), c, K[c, j], C[c, j]), P[:, j])
    return T


SWIZZLED = "stored with an XOR swizzle"  # its lines are the shared tile's, not the shuffles'


def formulas(N: int, d: int):
    """(words, K(c, j), C(c, j)) of the pairings a GPU program's mechanics make."""
    c, j = np.meshgrid(np.arange(d), np.arange(N), indexing="ij")
    for W in (8, 16, 32, 64):
        if W <= N and W <= d * 2:
            yield (f"V's row j xor (c mod {W}), column c: each lane of {W} takes the weights of the key whose place "
                   "in its tile is its own place xor the lane (the weights exchanged between lanes by an xor, where "
                   "each key's own weight was meant)"), j ^ (c % W), c
    if d & (d - 1) == 0:  # c xor x stays below d for x < d
        for T in (t for t in (8, 16, 32, 64) if t <= d and N % t == 0):
            yield (f"V[j, c xor (j mod {T})]: the V tile of {T} keys {SWIZZLED} (element (r, c) at column c xor r, r "
                   "the key's place in its tile) and read without it, or read with it and stored plain"), j, c ^ (j % T)
    for T in (8, 16, 32, 64, 128):
        if N % T == 0:
            j0, jj = j - j % T, j % T
            yield (f"V's row j0 + (j - j0 + c) mod {T} in its tile of {T} keys from j0, column c (each column's "
                   "weights rotated against the keys)"), j0 + (jj + c) % T, c
            f = jj * d + c
            yield (f"element jj*d + c of its tile of {T} keys read from a tile stored column by column: "
                   f"V[j0 + (jj*d + c) mod {T}, (jj*d + c) div {T}] for key j = j0 + jj (the V tile stored transposed, "
                   "d x T, and read row by row)"), j0 + f % T, f // T
            f = c * T + jj
            yield (f"element c*{T} + jj of its tile of {T} keys read row by row: V[j0 + (c*{T} + jj) div d, "
                   f"(c*{T} + jj) mod d] for key j = j0 + jj (the V tile stored row by row and read as though "
                   "transposed)"), j0 + f // d, f % d
            for pitch in (p for p in (32, 64, 128) if p > d):  # stored at d floats a row, read at a fixed pitch
                f = jj * pitch + c
                yield (f"element jj*{pitch} + c of its tile of {T} keys stored at d = {d} floats a row: V[j0 + (jj*"
                       f"{pitch} + c) div d, (jj*{pitch} + c) mod d] for key j = j0 + jj, none past the tile (the V "
                       f"tile stored at a pitch of d and read at {pitch}, an array's fixed width)"), \
                    np.where(f < T * d, j0 + f // d, -1), f % d


BOTH_SIDES = "the same in every column: the keys' order differs between the scores and the V rows they weigh"


def said(K: np.ndarray, C: np.ndarray) -> str:
    """The pairing in words: a formula where one fits every pair read, else examples. A pairing the
    same in every column is a permutation of the keys that K's side makes as well as V's; where the
    two tile layouts coincide (T = d), both are said."""
    d, N = K.shape
    known = K >= 0
    rows = np.where(known, K, -1).max(axis=0)  # each key's V row, where one column told it
    fits = [(words, KF, CF) for words, KF, CF in formulas(N, d)
            if (KF[known] == K[known]).all() and (CF[known] == C[known]).all()]
    if ((K == rows[None]) | ~known).all() and ((C == np.arange(d)[:, None]) | ~known).all():
        if fits:  # a V tile's layout that moves whole rows: K's rows in that order would do the same
            return (LEAD + fits[0][0] + f"; {BOTH_SIDES} (or K's rows loaded in that order)"
                    + example(K, C, fits[0][1], fits[0][2]))
        return (LEAD + f"V's row p(j), {BOTH_SIDES} (K's rows loaded in another order, or V's)"
                + example(K, C, K, C))
    if len(fits) > 1 and all("tile stored" in w or "as though transposed" in w for w, _, _ in fits):
        words = fits[0][0].split(" (the V tile")[0]
        return (LEAD + words + " (the V tile stored one way and read the other: at T = d the two directions give "
                "the same map)" + example(K, C, fits[0][1], fits[0][2]))
    if fits:
        return LEAD + fits[0][0] + example(K, C, fits[0][1], fits[0][2])
    return LEAD + "another element of V than V[j, c] (no formula of those tried fits)" + example(K, C, K, C)


def example(K, C, KF, CF) -> str:
    d, N = K.shape
    wrong = [(c, j) for c in range(d) for j in range(N) if K[c, j] >= 0 and (K[c, j], C[c, j]) != (j, c)]
    shown = "; ".join(f"column {c}, key {j}: V[{KF[c, j]}, {CF[c, j]}]" for c, j in wrong[:EXAMPLES])
    return f"; e.g. {shown} ({len(wrong)} of {int((K >= 0).sum())} pairs read are not V[j, c])"


SHUFFLES = ("shuffles", r"__shfl\w*")
SHARED = re.compile(r"__shared__\s+[\w\s]*?(\w+)\s*\[")  # a shared array's declaration: its name


def look(words: str, source: Path | None) -> tuple[str, str]:
    """The source lines to show under a pairing: the shuffles where lanes exchange weights, else the
    lines that index a shared tile of V (a shared array named for V where one is, else every one;
    every one where the keys' order may be K's as well)."""
    if ("xor" in words and SWIZZLED not in words) or "lane" in words:
        return SHUFFLES
    try:
        text = source.read_text(errors="replace") if source else ""
    except OSError:
        text = ""
    names = set(SHARED.findall(text))
    names |= {m for base in names for m in re.findall(rf"\*\s*(\w+)\s*=\s*{re.escape(base)}\b", text)}  # carved from it
    either = BOTH_SIDES in words  # K's tile or V's: every shared array's lines
    named_v = sorted(names) if either else sorted(n for n in names if "v" in n.lower()) or sorted(names)
    if not named_v:
        return SHUFFLES
    return "the shared tile's index", rf"\b({'|'.join(map(re.escape, named_v))})\s*\["


TILE_SUM_RTOL = 1e-3  # a column's weight on a V row against the whole tile's weight of P


def tile_gathered(weights: np.ndarray, P: np.ndarray) -> str | None:
    """Every column's weights one V row per key tile, carrying the whole tile's weight of P: the
    row, as j0 + (c mod T) where that fits (a V row indexed by the lane's own key where the key
    of the loop over the tile belongs), else an example. None where no tile size fits."""
    d, N = weights.shape[0], P.shape[1]
    for T in (16, 32, 64):
        if N % T or N == T:
            continue
        sums = P.reshape(N, N // T, T).sum(axis=2)  # (r, tile)
        got = weights.reshape(d, N, N // T, T)  # (c, r, tile, key in tile)
        on = np.abs(got).max(axis=1) > SURE_WEIGHT  # (c, tile, key in tile): keys weighted in some row
        if not (on.sum(axis=2) == 1).all():
            continue
        where = on.argmax(axis=2)  # (c, tile): the one row of V each tile's weight meets
        held = np.take_along_axis(got, where[:, None, :, None], axis=3)[..., 0]  # (c, r, tile)
        if not np.allclose(held, sums[None], rtol=TILE_SUM_RTOL, atol=1e-7):
            continue
        if (where == (np.arange(d) % T)[:, None]).all():
            return (f"each tile of {T} keys' whole weight meets one row of V in column c, row j0 + (c mod {T}): a V "
                    f"row indexed by the lane's own key (c mod {T}) where the key of the loop over the tile belongs")
        return (f"each tile of {T} keys' whole weight meets one row of V in each column (e.g. column 1: row "
                f"j0 + {where[1 % d, 0]} of tile 0): a V row indexed by something other than the loop's key")
    return None


LOG_ATOL = 1e-3  # log W less the row's factor against log P: one weight of P (a float32 program's exp)
FLAT_ROW = 1e-4  # a row's weights this close to their mean, relatively: every key weighed alike
NO_WEIGHT = 1e-7  # every weight under this: no row of V reaches the output


def rows_weighed(W: np.ndarray, P: np.ndarray, lead: str = "one set of weights for every column") -> str | None:
    """One set of weights (for every column, or for the columns `lead` names), in which V's row k
    is weighed with key f(k)'s weight of P (times one factor a row, the same for every key: l
    counted over the keys the program weighed), f not the identity: the map f by formula (a lane
    read at a quarter of its place; the upper keys of a tile all given one key's weight; a lane
    read within its own segment of a shuffle's width), else examples. The row factor is 1 (the
    right sum), or else key 0's (its lane right)."""
    N = P.shape[1]
    if np.abs(W).max() <= NO_WEIGHT:  # zeros weigh nothing alike: no score to read from them
        return None
    if (np.ptp(W, axis=1) <= FLAT_ROW * np.abs(W).mean(axis=1)).all() and not (np.ptp(P, axis=1) <= FLAT_ROW).all():
        return (f"{lead}: every key weighed alike in every row (each weight {fmt(W.mean())}, 1/{N} is "
                f"{fmt(1 / N)}): every score of a row equal (all 0: a scale or a Q that reads as 0 where the kernel "
                "reads it, or scores never computed)")  # key f(k) would be any key: no map to read
    with np.errstate(divide="ignore", invalid="ignore"):
        lw, lp = np.log(W), np.log(P)
    if not (np.isfinite(lw).all() and np.isfinite(lp).all()):
        return None  # a V row with no weight: not this reading (KeysWithoutWeight's)
    for factor in (np.zeros((N, 1)), lw[:, :1] - lp[:, :1]):  # (r, 1): log of each row's factor
        near = np.abs((lw - factor)[:, :, None] - lp[:, None, :]).max(axis=0) <= LOG_ATOL  # (k, j): row k is key j's
        if near.any(axis=1).all():
            break
    else:
        return None  # a V row that no key's weight gives
    f = near.argmax(axis=1)
    if (f == np.arange(N)).all():
        return None
    sums = W.sum(axis=1)
    scaled = "" if np.abs(factor).max() <= LOG_ATOL else \
        " (each row's weights sum to 1: l is summed over the weights as given, key f(k)'s once for every V row it " \
        "meets)" if np.abs(sums - 1).max() <= 1e-3 else \
        f" (the rows' weights sum to {fmt(sums.min())} to {fmt(sums.max())}: l counts other keys than those weighed)"
    lead = f"{lead}; V's row k weighed with key f(k)'s weight"
    fitting = [words for words, g in row_maps(N) if (g == f).all()]
    if fitting:  # two maps that agree at this N are both said: a larger N tells them apart
        return f"{lead}: {fitting[0]}{scaled}" + (f"; at N = {N} it fits as well {fitting[1]}" if len(fitting) > 1 else "")
    shown = ", ".join(f"row {k}: key {f[k]}" for k in np.flatnonzero(f != np.arange(N))[:4])
    return f"{lead}, no formula of those tried (e.g. {shown}){scaled}"


def row_maps(N: int):
    """(words, f) of the maps a GPU program's lanes make: key k0 + kk's weight where V row k0 + kk
    (of a tile of T from k0) meets another."""
    k = np.arange(N)
    for T in (t for t in (32, 64, 128) if t <= N):  # a tile past N is the whole row again
        k0, kk = k - k % T, k % T
        for s in (2, 4, 8):
            yield (f"key k0 + (k - k0) div {s} of its tile of {T} (V row k0 + kk takes the weight of lane kk / {s}: "
                   f"a lane number divided by {s}, or a lane given where its byte address is meant, 4 bytes a lane, "
                   "as ds_bpermute takes it)"), k0 + kk // s
        for h in (8, 16, 32):  # a shuffle of width h: a lane reads lane kk mod h of its own segment of h
            for seg in range(T // h if h < T else 0):
                start = f"{seg * h} + " if seg else ""
                yield (f"key k0 + {start}(k - k0) mod {h} of its tile of {T} (V row k0 + kk takes lane {start}kk mod "
                       f"{h}'s weight: a shuffle of width {h} where the whole warp's belongs, its lanes reading "
                       f"within their own {h}-lane segment)"), k0 + seg * h + kk % h
        for h in (16, 32, 64):
            if h < T:
                yield (f"key k0 + min(k - k0, {h}) of its tile of {T} (V rows k0 + {h} .. k0 + {T - 1} all take key "
                       f"k0 + {h}'s weight: the lanes from {h} on share one lane's index, as a lane index that "
                       f"counts only the lower {h} lanes gives them)"), k0 + np.minimum(kk, h)
    for T in (16, 32, 64, 128):
        if T < N:
            yield (f"key k - {T} from the second tile of {T} on (V row k of tile t >= 1 takes key k - {T}'s weight: "
                   f"each tile's V met with the tile before's K, as a K tile loaded one tile late gives: a prefetch "
                   f"of the current tile where the next belongs, or K's buffers swapped without V's)"), \
                np.where(k < T, k, k - T)


TILE_STARTS = (16, 32, 64, 128)  # a tile's width, and the width its index may be multiplied by where it is not


def tiles_moved(W: np.ndarray, P: np.ndarray, lead: str = "one set of weights for every column") -> str | None:
    """One set of weights whose V rows take sums of P's weights: key k's weight meets V's row
    (k div T)*S + k mod T (S != T: each tile of T keys meets V's rows from its index times S, a
    tile's start counted with another tile's width), those past N none; said with the V rows no key
    meets. None where no T, S fits within CHECK_ATOL."""
    N = P.shape[1]
    k = np.arange(N)
    for T in (t for t in TILE_STARTS if t < N):
        for S in (t for t in TILE_STARTS if t != T):
            row = (k // T) * S + k % T
            met = np.zeros_like(W)
            inside = row < N
            np.add.at(met, (slice(None), row[inside]), P[:, k[inside]])
            if np.abs(met - W).max() <= CHECK_ATOL:
                alone = np.setdiff1d(k, row[inside])
                none = f"; V's rows {spans(alone)} meet no key" if alone.size else ""
                return (f"{lead}; key k's weight meets V's row (k div {T})*{S} + k mod {T}: each tile of {T} keys "
                        f"meets V's rows from its index times {S} where times {T} belongs (a V tile loaded from row "
                        f"j*{S} where j*{T} belongs: one tile size for another){none}")
    return None
