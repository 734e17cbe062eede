"""The logits weighed by a factor of their key tile: log W[r, j] = a_t s[r, j] + c_r, where t is j's
tile of T keys and c_r one constant for the whole row. A program that scales its query (or its
scores) in place inside the loop over key tiles applies the scale once more at every tile: a_t is
then a_0 times the scale to the power t. One whose last, partial tile takes a path of its own may
score it otherwise (its scale left out): then that tile's factor alone differs.

Measured from W (one-hot V) and the true logits s: a_t by regression within each tile, the
partial last one included (the row's constant cancels there), then the whole row checked against
a_t s + one constant. LogitsByRow: the same with a factor a_r of each row (rows whose scores were
scaled otherwise: a thread's second row given the scale its first row's exp2 does not use).
"""
from __future__ import annotations

import warnings

import numpy as np

from ..diagnose import periodic_rows
from ..findings import Finding
from ..mistakes import KEY_TILES
from .logit_scale import SLOPE_WORDS, SLOPES, constant_name
from .readings import LOOK, TINY_WEIGHT, WeightReading, measured
from .step import Context, fmt, logits

FITS = 1e-2  # the largest misfit of log W, at the 99th percentile of the weights, that counts as a fit
ALIKE = 1e-2  # tiles whose factors differ by less than this (relative) are one factor (logit_slope's case)
RIGHT = 1e-3  # a row "right" beside the rows at a factor of their own: its weights within this of P's


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


def row_slopes(y: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(a, misfit): each row's factor a_r, the regression of log W on s within the row, and the
    row's largest misfit of log W = a_r s + c_r (NaN in y: a weight too small to have a log)."""
    st = np.where(np.isnan(y), np.nan, s)
    dx = st - np.nanmean(st, axis=-1, keepdims=True)
    dy = y - np.nanmean(y, axis=-1, keepdims=True)
    a = np.nansum(dx * dy, axis=-1) / np.nansum(dx * dx, axis=-1)
    return a, np.nanmax(np.abs(dy - a[..., None] * dx), axis=-1)


def rows_in_words(rows: np.ndarray) -> str:
    """Rows (B, N) as a pattern: a run within every tile of the flat rows, else a count."""
    flat = np.flatnonzero(rows)
    return periodic_rows(flat, np.arange(rows.size)) or (
        f"rows {flat[0]}..{flat[-1]}" if np.array_equal(flat, np.arange(flat[0], flat[-1] + 1)) else
        f"{flat.size} rows (e.g. {', '.join(map(str, flat[:4]))})")


class LogitsByRow(WeightReading):
    """Some rows' logits at one factor of their own (log W[r] = a s[r] + c_r with a != 1), the other
    rows right: those rows' scores scaled otherwise than the rest."""

    name = "the logits' factor by row"

    def run(self, ctx: Context) -> list[Finding]:
        W, d = ctx.facts.W, ctx.probe.shape.d
        usable = W > TINY_WEIGHT
        if usable.mean() < 0.5 or (usable.sum(axis=2) < 3).any():
            return []
        with np.errstate(divide="ignore", invalid="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            a, misfit = row_slopes(np.where(usable, np.log(W), np.nan), logits(ctx.probe.q, ctx.probe.k))
        off = np.abs(a - 1) > ALIKE
        if not np.isfinite(a).all() or np.nanmax(misfit) > FITS or not off.any() or off.all() or \
                np.ptp(a[off]) > ALIKE * np.abs(a[off]).max():
            return []
        factor = float(a[off].mean())
        if abs(factor) <= ALIKE or np.abs(W - ctx.facts.P)[~off].max() > RIGHT:  # rows alike; the rest not right
            return []
        name = next((k for k, f in SLOPES.items() if abs(factor / f(d) - 1) <= ALIKE), None) or constant_name(factor, d)
        said = (f"measured: {rows_in_words(off)} (counted over the batches' rows, row b*N + r) weigh the scores at a "
                f"factor of their own, log W = a * (the true logits) + a constant per row with a = {fmt(factor)}"
                + (f" = {name}" + (f" ({SLOPE_WORDS[name]})" if name in SLOPE_WORDS else "") if name else "")
                + ", every other row right (a = 1): those rows' scores are scaled otherwise (a second row of a "
                "thread, or one part of the rows, given another scale)")
        return measured(ctx, [said], LOOK["scale"], logit_factor=factor, named=name, rows=int(off.sum()))
