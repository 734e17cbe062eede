"""Weights that meet the wrong V rows: in each tile of T query rows by T keys, row q0 + a weighs key
j0 + b with the weight that row q0 + b gives key j0 + a. A program that keeps a tile's weights in
shared memory (P[row][key]) and reads them back as P[key][row] where it multiplies them into V
does this: the two indices of the weight buffer swapped.

Measured from W (one-hot V) and the scores S = Q K^T / sqrt(d): within each such tile, log W
less S transposed is a part for the row plus a part for the key (the row's own l and rescalings,
and the other row's running max), to a thousandth; S itself, untransposed, fits no such sum.
"""
from __future__ import annotations

import numpy as np

from ..findings import Finding
from ..mistakes import KEY_TILES
from .readings import FIT_SHARE, TINY_WEIGHT, WeightReading, measured
from .step import Context, logits

ADDITIVE = 1e-3  # the largest misfit of log W - S^T to a row part plus a key part, in a tile that fits
# where a tile's weights are read back to meet V: a weight buffer's element read (not written), else one times V
WEIGHT_READ = (r"\b\w*[Pp]\w*\s*\[[^\]]+\]\s*\[[^\]]+\](?!\s*=[^=])",
               r"\w+\s*\[[^\]]+\](\s*\[[^\]]+\])?\s*\*\s*\w*[vV]\w*\s*\[")


def misfit(z: np.ndarray) -> np.ndarray:
    """How far a (tiles, T, T) array of logs is from a row part plus a key part, tile by tile: the
    largest residual of the two-way fit, one a tile."""
    fitted = z.mean(axis=-1, keepdims=True) + z.mean(axis=-2, keepdims=True) - z.mean(axis=(-2, -1), keepdims=True)
    return np.abs(z - fitted).max(axis=(-2, -1))


def blocks(a: np.ndarray, T: int) -> np.ndarray:
    """The whole T x T tiles of (B, N, N): (B * tiles * tiles, T, T)."""
    B, N, _ = a.shape
    n = N // T
    return a[:, :n * T, :n * T].reshape(B, n, T, n, T).transpose(0, 1, 3, 2, 4).reshape(-1, T, T)


def fits(W: np.ndarray, s: np.ndarray, T: int, transposed: bool) -> float:
    """The share of whole T x T tiles (every weight above TINY_WEIGHT) where log W - S (or S transposed
    within the tile) is a row part plus a key part."""
    w, sc = blocks(W, T), blocks(s, T)
    usable = (w > TINY_WEIGHT).all(axis=(1, 2))
    if not usable.any():
        return 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.log(w[usable]) - (sc[usable].transpose(0, 2, 1) if transposed else sc[usable])
    return float((misfit(z) <= ADDITIVE).mean())


class TransposedTiles(WeightReading):
    """Each tile's weights met with the V rows of the other index: a weight buffer read transposed."""

    name = "a tile's weights met with V transposed"

    def run(self, ctx: Context) -> list[Finding]:
        W, N = ctx.facts.W, ctx.probe.shape.N
        s = logits(ctx.probe.q, ctx.probe.k)
        for T in (t for t in KEY_TILES if 2 * t <= N):
            share = fits(W, s, T, transposed=True)
            if share >= FIT_SHARE and fits(W, s, T, transposed=False) < FIT_SHARE:
                return measured(ctx, [
                    f"measured: in each tile of {T} query rows by {T} keys, row q0 + a weighs key j0 + b with the "
                    f"weight row q0 + b gives key j0 + a (log W less the scores transposed within the tile is a part "
                    f"per row plus a part per key, to {ADDITIVE:g}, in {share:.0%} of the whole tiles): the tile's "
                    f"weights read with their two indices swapped where they meet V (P[key][row] where P[row][key] "
                    f"belongs)"], ("the weights read back", WEIGHT_READ), transposed_tile=T)
        return []
