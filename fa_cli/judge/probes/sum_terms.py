"""Running sums l that hold the right weights, but each one, or the whole, changed on its way into
l: one term more (a key of one score that the output never meets: l, or a log-sum-exp, started
at its value against a max started at 0), or the weights summed in fixed point (a warp reduction of
integers, __reduce_add_sync, over weights scaled by 2^k and truncated or rounded). For
factors.wrong_sum to compare with W = f P; l relative to each row's final max, as there. Then a
factor a row that is no sum's: exp(a M), set by the row's max M (its unit changed on one side).
"""
from __future__ import annotations

import numpy as np

from .partial_sums import tile_weights
from .readings import FLAT
from .running_sums import SUM_TILES_TRIED, tiles_named
from .step import fmt

FIXED_BITS = (0, 8, 10, 12, 14, 16, 20, 24)  # fraction bits of a fixed-point weight (0: whole numbers)
MIN_ROWS = 8  # rows off by more than FLAT that an extra term is read from
# Fixed-point sums of 8 to 24 bits differ by less than FLAT: the one named is the closest, within
# CLOSE (float32 weights flip a last bit of a few keys: a few 2^-24 of l), and at least SEPARATE
# times closer than the right sum.
CLOSE = 1e-4
SEPARATE = 10
FINE = 1e-4  # rows whose f is off 1 by more than this (float32 outputs read f to about 1e-6) tell the sums apart

EXTRA_WORDS = ("its running sum l holds one term more than the keys' weights, exp({c} - m) in every row: a key of "
               "score {c} that the output never meets{zero}; look at where l (or the log-sum-exp) starts")
ZERO_START = (" (l started at 1, or a log-sum-exp at 0, where 0 and -inf belong, with the max started at 0: "
              "exp(0 - m_new) joins l at the first update)")
FIXED_WORDS = ("its running sum l adds each weight in fixed point with {bits} fraction bits, {how} (a weight times "
               "2^{bits} made an integer: an integer reduction such as __reduce_add_sync), {tiles}: every weight "
               "loses up to 2^-{bits} in l alone, and the output does not; look at the sum's reduction")
WHOLE_WORDS = ("its running sum l adds each weight {how} to a whole number (an int in the sum's reduction: a "
               "functor, a shuffle or a variable of an integer type), {tiles}: {which} count, and the output's "
               "weights do not change; look at the types in the sum's reduction")
WHICH_COUNT = {"truncated": "only a weight of exactly 1 (the key at the running max) counts, the others add 0",
               "rounded": "a weight of 0.5 or more counts 1, the others 0"}


def extra_term(f: np.ndarray, s: np.ndarray, total: np.ndarray) -> tuple[float, np.ndarray] | None:
    """(c, l) where the l the program divided by (total / f) is the right one plus exp(c - m) with
    one c for every row (m the row's max): c read as the median over the rows off by more than
    FLAT; None where too few rows are off, or l is under the right one."""
    top = s.max(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        excess = total / f - total
        off = (np.abs(np.log(f)) > FLAT) & (excess > 0) & np.isfinite(excess)
    if off.sum() < MIN_ROWS:
        return None
    c = float(np.median(np.log(excess[off]) + top[off]))
    return c, total + np.exp(c - top)


def extra_words(c: float) -> str:
    zero = abs(c) <= 1e-2
    return EXTRA_WORDS.format(c="0" if zero else fmt(c), zero=ZERO_START if zero else "")


def fixed_point(f: np.ndarray, s: np.ndarray, total: np.ndarray):
    """(words, fields, l) of the fixed-point sum closest to the l the program divided by (total /
    f), where it is within CLOSE and SEPARATE times closer than the right l; else None."""
    with np.errstate(divide="ignore", invalid="ignore"):
        off = np.abs(np.log(f)) > FINE
        if off.sum() < MIN_ROWS:
            return None
        miss = lambda l: float(np.median(np.abs(np.log(f * l / total))[off]))
        best = min(fixed_point_sums(s), key=lambda found: miss(found[2]), default=None)
        close = best is not None and miss(best[2]) <= CLOSE
        return best if close and miss(best[2]) * SEPARATE <= miss(total) else None


def fixed_point_sums(s: np.ndarray):
    """(words, fields, l) for the weights summed in fixed point: each key tile's weights (against
    the running max after the tile, as the online softmax takes them) scaled by 2^k, truncated or
    rounded to integers, summed, and l rescaled as the max grows."""
    B, N, _ = s.shape
    for T in SUM_TILES_TRIED:
        if T >= N:
            continue
        running, final, p = tile_weights(s, T)
        for bits in FIXED_BITS:
            scale = 2.0 ** bits
            for how, cut in (("truncated", np.floor), ("rounded", np.rint)):
                sums = cut(p * scale).sum(axis=3) / scale
                l = (sums * np.exp(running - final)).sum(axis=2)
                words = WHOLE_WORDS.format(how=how, tiles=tiles_named(T), which=WHICH_COUNT[how]) if not bits else \
                    FIXED_WORDS.format(bits=bits, how=how, tiles=tiles_named(T))
                yield words, \
                    dict(sum_fixed_bits=bits, sum_fixed_cut=how, sum_tile=T), l


LN2 = float(np.log(2))
LOG2E = float(np.log2(np.e))
# a = 1 - c where the weights subtract c M and the sum M (a = c - 1: the other way round), M natural
MAX_SLOPES = {1 - LN2: "the weights' max a natural-log one taken by base-2 exponentials (M where M log2(e) belongs, "
                       "as a max stored times ln 2 and read as base 2), the sum's right",
              LN2 - 1: "the sum's max a natural-log one taken by base-2 exponentials, the weights' right",
              1 - LOG2E: "the weights' max a base-2 one taken by natural exponentials, the sum's right",
              LOG2E - 1: "the sum's max a base-2 one taken by natural exponentials, the weights' right",
              -1.0: "the max subtracted from the weights' scores and not from the sum's",
              1.0: "the max subtracted from the sum's scores and not from the weights'"}
SLOPE_ALIKE = 2e-3  # a fitted slope within this of a named one is that one


def max_scaled(f: np.ndarray, s: np.ndarray) -> tuple[str, dict] | None:
    """Where log f = a M (M each row's largest score) in every row, a a named slope: the row's max
    taken in one unit (or left out) on one side of the weights and in another on the other."""
    top = s.max(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        lf = np.log(f)
    use = np.isfinite(lf) & (np.abs(lf) > FLAT)
    if use.sum() < MIN_ROWS or np.ptp(top[use]) < 1.0:
        return None
    a = float(np.sum(lf[use] * top[use]) / np.sum(top[use] ** 2))
    read = np.isfinite(lf)  # every row read, the right ones too: f = exp(a M) there as well
    if np.abs(lf[read] - a * top[read]).max() > FLAT:
        return None
    named = next((words for slope, words in MAX_SLOPES.items() if abs(a - slope) <= SLOPE_ALIKE), None)
    if named is None:
        return None
    return (f"f = exp(a M) in every row read, M the row's largest score and a = {fmt(a)}: {named}: the output is the "
            "right one times a power of e set by the row's max; look at the unit of the max where it is stored and "
            "where it is read"), dict(max_slope=a)
