"""The logits weighed by a factor of their key tile: log W[r, j] = a_t s[r, j] + c_r, where t is j's
tile of T keys and c_r one constant for the whole row. A program that scales its query (or its
scores) in place inside the loop over key tiles applies the scale once more at every tile: a_t is
then a_0 times the scale to the power t. One whose last, partial tile takes a path of its own may
score it otherwise (its scale left out): then that tile's factor alone differs.

Measured from W (one-hot V) and the true logits s: a_t by regression within each tile, the
partial last one included (the row's constant cancels there), then the whole row checked against
a_t s + one constant.
"""
from __future__ import annotations

import warnings

import numpy as np

from ..findings import Finding
from ..mistakes import KEY_TILES
from .factors import constant_name
from .readings import LOOK, TINY_WEIGHT, WeightReading, measured
from .step import Context, fmt, logits

FITS = 1e-2  # the largest misfit of log W, at the 99th percentile of the weights, that counts as a fit
ALIKE = 1e-2  # tiles whose factors differ by less than this (relative) are one factor (logit_slope's case)


def tiles_of(N: int, T: int) -> list[slice]:
    """The key tiles of T over N keys: the whole ones, then the partial last one where N % T > 1."""
    return [slice(j, min(j + T, N)) for j in range(0, N, T) if min(j + T, N) - j > 1]


def tile_slopes(y: np.ndarray, s: np.ndarray, tiles: list[slice]) -> np.ndarray:
    """Each tile's factor a_t: the regression of log W on s within the tile, over every row (y is
    NaN where a weight is too small to have a logarithm; those are left out)."""
    a = []
    for tile in tiles:
        yt, st = y[..., tile], np.where(np.isnan(y[..., tile]), np.nan, s[..., tile])
        dx = st - np.nanmean(st, axis=-1, keepdims=True)
        dy = yt - np.nanmean(yt, axis=-1, keepdims=True)
        a.append(np.nansum(dx * dy) / np.nansum(dx * dx))
    return np.array(a)


def fit(y: np.ndarray, s: np.ndarray, a: np.ndarray, tiles: list[slice]) -> bool:
    """log W = a_t s + one constant per row, over every key the tiles cover that has a weight."""
    keys = np.concatenate([np.arange(t.start, t.stop) for t in tiles])
    factor = np.concatenate([np.full(t.stop - t.start, x) for t, x in zip(tiles, a)])
    rest = y[..., keys] - factor * s[..., keys]
    rest = rest - np.nanmean(rest, axis=-1, keepdims=True)
    return bool(np.nanquantile(np.abs(rest), 0.99) <= FITS)


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
        usable = W > TINY_WEIGHT  # a weight of 0 (underflow) has no logarithm: left out of the fits
        if usable.mean() < 0.5 or not usable.any(axis=2).all():
            return []
        with np.errstate(divide="ignore", invalid="ignore"):
            y = np.where(usable, np.log(W), np.nan)
        s = logits(ctx.probe.q, ctx.probe.k)
        for T in (t for t in sorted(KEY_TILES, reverse=True) if N // t >= 2):  # the largest tile that fits
            tiles = tiles_of(N, T)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # a row with no usable weight in a tile
                a = tile_slopes(y, s, tiles)
                if not np.isfinite(a).all() or np.ptp(a) <= ALIKE * np.abs(a).max() or not fit(y, s, a, tiles):
                    continue
            return measured(ctx, [self.words(a, tiles, T, N, d)], LOOK["scale"],
                            logits_by_tile=[float(x) for x in a], tile=T)
        return []

    @staticmethod
    def words(a: np.ndarray, tiles: list[slice], T: int, N: int, d: int) -> str:
        whole = a[:N // T]
        if len(tiles) > N // T and np.ptp(whole) <= ALIKE * np.abs(whole).max():  # the partial tile alone differs
            ratio = a[-1] / whole.mean()
            name = constant_name(float(ratio), d)
            return (f"measured: the logits of keys {tiles[-1].start}..{N - 1}, past the last whole tile of {T}, "
                    f"weighed at {fmt(ratio)} times the others'" + (f" (= {name})" if name else "") +
                    ", with one constant a row over every key (log W = a s + c_r): the code for the last, partial "
                    "tile (its own path or bound) scores its keys otherwise (a scale left out or applied twice "
                    "there); any tile that leaves these keys over fits alike")
        shown = ", ".join(fmt(x) for x in a[:6]) + (", ..." if len(a) > 6 else "")
        said = (f"measured: the logits of each key tile of {T} weighed at a factor of the tile's own, a_t = {shown} "
                "for tiles 0, 1, ..., with one constant a row over every key (log W = a_t s + c_r)")
        ratio = geometric(whole, d)
        if ratio:
            said += (f": each tile's factor the one before times {ratio}, a scale applied once more at each key tile "
                     "(the query or its scores scaled in place inside the loop over the tiles)")
        return said
