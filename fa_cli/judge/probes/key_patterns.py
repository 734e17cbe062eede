"""The patterns of keys read wrong that no formula of score_inputs.py gives, read from the terms
(d, N: what each key's score took in each dim, less key 0's) against the coded K:

  unweighed   keys no row weighs for any Q, repeating every m keys: keys never scored (a mask of
              lanes or keys), not rows a load left unwritten (those are scored, against what the
              memory held)
  in part     with key 0 read right, the keys read right repeat every m keys: rows of a tile of K
              that its load never wrote (not where the others are their own row's after all: off
              by a constant, reordered, or another key's row of their own tile); where the others
              take elements of K at other dims, the tile read at other places than it was stored
  apart       the others right but for one constant a row: two sets of keys summed against maxima
              of their own and added without one max
  counted     every key right but a few whose weights count c times (c whole): the last key's, a
              tile's slots past N clamped to key N - 1 and not masked
  dims mapped every key's dims read through one map of dims (a float4's components paired wrong)
  dims off    one run of dims of every key read a fixed number of floats off their place (a part
              of the row's offset written as a constant)
"""
from __future__ import annotations

import numpy as np

from ..mistakes import KEY_TILES
from .step import spans

MATCH_TOL = 4e-5  # a term read back names an element of K within this: under half the grid's step
MAX_PERIOD = 256  # keys read right in a pattern that repeats every m keys, m up to this
# The source lines shown: a loop that loads a tile cooperatively (its start and its stride).
LOAD_LOOK = ("a tile's load loop", r"for\s*\([^;]*=\s*\w*(?:threadIdx|tid|lane|tx)\w*[^;]*;[^;]*;[^)]*\+=")
# A mask that leaves keys out: a ballot, a bit of a mask taken by the lane, a test of the lane's index.
MASK_LOOK = ("a mask of lanes or keys", r"ballot|<<\s*\(?\s*(?:lane|tx|threadIdx\.x)\b|"
             r"\bif\s*\(\s*!?\s*\(?\s*(?:lane|tx|threadIdx\.x)\s*[<>]")
SUMS_TO_ONE = 1e-3  # the weighed keys' weights make up each row's whole softmax: the others were never scored
WAVE = 64  # a wavefront's lanes on the MI210: a 64-lane mask read through 32 bits leaves lanes 32..63 out


