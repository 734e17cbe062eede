"""One set of weights W (every output column's), whose wrong rows each weigh the keys with another
row's weights of P, rescaled by a factor of each key tile's own: W[r, j] = f(r, tile of j) P[r', j].

A thread that owns two query rows (register tiling: rows q0 + t and q0 + R + t) and accumulates
the second with the first's weight leaves exactly this: the first row's exp(s - m) over its own
running max, rescaled by the second row's factors at each later tile and divided by the second
row's sum. The rows r' are found by the ratio W[r] / P[r'] being constant within every key tile
(of the largest width that holds); the map r -> r' said as a formula where one fits.
"""
from __future__ import annotations

import numpy as np

from ..diagnose import describe_rows
from .step import spans

LOG_ATOL = 1e-3  # log W[r] - log P[r'] within a key tile: one float32 program's exp and rescales
TILES = (8, 16, 24, 32, 48, 64, 96, 128, 256)
TINY = 1e-30  # weights below this carry no readable log
LEAD = "each weigh the keys with another row's weights"


def another_rows(W: np.ndarray, P: np.ndarray, right_atol: float) -> str | None:
    """The words where every wrong row of W is another row's weights of P times a factor a key tile
    (right rows: max |W[r] - P[r]| <= right_atol), and not its own row's so (a stale max, a wrong
    sum: the factor readings' to name, even where another row's P is the same as its own); None
    where some wrong row is no such row."""
    rows, N = P.shape
    wrong = np.flatnonzero(np.abs(W - P).max(axis=1) > right_atol)
    if wrong.size == 0 or (W[wrong] < TINY).any():
        return None  # a key with no weight: not this reading (KeysWithoutWeight's)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.log(W[wrong])[:, None, :] - np.log(P)[None, :, :]  # (wrong row, r', key); a tiny P: no fit
    own = np.arange(rows)[None, :] == wrong[:, None]
    for width in sorted({N, *(t for t in TILES if t < N)}, reverse=True):  # the whole row first
        fits = _constant_by_tile(ratio, width)
        if (fits & own).any():
            return None  # a row's own weights times a factor a tile: not another row's
        if fits.any(axis=1).all():
            return _said(wrong, _sources(wrong, fits), width, N)
    return None


SHIFT_TILES = (8, 16, 32, 64)  # the lanes a row's keys are dealt to, a key a lane
SHIFT_LEAD = "weighs V's row j with another row's weight of key j"


def shifted_rows(W: np.ndarray, P: np.ndarray, right_atol: float) -> str | None:
    """The words where every wrong row of W weighs V's row j with another row's weight of key j + s
    (s = 1 or -1, within key tiles of T: the slot that key leaves is left apart), times a factor a
    tile: weights fetched from another row's lanes one lane off; None where none fits."""
    rows, N = P.shape
    wrong = np.flatnonzero(np.abs(W - P).max(axis=1) > right_atol)
    if wrong.size == 0 or (W[wrong] < TINY).any():
        return None
    for T in (T for T in reversed(SHIFT_TILES) if T < N):  # the widest tile that holds (a narrower one holds too)
        for shift in (1, -1):
            slot = np.arange(N) % T
            keys = np.flatnonzero((slot + shift >= 0) & (slot + shift < T) & (np.arange(N) + shift < N))
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = np.full((wrong.size, rows, N), np.nan)
                ratio[:, :, keys] = np.log(W[wrong][:, None, keys]) - np.log(P[None, :, keys + shift])
            fits = _constant_by_tile(ratio, T, keys)
            if fits.any(axis=1).all():
                source = _sources(wrong, fits)
                return (f"one set of weights for every column; wrong in {describe_rows(wrong, np.arange(rows), rows)}: "
                        f"each row {SHIFT_LEAD} "
                        f"{'+' if shift > 0 else '-'} 1 (key tiles of {T}, the slot that leaves apart): row r's are "
                        f"row {_formula(wrong, source)}'s of P shifted by one key, times a factor of each tile (e.g. "
                        f"row {wrong[0]}: row {source[0]}'s): weights fetched from another row's lanes one lane off "
                        "(a shuffle's source lane computed from the wrong base or shift, as a row's first lane)")
    return None


def _sources(wrong: np.ndarray, fits: np.ndarray) -> np.ndarray:
    """Each wrong row's r' among those that fit: at the shift r' - r most rows share where that fits
    (rows whose P are alike fit more than one), else the first."""
    shifts = [np.flatnonzero(f) - r for f, r in zip(fits, wrong)]
    values, counts = np.unique(np.concatenate(shifts), return_counts=True)
    common = values[counts.argmax()]
    return np.array([r + common if common in s else r + s[0] for r, s in zip(wrong, shifts)])


def _said(wrong: np.ndarray, source: np.ndarray, width: int, N: int) -> str:
    tiles = "one factor a row" if width == N else f"a factor of each key tile of {width}"
    return (f"one set of weights for every column; rows {spans(wrong)} {LEAD}: row r's are row "
            f"{_formula(wrong, source)}'s of P, times {tiles} (W[r] / P[r'] constant within each; e.g. row "
            f"{wrong[0]}: row {source[0]}'s): the weight of one query row met with another row's output "
            "(a thread that owns two rows accumulating the second with the first's weights, or a row's weights "
            "read from the wrong place)")


def _constant_by_tile(ratio: np.ndarray, width: int, keys: np.ndarray | None = None) -> np.ndarray:
    """(wrong row, r'): the log ratio constant within every key tile of `width` (the last partial),
    over `keys` only where given."""
    N = ratio.shape[2]
    spread = np.zeros(ratio.shape[:2])
    with np.errstate(invalid="ignore"):  # inf - inf where a P underflows: NaN, no fit
        for j0 in range(0, N, width):
            inside = np.arange(j0, min(j0 + width, N)) if keys is None else keys[(keys >= j0) & (keys < j0 + width)]
            part = ratio[:, :, inside]
            spread = np.maximum(spread, part.max(axis=2) - part.min(axis=2))
        return spread <= LOG_ATOL


def _formula(r: np.ndarray, source: np.ndarray) -> str:
    """r' as a formula of r: a shift, a row within blocks, else examples."""
    shifts = np.unique(source - r)
    if shifts.size == 1:
        return f"r {'-' if shifts[0] < 0 else '+'} {abs(int(shifts[0]))}"
    for m in (8, 16, 32, 64, 128):
        if (source == r % m).all():
            return f"r mod {m}"
    return "r' (no formula of those tried: " + ", ".join(f"{a} <- {b}" for a, b in zip(r[:4], source[:4])) + ")"
