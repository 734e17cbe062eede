"""Sums over parts of the keys that a program may divide by where l belongs: half of every group of
2G keys (a reduction that folds in half of its values), and interleaved chains of the keys, each
summed against its own max and added without the factors that bring them to one max (contiguous
ranges are key tiles, factors.sum_variants'). factors.per_row_factor compares each with the right l.
And keys counted more than once (keys_counted): parts of the keys that overlap. tile_maxima: the
maxima and sums of key tiles, from which factors.py builds the running sums. base_mixed: parts
brought to one max in the wrong base (exp where exp2 belongs)."""
from __future__ import annotations

import warnings

import numpy as np

from .readings import FIT_SHARE, FLAT, span
from .step import fmt, spans


def tile_maxima(s: np.ndarray, T: int):
    """Per key tile of T: the tile's own max, the running max after it, and the final max
    (B, N, tiles) each; and each tile's sum of exp(s - final max)."""
    B, N, _ = s.shape
    tiles = -(-N // T)
    pad = np.full((B, N, tiles * T), -np.inf)
    pad[..., :N] = s
    own = pad.reshape(B, N, tiles, T).max(axis=3)
    running = np.maximum.accumulate(own, axis=2)
    final = running[..., -1:]
    sums = np.exp(pad - final[..., :1]).reshape(B, N, tiles, T).sum(axis=3)
    return own, running, final, sums


HALF_GROUPS = (1, 2, 4, 8, 16, 32, 64, 128)  # G: a reduction over 2G values that folds in only G of them


def half_sums(s: np.ndarray):
    """(G, the half kept, l) of a sum over the keys of one half of every group of 2G (j mod 2G < G,
    or >= G), relative to the final max: a reduction over 2G threads or lanes that folds in only
    half of them (a tree that stops one step early, or leaves out red[tid + G])."""
    j = np.arange(s.shape[2])
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    for G in HALF_GROUPS:
        if 2 * G <= s.shape[2]:
            for low in (True, False):
                yield G, low, e[..., (j % (2 * G) < G) == low].sum(axis=-1)


CHAINS = (2, 4, 8, 32)  # G interleaved chains of keys (j mod G); contiguous ranges are key tiles (factors')


def parts_unmerged(s: np.ndarray):
    """(words, l) of l as the sum of G interleaved chains' sums (keys j mod G: states updated by
    turns, for more work in flight), each taken against its chain's own max and merged with the
    sums' factors left out."""
    j = np.arange(s.shape[2])
    for G in CHAINS:
        if G < j.size:
            yield (f"{G} interleaved chains of keys (key j in chain j mod {G})",
                   sum(own_max_sum(s[..., j % G == g]) for g in range(G)))


def own_max_sum(part: np.ndarray) -> np.ndarray:
    return np.exp(part - part.max(axis=-1, keepdims=True)).sum(axis=-1)


def keys_counted(W: np.ndarray, P: np.ndarray) -> tuple[str, dict] | None:
    """W_ij = c_j P_ij times one factor a row, c_j whole, 1 for some keys and 2 or more for others:
    keys weighed c_j times (parts of the work whose key ranges overlap, each adding those keys).
    Each row's smallest ratio is taken as a key counted once."""
    N = P.shape[2]
    use = (P > 1e-6) & (W > 0)
    if use.mean() < 0.5:
        return None
    with np.errstate(divide="ignore", invalid="ignore"):
        g = np.where(use, np.log(W / P), np.nan)
        g -= np.nanmin(g, axis=2, keepdims=True)
        counts = np.round(np.exp(np.nanmedian(g.reshape(-1, N), axis=0)))
    if np.isnan(counts).any() or counts.min() < 1 or counts.max() < 2:
        return None
    if np.mean(np.abs(g - np.log(counts))[use] <= 10 * FLAT) < FIT_SHARE:
        return None
    times = ", ".join(f"keys {spans(np.flatnonzero(counts == n))} {int(n)} times" for n in np.unique(counts) if n >= 2)
    sums = W.sum(axis=2)
    l_too = " (each row's weights sum to 1: l counts them as often)" if np.abs(sums - 1).max() <= 1e-3 else \
        f" (the rows' weights sum to {span(sums)}: l counts them otherwise)"
    return (f"keys weighed a whole number of times: {times}, the others once{l_too}: parts of the work (warps, "
            "blocks, splits of the keys) whose key ranges overlap, each adding those keys; look at where each part's "
            "range of keys ends"), dict(keys_counted=times)


# A merge's factors exp(m_part - m) in the wrong base: log W / P = c (m_part - m) + a row's constant.
BASE_MIXED = {float(np.log2(np.e) - 1): "exp(m_part - m) where exp2 belongs (the maxima kept in base 2, as the "
                                        "scores are: exp and exp2 mixed)",
              float(np.log(2) - 1): "exp2(m_part - m) where exp belongs (the maxima in base e: exp2 and exp mixed)"}


def base_mixed(g: np.ndarray, s: np.ndarray, T: int, valid: np.ndarray, rows_ok: np.ndarray) -> str | None:
    """Each tile's (part's) factor, log W / P = g, as its rescale to the final max taken in the wrong
    base: c (m_tile - m_final) with c = log2(e) - 1 or ln 2 - 1, and a constant per row (l merged with
    the same factors)."""
    own, _, final, _ = tile_maxima(s, T)
    for c, words in BASE_MIXED.items():
        gap = np.where(valid, g - c * (own - final), np.nan)[rows_ok]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            gap = gap - np.nanmean(gap, axis=1, keepdims=True)
        if np.mean(np.abs(gap[valid[rows_ok]]) <= 10 * FLAT) >= FIT_SHARE:
            return (f"each tile's factor is exp({fmt(c)} (m_tile - m_final)): the parts (tiles, splits) brought to one "
                    f"max with {words}; look at the merge's factors")
    return None
