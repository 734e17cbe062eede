"""Sums over parts of the keys that a program may divide by where l belongs: half of every group of
2G keys (a reduction that folds in half of its values), and interleaved chains of the keys, each
summed against its own max and added without the factors that bring them to one max (contiguous
ranges are key tiles, factors.sum_variants'). factors.per_row_factor compares each with the right l."""
from __future__ import annotations

import numpy as np

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