def keys_unweighed(W: np.ndarray, terms: np.ndarray, k: np.ndarray, tiny: float, wavefronts: bool = False,
                   tol: float = MATCH_TOL) -> str | None:
    """Where the keys that no row holding values weighs, for any Q, repeat every m keys (not all,
    not none), each row's weights sum to 1 and every weighed key's terms are its own row of K: the
    others never scored. A load that left rows of a tile unwritten does not do this (those keys
    are scored, against what the memory held), nor V rows read from other keys (the weighed keys'
    terms are then not their own): a mask of lanes or keys, or a loop's bound, that leaves them
    out. wavefronts: a hw4.hip, where lanes 32-63 of 64 left out have a likely reading."""
    d, rows, N = W.shape
    held = np.isfinite(W) & (W > tiny)
    zero = np.isfinite(W) & (np.abs(W) <= tiny)
    written = held.any(axis=(0, 2))  # rows that hold weights
    none = zero[:, written].all(axis=(0, 1)) if written.any() else np.zeros(N, dtype=bool)
    if not none.any() or none.all():
        return None
    m = next((m for m in range(2, min(MAX_PERIOD, N // 2) + 1) if np.array_equal(none, np.resize(none[:m], N))), None)
    sums = W[:, written].sum(axis=2)  # a key scored whose V row was never read takes its share of the sum
    if m is None or not np.isfinite(sums).any() or not (np.abs(sums[np.isfinite(sums)] - 1) <= SUMS_TO_ONE).all():
        return None
    off = _offsets(terms, k, int(np.flatnonzero(~none)[0]))  # the first weighed key's terms fix the constants
    if not (np.abs(off[~none]) <= tol).all():  # weighed keys read otherwise: not a mask alone
        return None
    left = np.flatnonzero(none[:m])
    words = (f"the keys j with j mod {m} in {{{spans(left)}}} ({int(none.sum())} of {N}) get no weight in any row for "
             f"any Q, and the others are weighed as their own rows of K give, their weights each row's whole "
             f"softmax: those keys are never scored (a mask of lanes or keys, or a loop's bound, that leaves them "
             f"out; not a load: a row a load left unwritten is still scored, against what the memory held)")
    if wavefronts and m == WAVE and left.tolist() == list(range(WAVE // 2, WAVE)):
        words += (", as where lane j mod 64 of a 64-lane wavefront scores key j and lanes 32-63 are left out: a "
                  "64-bit mask of lanes read through 32 bits (1u << lane, an unsigned int mask)")
    return words


def keys_in_part(terms: np.ndarray, k: np.ndarray, tol: float = MATCH_TOL) -> str | None:
    """Where, with key 0 read right, some keys take every term from their own row of K and the
    others do not, in a pattern that repeats every m keys: a tile of K loaded in part (a load loop
    whose start or stride leaves rows of the tile as they were). Key 0 fixes each dim's constant
    (sources() would choose it by the most terms landing on K, which a quarter of keys read right
    cannot win against chance). Not said where the other keys' terms are their own row's after all,
    off by a constant or in another order: those keys were read, and weighed otherwise."""
    split = _periodic_split(terms, k, tol)
    if split is None:
        return None
    m, first, ok, off = split
    if not np.isfinite(off[~ok]).any():  # no weight at all: never scored (keys_unweighed), not loaded in part
        return None
    with np.errstate(invalid="ignore"):
        partly = (np.abs(off[~ok]) <= tol).mean() > 0.05  # terms of theirs right: rows written in part
    read = off + k  # what each key's terms took, on K's scale
    if partly or _structured(off[~ok], k[~ok], read[~ok], tol) or _of_their_tile(np.flatnonzero(~ok), read, k, m, tol):
        return None
    head = (f"with key 0 read right, the keys j with j mod {m} in {{{spans(np.flatnonzero(first))}}} "
            f"({int(ok.sum())} of {ok.size}) take every term from their own row of K, the other {int((~ok).sum())} keys")
    if moved := _elements_moved(np.flatnonzero(~ok), read, k, m, tol):
        return (f"{head} {moved}: the tile read at other places than its load stored it (a pitch or an offset of the "
                "store and of the read that differ), not rows a load left unwritten (those hold what was there, at "
                "their own dims)")
    return (f"{head} none from theirs: rows of a tile of K that its load never wrote (a cooperative load loop whose "
            f"start or stride reaches only those rows of every {m})")


def keys_by_group(terms: np.ndarray, k: np.ndarray, tol: float = MATCH_TOL) -> str | None:
    """Where, with key 0 read right, the keys of a pattern that repeats every m keys are read right
    and every other group of G of each m (j mod m in one run of G) is right too but for one constant
    a dim of its own, the groups' constants not all one: each group's weights one factor off in
    each row. Groups of keys (warps that split each tile's keys) each run against a max of their
    own and merged otherwise; not rows a load left unwritten (keys_in_part's), which hold no row
    of K at all."""
    split = _periodic_split(terms, k, tol)
    if split is None:
        return None
    m, first, ok, off = split
    place = np.arange(ok.size) % m
    for G in (G for G in (32, 16, 8, 4) if G < m and m % G == 0):
        groups = [np.flatnonzero((place // G == g) & ~ok) for g in range(m // G)]
        groups = [keys for keys in groups if keys.size]
        if any(keys.size < 2 or not np.isfinite(off[keys]).all() or np.ptp(off[keys], axis=0).max() > 4 * tol
               for keys in groups):
            continue
        shifts = np.array([off[keys[0]] for keys in groups])  # (groups, d)
        if len(groups) < 2 or np.ptp(shifts, axis=0).max() <= 4 * tol:
            return None  # one constant for every other key: keys_apart's two sets
        said = ", ".join(spans(np.unique(place[keys])) for keys in groups)
        return (f"with key 0 read right, the keys j with j mod {m} in {{{spans(np.flatnonzero(first))}}} take their "
                f"terms right, and each other group of {G} (j mod {m} in {said}) theirs too but for one constant a dim "
                f"and group (from {shifts.min():.3g} to {shifts.max():.3g}): each group's weights are off by one "
                "factor of their own in each row, as where groups of keys (warps or lanes that split each tile's "
                "keys) are summed apart, each against a max of its own, and merged with factors written otherwise: "
                "the later steps look")
    return None


def keys_apart(terms: np.ndarray, k: np.ndarray, tol: float = MATCH_TOL) -> str | None:
    """Where, with key 0 read right, the keys of a pattern that repeats every m keys are read right
    and the others are right too but for one constant a dim, the same for all of them: their
    weights one factor off in each row (the rows of a batch share their q, so a constant a dim is a
    factor a row). Two sets of keys summed apart, each part's exponentials against a running max
    of its own, and added without bringing both parts to one max."""
    split = _periodic_split(terms, k, tol)
    if split is None:
        return None
    m, first, ok, off = split
    shift = np.nanmedian(off[~ok], axis=0)  # (d,) the constant of each dim
    if not (np.abs(off[~ok] - shift) <= 4 * tol).all() or not (np.abs(shift) > 4 * tol).any():
        return None
    head = (f"with key 0 read right, the keys j with j mod {m} in {{{spans(np.flatnonzero(first))}}} take their "
            f"terms right, and the other {int((~ok).sum())} keys theirs too but for one constant")
    if counted := _times_counted(shift, np.flatnonzero(ok), tol):
        return f"{head} {counted}"
    return (f"{head} a row, the same for all of them (from {shift.min():.3g} to {shift.max():.3g} as the rows' q "
            "change): their weights are off by one factor a row: the two sets of keys summed apart, each against a "
            "running max of its own, and added without bringing both to one max (each part's l and o times "
            "exp(m_part - m) before the sum)")


def keys_by_tile(terms: np.ndarray, k: np.ndarray, tiles=KEY_TILES[::-1], tol: float = MATCH_TOL) -> str | None:
    """Where, with key 0 read right, every key's term is its own element of K but for one constant a
    dim and key tile (tiles of T keys from key 0, the largest T that holds), 0 in the first tile and
    not in some other: the scores take the right elements, and each tile's weights are off by a
    factor of their own (a tile's exponentials, sum or rescale against another max than the others')."""
    d, N = terms.shape
    if not np.isfinite(terms).all():
        return None
    off = _offsets(terms, k)
    for T in (t for t in tiles if t < N):
        parts = [off[j0:j0 + T] for j0 in range(0, N, T)]
        if all(np.ptp(p, axis=0).max() <= 4 * tol for p in parts) and np.abs(parts[0]).max() <= 4 * tol:
            moved = [t for t, p in enumerate(parts) if np.abs(p).max() > 4 * tol]
            if not moved:
                return None
            shift = np.concatenate([p[0] for p in parts[1:]])
            return (f"with key 0 read right, every term takes its own element of K but for one constant a dim and tile "
                    f"of {T} keys (tiles {spans(np.array(moved))} of {len(parts)}; from {shift.min():.3g} to "
                    f"{shift.max():.3g}, the first tile's 0): the scores are right, and the weights of a tile are off "
                    "by one factor of their own in each row: a step of the online softmax (the weights, the sum or "
                    "the rescale taken against another max than the one the other tiles are brought to: the later "
                    "steps look)")
    return None


def _times_counted(shift: np.ndarray, kept: np.ndarray, tol: float) -> str | None:
    """The words where one set's weights are a whole number c of times the other's in every row
    alike (a constant log c in every dim, not one that changes with the rows' q, as a merge without
    one max gives): one set of keys counted c times."""
    if np.ptp(shift) > 4 * tol:
        return None
    c = float(np.exp(-np.mean(shift)))
    more = c >= 1  # the keys read right weigh more: they are the ones counted again
    times = c if more else 1 / c
    whole = round(times)
    if whole < 2 or abs(times - whole) > 1e-3 * whole:
        return None
    keys = spans(kept[:12]) + (", ..." if kept.size > 12 else "")
    if more:
        return (f"in every row, {shift.mean():.4g} = -log {whole} (within {np.ptp(shift) / 2 + 1e-9:.1g}): keys {keys} "
                f"weigh {whole} times what their scores give, every other key once: those keys counted {whole} times "
                "(as a part's first key taken into its start state, m = s, l = 1, o = v, and again by the loop that "
                "starts at that key; or a tile's row added twice)")
    return (f"in every row, {shift.mean():.4g} = log {whole}: every key but {keys} weighs {whole} times what its "
            f"score gives: those keys counted {whole} times, the others once")


def keys_counted(terms: np.ndarray, k: np.ndarray, tol: float = MATCH_TOL) -> str | None:
    """Where every key is read right but a few whose terms are all their own plus one constant
    log c, c a whole number: those keys' weights counted c times. The last key counted 1 + (the
    slots past N): a tile's keys past N read as key N - 1 (an index clamped) and not masked."""
    d, N = terms.shape
    if not np.isfinite(terms).all():
        return None
    off = _offsets(terms, k)
    right = (np.abs(off) <= tol).all(axis=1)
    bad = np.flatnonzero(~right)
    if not right[0] or not bad.size or bad.size > N // 8 or (np.ptp(off[bad], axis=1) > 4 * tol).any():
        return None
    times = np.exp(off[bad].mean(axis=1))
    whole = np.round(times)
    if (whole < 2).any() or (np.abs(times - whole) > 1e-3 * whole).any():
        return None
    if bad.tolist() == [N - 1]:
        c = int(whole[0])
        tiles = [T for T in range(8, 2 * N, 8) if -(-N // T) * T - N == c - 1]
        shown = ", ".join(map(str, tiles[:6])) + (" ..." if len(tiles) > 6 else "")
        return (f"every key is read right, but the last key's weight counts {c} times (its terms all its own plus "
                f"log {c}): key N - 1 added {c - 1} times more" + (
                    f", as where a last tile of T = {shown} keys reads its {c - 1} slots past N as key N - 1 (an index "
                    "clamped, min(j, N - 1), where those keys should be masked)" if tiles else ""))
    counts = ", ".join(f"key {j} {int(c)} times" for j, c in zip(bad[:4], whole[:4]))
    return f"every key is read right, but {bad.size} keys' weights count several times ({counts}): added more than once"


def _offsets(terms: np.ndarray, k: np.ndarray, j0: int = 0) -> np.ndarray:
    """(N, d) each term's offset from its own element of K, key j0's terms fixing each dim's
    constant: 0 where key j's term is k[j, x]."""
    with np.errstate(invalid="ignore"):
        return terms.T - terms[:, j0] + k[j0] - k


def _periodic_split(terms: np.ndarray, k: np.ndarray, tol: float):
    """With key 0's terms fixing each dim's constant: the period m of the keys read right (ok), its
    first m, and every term's offset from its own element of K (N, d); None without such a split."""
    d, N = terms.shape
    if not np.isfinite(terms[:, 0]).all():
        return None
    off = _offsets(terms, k)
    ok = (np.abs(off) <= tol).all(axis=1)
    if ok.all() or ok.sum() < 2:
        return None
    for m in range(2, min(MAX_PERIOD, N // 2) + 1):
        first = ok[:m]
        if np.array_equal(ok, np.resize(first, N)) and not first.all():
            return m, first, ok, off
    return None


def _structured(off: np.ndarray, k: np.ndarray, read: np.ndarray, tol: float) -> bool:
    """Whether keys' terms are their own row's after all: off by one constant a dim shared by the
    keys, or one constant a key, or their own row's values in another order."""
    if not np.isfinite(off).all():
        return False
    shared = (np.ptp(off, axis=0) <= 4 * tol).all()
    per_key = (np.ptp(off, axis=1) <= 4 * tol).mean() >= 0.9
    reordered = (np.abs(np.sort(read, axis=1) - np.sort(k, axis=1)) <= tol).all(axis=1).mean() >= 0.9
    return bool(shared or per_key or reordered)


def nearest(values: np.ndarray, wanted: np.ndarray, tol: float) -> tuple[np.ndarray, np.ndarray]:
    """The index of the value (of K, sorted) nearest each wanted one, and whether it is within tol."""
    at = np.clip(np.searchsorted(values, wanted), 1, values.size - 1)
    near = np.where(np.abs(values[at] - wanted) < np.abs(values[at - 1] - wanted), at, at - 1)
    return near, np.abs(values[near] - wanted) <= tol


def _elements_moved(bad: np.ndarray, read: np.ndarray, k: np.ndarray, m: int, tol: float) -> str | None:
    """Where a quarter or more of the terms of the keys read wrong are elements of K at another dim
    than the term's own, in runs (dims x and x + 1 of a key taking K's elements f and f + 1: a row
    of K read from a shifted place, not values met by chance): those terms in words with examples;
    None otherwise (rows a load left as they were hold an earlier tile's row at the same dims, or
    what the memory held)."""
    d = k.shape[1]
    order = np.argsort(k.ravel())
    with np.errstate(invalid="ignore"):
        pick, hit = nearest(k.ravel()[order], np.nan_to_num(read[bad], nan=np.inf), tol)
    source = order[pick]
    moved = hit & (source % d != np.arange(d)[None, :])
    pairs = moved[:, :-1] & moved[:, 1:]
    in_runs = pairs & (source[:, 1:] - source[:, :-1] == 1)
    if moved.sum() < 0.25 * moved.size or moved.sum() < 0.9 * hit.sum() or in_runs.sum() < 0.8 * max(pairs.sum(), 8):
        return None
    shown = "; ".join(f"key {bad[a]}, dim {x} took K[{source[a, x] // d}, {source[a, x] % d}]"
                      for a, x in np.argwhere(moved)[:3])
    rest = "the rest from no element of K" if (hit == moved).all() else \
        f"{(hit & ~moved).mean():.0%} at their own dims, the rest from no element of K"
    said = (f"take {moved.mean():.0%} of their terms from other elements of K, at other dims, in runs along K's rows "
            f"(e.g. {shown}), {rest}")
    return said + (f"; every one fits {fits}" if (fits := two_pitches(bad, source, moved, d, m)) else "")


PITCHES = (16, 17, 32, 33, 64, 65, 128, 129)  # a tile's row pitch in floats: a width, or one more (padded)


def two_pitches(bad: np.ndarray, source: np.ndarray, moved: np.ndarray, d: int, m: int) -> str | None:
    """A tile of m keys whose load stores row r at a pitch of p floats and whose read takes key r's
    dims at a pitch of q (tile_at_pitches): the (p, q) that every element taken at another dim
    fits, in words; None where none does (or more than one)."""
    keys, dims = np.nonzero(moved)
    N = int(bad.max()) + m  # past every key read wrong: no key is cut off by the end
    fitting = [(p, q) for p in PITCHES for q in PITCHES if p != q and p >= d and
               np.array_equal(source[keys, dims], tile_at_pitches(bad[keys], dims, m, p, q, N, d))]
    if len(fitting) != 1:
        return None
    p, q = fitting[0]
    return (f"a tile of {m} keys stored at a pitch of {p} floats a row and read at {q}: key j0 + r, dim x takes "
            f"K[j0 + (r*{q} + x) // {p}, (r*{q} + x) % {p}] (the store's and the read's pitches differ)")


def tile_at_pitches(j, x, tile: int, wrote: int, read: int, N: int, d: int) -> np.ndarray:
    """The flat element of K that key j's dim x takes where a tile of keys is stored at a pitch of
    `wrote` floats a key and read at `read`; -1 on a pad slot or past the last key."""
    place = (j % tile) * read + x
    key, dim = j - j % tile + place // wrote, place % wrote
    return np.where((dim < d) & (key < N), key * d + dim, -1)


def _of_their_tile(bad: np.ndarray, read: np.ndarray, k: np.ndarray, m: int, tol: float) -> bool:
    """Whether the keys read wrong take another key's whole row of their own tile of m: weights
    handed to the wrong lanes or V rows, not rows a load left as they were (those hold a row of
    an earlier tile, or what the memory held)."""
    close = (np.abs(read[bad][:, None, :] - k[None, :, :]) <= tol).all(axis=2)  # (bad, N)
    own_tile = (np.arange(k.shape[0])[None, :] // m) == (bad[:, None] // m)
    return bool((close & own_tile).any(axis=1).mean() >= 0.9)


def dim_map(found: np.ndarray, N: int, d: int) -> str | None:
    """Where every term comes from its own key's row, dim x from dim f(x) with one f for every key
    (not the identity): f's changes, and, where they follow the float4 of K's rows, which
    component was read for which."""
    if (found < 0).any() or not (found // d == np.arange(N)[:, None]).all():
        return None
    f = found % d
    if not (f == f[0]).all() or (f[0] == np.arange(d)).all():
        return None
    changed = np.flatnonzero(f[0] != np.arange(d))
    pairs = ", ".join(f"{x} from {f[0][x]}" for x in changed[:4])
    unread = np.setdiff1d(np.arange(d), f[0])
    words = (f"every key's dim x read from another dim of its row, the same for every key: dims {spans(changed)} "
             f"({pairs}, ...)" + (f"; dims {spans(unread)} of K never read" if unread.size else ""))
    comp = changed % 4
    if np.unique(comp).size == 1 and (changed.size == d // 4) and np.unique(f[0][changed] % 4).size == 1:
        xyzw = "xyzw"
        words += (f": component .{xyzw[comp[0]]} of each float4 of K read as .{xyzw[f[0][changed[0]] % 4]} "
                  "(a vector load whose components are paired wrong)")
    return words


SHIFTED_SHARE = 0.75  # of the wrong terms, those that must take the one offset


def dims_shifted(found: np.ndarray, N: int, d: int) -> str | None:
    """Where the wrong terms are one run of dims of nearly every key, and most of them take the
    element a fixed number of floats from their own (the rest past K's end or none of K): dims
    a..b of every key read c floats off their place, as an offset for part of a row written as a
    constant where it depends on d would read them."""
    place = np.arange(N * d).reshape(N, d)
    wrong = found != place
    dims = np.flatnonzero(wrong.mean(axis=0) >= 0.9)
    if dims.size == 0 or dims.size == d or dims.size != dims[-1] - dims[0] + 1 \
            or wrong[:, np.setdiff1d(np.arange(d), dims)].any():
        return None
    read = found[:, dims] >= 0
    offsets, counts = np.unique((found[:, dims] - place[:, dims])[read], return_counts=True)
    if not counts.size or counts.max() < SHIFTED_SHARE * wrong[:, dims].sum() or offsets[counts.argmax()] == 0:
        return None
    c = int(offsets[counts.argmax()])
    others = int(wrong[:, dims].sum() - counts.max())
    stray = f"; {others} of those terms past K's end or on no element of K" if others else ""
    if c % d == 0:  # whole rows off: another key's dims
        other = f"key j {'+' if c > 0 else '-'} {abs(c) // d}"
        return (f"dims {dims[0]}..{dims[-1]} of every key j read from {other}'s (the other dims right{stray}): a row "
                "index for part of the dims off by a key")
    return (f"dims {dims[0]}..{dims[-1]} of every key read {abs(c)} floats {'past' if c > 0 else 'before'} their place "
            f"(K[j, x] at j*d + x {'+' if c > 0 else '-'} {abs(c)} for x in {dims[0]}..{dims[-1]}, the other dims "
            f"right{stray}" +
            "): an offset for part of a row written as a constant where it depends on d (e.g. 32 where d / 2 "
            "belongs), or counted from another dim")
