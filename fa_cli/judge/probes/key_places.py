"""Keys weighed a whole number of times that depends on the row's and the key's place in a group
of T lanes (W / P = n(r mod T, k mod T) times a factor a row): lanes that pass K and V rows round
a warp and meet some keys again in place of others, as a shuffle that does not wrap gives a lane
its own value back. Read from W against P; the table of counts said by its pattern where one of
the shuffles' fits, else by its first rows.
"""
from __future__ import annotations

import warnings

import numpy as np

from .partial_sums import in_tiles
from .step import spans

PLACE_GROUPS = (8, 16, 32, 64, 128)  # lanes of a group whose rows meet in turn: a warp, a wavefront, a part
KNOWN_P = 1e-4  # a key whose true weight is under this is left out of the reading: W's rounding hides its count
WHOLE = 0.05  # a count within this of a whole number is that number
MOST_COUNT = 128
AGREE = 0.99  # the share of (row, key) counts the table by places must give


def row_counts(W: np.ndarray, P: np.ndarray) -> np.ndarray | None:
    """n[b, r, k]: how many times each row weighs each key, relative to its least-counted weighed key
    (W / P = n c_r), -1 where P is too small to tell (a row with no such key weighed: all -1); None
    where rows are not whole counts."""
    known = P > KNOWN_P
    with np.errstate(divide="ignore", invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a row with no known key weighed: no unit, left unknown
        ratio = np.where(known, W / np.where(known, P, 1.0), np.nan)
        top = np.nanmax(np.abs(ratio), axis=2, keepdims=True)
        weighed = ratio > 1e-3 * top
        unit = np.nanmin(np.where(weighed, ratio, np.nan), axis=2, keepdims=True)
        n = np.where(weighed, ratio / unit, 0.0)
        unit = np.nanmedian(np.where(weighed & (np.round(n) >= 1), ratio / np.round(n), np.nan), axis=2, keepdims=True)
        n = np.where(weighed, ratio / unit, 0.0)
    known &= np.isfinite(unit)
    whole = np.abs(n - np.round(n)) <= WHOLE
    if known.any(axis=2).mean() < 0.9 or not (whole | ~known).all() or n[known].max(initial=0) > MOST_COUNT:
        return None
    return np.where(known, np.round(np.where(known, n, 0)), -1).astype(int)


def place_table(n: np.ndarray) -> tuple[int, np.ndarray] | None:
    """(T, C) with n[b, r, k] = C[r mod T, k mod T] for AGREE of the known counts, the smallest T
    of PLACE_GROUPS that fits; None where none does."""
    B, N, _ = n.shape
    for T in (T for T in PLACE_GROUPS if 2 * T <= N):
        full = N - N % T
        cut = n[:, :full, :full].reshape(B, full // T, T, full // T, T)
        known = cut >= 0
        place = (np.arange(T)[:, None, None] * T + np.arange(T)[None, None, :])  # (a, 1, b): a * T + b
        slot = np.broadcast_to(place[None, None], cut.shape)[known]
        tally = np.bincount(slot * (MOST_COUNT + 1) + cut[known], minlength=T * T * (MOST_COUNT + 1))
        tally = tally.reshape(T, T, MOST_COUNT + 1)  # each place's counts, the most seen taken
        C = np.where(tally.sum(axis=2) > 0, tally.argmax(axis=2), -1)
        agree = (cut == C[None, None, :, None, :]) | ~known
        if known.any() and agree[known].mean() >= AGREE and (C >= 0).all():
            return T, C
    return None


def counted_by_place(W: np.ndarray, P: np.ndarray) -> tuple[str, dict] | None:
    """The reading, in words: the table's pattern (a shuffle down or up that does not wrap) or its
    first rows that are not all ones."""
    if (n := row_counts(W, P)) is None or n.max() < 2 or (table := place_table(n)) is None:
        return None
    T, C = table
    a, b = np.meshgrid(np.arange(T), np.arange(T), indexing="ij")
    down = np.where(b < a, 0, np.where(b > a, 1, a + 1))
    up = np.where(b > a, 0, np.where(b < a, 1, T - a))
    down[T - 1, T - 1] = up[0, 0] = 1  # the one key a row weighs: its count relative to itself
    head = (f"row r weighs key k of each {T}-key group a whole number of times n that depends only on their places, a = "
            f"r mod {T} and b = k mod {T} (W / P = n times a factor a row)")
    if (C == down).all():
        return (f"{head}: n = 0 where b < a, a + 1 where b = a, 1 where b > a: each row meets its own place's key again "
                f"in place of the keys at lower places: K and V rows passed round a group of {T} lanes by a shuffle "
                f"that does not wrap (__shfl_down_sync(mask, v, step) gives a lane past {T - 1} - step its own value "
                f"back; a rotation takes lane (lane + step) % {T}: __shfl_sync(mask, v, (lane + step) % {T}))",
                dict(place_counts=T, place_shuffle="down"))
    if (C == up).all():
        return (f"{head}: n = 0 where b > a, {T} - a where b = a, 1 where b < a: each row meets its own place's key "
                f"again in place of the keys at higher places: K and V rows passed round a group of {T} lanes by a "
                f"shuffle that does not wrap (__shfl_up_sync(mask, v, step) gives a lane under step its own value "
                f"back; a rotation takes lane (lane - step) mod {T})", dict(place_counts=T, place_shuffle="up"))
    rows = [r for r in range(T) if (C[r] != 1).any()][:3]
    said = "; ".join(f"rows at place {r}: " + ", ".join(f"keys at {spans(np.flatnonzero(C[r] == c))} {times(c)}"
                                                       for c in np.unique(C[r])) for r in rows)
    return (f"{head}: {said}: some keys met several times and others never, by place: lanes that take K and V rows "
            "from the wrong partners (a shuffle's source lane, or a shared-memory exchange's index)",
            dict(place_counts=T))


def times(c: int) -> str:
    return {0: "never", 1: "once", 2: "twice"}.get(int(c), f"{c} times")


PLACE_CLASSES = (2, 4, 8)  # keys a thread takes together (in pairs, fours, eights), each at its place in the group
MIN_ROWS = 8  # rows whose W / P is not one factor, before their keys are read by place
SHARE = 0.95  # of those rows that must show the same places right


def rows_off(W: np.ndarray, P: np.ndarray, flat: float) -> tuple[np.ndarray, np.ndarray]:
    """(log W / P where both are known, NaN elsewhere; the rows whose log W / P spans more than flat)."""
    known = (P > KNOWN_P) & (W > 0)
    with np.errstate(divide="ignore", invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a row with no known key: NaN, not off
        logr = np.where(known, np.log(W / np.where(known, P, 1.0)), np.nan)
        return logr, (np.nanmax(logr, axis=2) - np.nanmin(logr, axis=2)) > flat


def weighed_otherwise_by_place(W: np.ndarray, P: np.ndarray, flat: float) -> tuple[str, dict] | None:
    """Rows whose W / P is one factor over the keys at some places of every group of G (k mod G) and
    not over the others: the keys at those other places weighed otherwise (a register block's line
    for one key or one row copied from another's, its max or its score). None where no G shows it."""
    logr, off = rows_off(W, P, flat)
    if off.sum() < MIN_ROWS:
        return None
    with np.errstate(divide="ignore", invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a class with no known key: NaN, read as no class
        for G in (G for G in PLACE_CLASSES if 4 * G <= W.shape[2]):
            places = [logr[..., c::G][off] for c in range(G)]  # (off rows, keys at place c)
            if any(np.isnan(x).all(axis=1).any() for x in places):
                continue  # a place with no known key in some row: nothing to say of it there
            right = np.stack([np.nanmax(x, axis=1) - np.nanmin(x, axis=1) <= flat for x in places], axis=1)
            patterns, counts = np.unique(right, axis=0, return_counts=True)
            best = patterns[counts.argmax()]
            if counts.max() < SHARE * off.sum() or not best.any() or best.all():
                continue
            kept = np.concatenate([places[c] for c in np.flatnonzero(best)], axis=1)  # the right places together
            if (np.nanmax(kept, axis=1) - np.nanmin(kept, axis=1) <= flat).mean() >= SHARE:  # one factor a row
                return said_by_place(G, best, off), dict(places_apart=G, places_right=np.flatnonzero(best).tolist(),
                                                         look="exp")
    return None


def said_by_place(G: int, right: np.ndarray, off: np.ndarray) -> str:
    rows = np.flatnonzero(off.any(axis=0))
    good, bad = spans(np.flatnonzero(right)), spans(np.flatnonzero(~right))
    return (f"in {int(off.sum())} rows (rows {spans(rows)} of the batches), the keys at place {good} of every {G} "
            f"(k mod {G}) weigh as P does up to one factor a row, and those at place {bad} do not (W / P changes "
            f"from key to key among them): the weight of the key at place {bad} of each group of {G} taken "
            "otherwise, against another max or from another score (a line of a register block written for one row "
            "or key and copied for another without its own index), the sum l taking it as taken; look at that "
            "key's weight")


LANE_GROUPS = (16, 32, 64)  # lanes a row's keys are dealt to, key j to lane j mod G, each keeping its own (l, o)


def lanes_apart(W: np.ndarray, P: np.ndarray, flat: float) -> tuple[str, dict] | None:
    """Rows whose keys at some places of every G (j mod G: the lanes that hold them) weigh as P does
    up to one factor a row, and the keys at the other places up to another factor, one for all of
    them: those lanes' sums brought to another max (a rescale skipped by them). Where the lanes
    apart are exactly those with no key in the last, partial tile (N mod G on), said so."""
    logr, off = rows_off(W, P, flat)
    if off.sum() < MIN_ROWS:
        return None
    with np.errstate(divide="ignore", invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a lane with no known key in a row: NaN, no class
        for G in (G for G in LANE_GROUPS if 2 * G <= W.shape[2]):
            lanes = in_tiles(logr, G, np.nan)[off].transpose(0, 2, 1)  # (off rows, lane, its keys)
            spread = np.nanmax(lanes, axis=2) - np.nanmin(lanes, axis=2)
            level = np.nanmedian(lanes, axis=2)  # each lane's log-factor in each row
            if not (np.nan_to_num(spread, nan=0.0) <= flat).all(axis=1).mean() >= SHARE:
                continue  # a lane's keys not one factor a row: not this
            seen = np.isfinite(level) & np.isfinite(level[:, :1])  # a lane none of whose keys is known: no vote
            apart = np.abs(level - level[:, :1]) > flat  # lanes off lane 0's factor
            whole = seen.all(axis=1)
            if not whole.any():
                continue
            patterns, counts = np.unique(apart[whole], axis=0, return_counts=True)
            best = patterns[counts.argmax()]
            agree = ((apart == best[None]) | ~seen).all(axis=1)
            if agree.mean() < SHARE or not best.any() or best.all():
                continue
            other = np.where(best[None], level, np.nan)
            if not ((np.nanmax(other, axis=1) - np.nanmin(other, axis=1)) <= flat).mean() >= SHARE:
                continue  # the lanes apart share one factor a row
            higher = np.nanmedian(other, axis=1) > level[:, 0]  # the apart lanes' weights against the others'
            if higher.mean() >= SHARE:
                heavy = best
            elif (~higher).mean() >= SHARE:
                heavy = ~best
            else:
                continue
            lanes = np.flatnonzero(heavy)
            if lanes[-1] - lanes[0] + 1 != lanes.size:  # one run of lanes (an interleave is another reading's)
                continue
            return said_lanes(G, heavy, off, W.shape[2]), dict(lanes_apart=G, lanes_off=lanes.tolist(), look="exp")
    return None


def said_lanes(G: int, apart: np.ndarray, off: np.ndarray, N: int) -> str:
    rows = np.flatnonzero(off.any(axis=0))
    lanes = np.flatnonzero(apart)
    said = (f"in {int(off.sum())} rows (rows {spans(rows)} of the batches), the keys j with j mod {G} in "
            f"{spans(lanes)} weigh as P does up to one factor of their own a row, larger than the other keys' "
            f"(theirs up to another): as where the lanes that hold keys {spans(lanes)} of every {G} kept their sums "
            "against an older, smaller max than the others (a rescale of l and o by exp(m_old - m_new) skipped by "
            "those lanes)?")
    if N % G and lanes.tolist() == list(range(N % G, G)):
        said += (f" They are exactly the lanes with no key in the last, partial tile (N = {N}, N mod {G} = {N % G}), "
                 f"as where the rescale sits inside the key guard (`if (j < N)`) that those lanes fail there")
    return said
