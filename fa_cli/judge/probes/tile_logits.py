"""The logits weighed by a factor of their key tile: log W[r, j] = a_t s[r, j] + c_r, where t is j's
tile of T keys and c_r one constant for the whole row. A program that scales its query (or its
scores) in place inside the loop over key tiles applies the scale once more at every tile: a_t is
then a_0 times the scale to the power t.

Measured from W (one-hot V) and the true logits s: a_t by regression within each tile (the
row's constant cancels there), then the whole row checked against a_t s + one constant.
"""
from __future__ import annotations

import numpy as np

from ..findings import Finding
from ..mistakes import KEY_TILES
from .factors import constant_name
from .readings import LOOK, WeightReading, measured
from .step import Context, fmt, logits

FITS = 1e-2  # the largest misfit of log W, at the 99th percentile of the weights, that counts as a fit
ALIKE = 1e-2  # tiles whose factors differ by less than this (relative) are one factor (logit_slope's case)


def tile_slopes(y: np.ndarray, s: np.ndarray, T: int) -> np.ndarray:
    """Each whole tile's factor a_t: the regression of log W on s within the tile, over every row."""
    n = s.shape[-1] // T
    ys = y[..., :n * T].reshape(*y.shape[:-1], n, T)
    xs = s[..., :n * T].reshape(*s.shape[:-1], n, T)
    dx = xs - xs.mean(axis=-1, keepdims=True)
    dy = ys - ys.mean(axis=-1, keepdims=True)
    return (dx * dy).sum(axis=(0, 1, 3)) / (dx * dx).sum(axis=(0, 1, 3))


def fit(y: np.ndarray, s: np.ndarray, a: np.ndarray, T: int) -> bool:
    """log W = a_t s + one constant per row, over the whole tiles of every row."""
    n = len(a)
    rest = y[..., :n * T] - np.repeat(a, T) * s[..., :n * T]
    rest = rest - rest.mean(axis=-1, keepdims=True)
    return bool(np.quantile(np.abs(rest), 0.99) <= FITS)


def geometric(a: np.ndarray, d: int) -> str | None:
    """a_t = a_0 r^t with r a named constant (a power of sqrt(d), of ln 2): its name."""
    if len(a) < 3 or a[0] == 0:
        return None
    r = a[1] / a[0]
    if not np.allclose(a, a[0] * r ** np.arange(len(a)), rtol=1e-2, atol=1e-4):
        return None
    return constant_name(float(r), d)


class LogitsByTile(WeightReading):
    """Each key tile's logits at a factor of its own, the row's weights one softmax over them."""

    name = "the logits' factor by key tile"

    def run(self, ctx: Context) -> list[Finding]:
        W, N, d = ctx.facts.W, ctx.probe.shape.N, ctx.probe.shape.d
        if (W <= 1e-30).any():
            return []  # a weight of 0 has no logarithm: not a softmax over every key
        y, s = np.log(W), logits(ctx.probe.q, ctx.probe.k)
        for T in (t for t in sorted(KEY_TILES, reverse=True) if N // t >= 2):  # the largest tile that fits
            a = tile_slopes(y, s, T)
            if np.ptp(a) <= ALIKE * np.abs(a).max() or not fit(y, s, a, T):
                continue
            shown = ", ".join(fmt(x) for x in a[:6]) + (", ..." if len(a) > 6 else "")
            said = (f"measured: the logits of each key tile of {T} weighed at a factor of the tile's own, a_t = "
                    f"{shown} for tiles 0, 1, ..., with one constant a row over every key (log W = a_t s + c_r)")
            ratio = geometric(a, d)
            if ratio:
                said += (f": each tile's factor the one before times {ratio}, a scale applied once more at each key "
                         "tile (the query or its scores scaled in place inside the loop over the tiles)")
            return measured(ctx, [said], LOOK["scale"], logits_by_tile=[float(x) for x in a], tile=T)
        return []
