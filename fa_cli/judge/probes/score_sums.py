"""W = f P with one factor f a row, of either sign, some negative: no sum of weights gives that (it is
never negative). Named where a sum of the scores does: the tile's sum taken over the scores before
the exponential turns them into weights (tsum += s[j] on the line before s[j] = exp(s[j] - m)),
rescaled by the online softmax as l is; the output's own weights stay right, each row divided by
that sum (l near 0: huge values, inf). The factor comes from W and P (Factors) or from the output
alone, rows with NaN or inf left out (RowFactors).
"""
from __future__ import annotations

import warnings

import numpy as np

from .partial_sums import in_tiles, tile_maxima
from .readings import FIT_SHARE, span
from .running_sums import SUM_TILES_TRIED, tiles_named
from .step import fmt

SIGNED_RTOL = 1e-2  # a row's W / P within 1% of its median: one factor, of either sign
LOG2E = float(np.log2(np.e))
# What a key adds where its weight exp(s - m) belongs: the score, the score in base 2 (s log2 e, as
# exp2f's callers scale it), or the exponent itself (s - m, the running max taken off first).
TERMS = {"scores s": lambda s, m: s,
         "scores in base 2, s log2(e)": lambda s, m: s * LOG2E,
         "exponents s - m (the running max taken off)": lambda s, m: s - m}


def signed_row_factor(W: np.ndarray, P: np.ndarray, s: np.ndarray) -> tuple[str, dict] | None:
    """W = f_i P with factors of either sign, some negative (f read as each row's median W / P)."""
    if not (W < 0).any():
        return None
    with np.errstate(divide="ignore", invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a row with no key where P > 1e-6: no factor
        r = np.where(P > 1e-6, W / P, np.nan)
        f = np.nanmedian(r, axis=2)
        fits = np.nanmax(np.abs(r - f[..., None]), axis=2) <= SIGNED_RTOL * np.abs(f)
    return signed_factors(np.where(fits, f, np.nan), s, "W = f P with one factor f per row")


OUTPUT_SUBJECT = "the right row times a factor f of its own"  # the factor read from the output alone


def signed_factors(f: np.ndarray, s: np.ndarray, subject: str) -> tuple[str, dict] | None:
    """f (B, N): each row's factor, NaN where the row is no factor of the right one (subject: what
    the factor was read from, in words). Named where FIT_SHARE of the rows have one and some is
    negative: a sum of scores that gives it, one factor for every row (a negated output), or no sum
    fa tried."""
    fits = np.isfinite(f)
    if np.mean(fits) < FIT_SHARE or not (f[fits] < 0).any():
        return None
    fitted = f[fits]
    negative = int((fitted < 0).sum())
    fields = dict(row_factor=[float(fitted.min()), float(fitted.max())], negative_rows=negative)
    where = "every row" if negative == fitted.size else f"{negative} of {fitted.size} rows"
    said = f"{subject}, of either sign (f from {span(fitted)}, negative in {where})"
    total = np.exp(s - s.max(axis=-1, keepdims=True)).sum(axis=-1)
    for term, T, l_scores in score_sums(s):
        with np.errstate(divide="ignore", invalid="ignore"):
            if np.mean(np.abs(f * l_scores / total - 1)[fits] <= SIGNED_RTOL) >= FIT_SHARE:
                fields.update(sum_tile=T, sum_of_scores=term)
                tiles = tiles_named(T) if T < s.shape[2] else "the row's keys as one tile"
                return (f"{said}; f = (the right l) / (the {term} summed, {tiles}, rescaled as l is): l adds "
                        "each tile's scores where their weights p belong, a sum taken before the exponential turns "
                        "them into weights (a sum of weights is never negative); look at what the update of l sums "
                        "and the order of the lines before it"), fields
    if np.ptp(fitted) <= SIGNED_RTOL * np.abs(fitted).max():
        return f"{said}: the same f = {fmt(float(np.median(fitted)))} in every row: a constant factor on the output, " \
            "its sign flipped", fields
    return (f"{said}: as if divided by an l that is negative there (no sum of weights is), or the output negated in "
            "those rows; none of the scores' sums fa tried fits; look at what l sums and at the output's sign"), \
        fields


def score_sums(s: np.ndarray):
    """(term, T, l) for each running sum of scores, relative to each row's final max as the right
    l = sum(exp(s - M)) is: l = sum over tiles of (the tile's terms) exp(m_t - M), m_t the running
    max after tile t (T = the whole row: one tile, no rescale)."""
    N = s.shape[2]
    for T in (*(t for t in SUM_TILES_TRIED if t < N), N):
        _, running, final, _ = tile_maxima(s, T)
        each_key = np.repeat(running, T, axis=2)[..., :N]  # the running max after each key's tile
        for term, of in TERMS.items():
            yield term, T, (in_tiles(of(s, each_key), T, 0.0).sum(axis=3) * np.exp(running - final)).sum(axis=2)
