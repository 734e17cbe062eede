"""Key tiles a row gives no weight, the rest the softmax over the keys kept, where which tiles depends
on the scores: each skipped tile's largest score is further under the running max than every kept
tile's, a threshold between them (an early exit for tiles whose weights look negligible: set47's s09,
2^-10 of the max's weight, dropped where thousands of tiles add up)."""
from __future__ import annotations

import numpy as np

from ..findings import Finding
from ..mistakes import KEY_TILES
from .partial_sums import in_tiles, tile_maxima
from .readings import ROW_ATOL, ZERO, WeightReading, measured
from .step import Context, fmt, logits, softmax_rows

SKIP_LOOK = ("a tile's skip test", r"\b(?:SKIP|THRESH|CUTOFF)\w*\b|\bif\s*\(\s*(?:tmax|tile_max|mt|m_tile)\b[^)]*[<>]")
MARGIN = 1e-3  # between the kept tiles' largest gap and the skipped ones' smallest: a threshold, not a tie


def tile_gaps(s: np.ndarray, T: int) -> np.ndarray:
    """Per row and key tile from the second on: how far the tile's largest score is under the
    running max of the tiles before it."""
    own, running, _, _ = tile_maxima(s, T)
    return running[..., :-1] - own[..., 1:]


class SkippedTiles(WeightReading):
    """Whole key tiles with no weight in some rows, a threshold on the running max telling them."""

    name = "key tiles skipped under the running max"

    def run(self, ctx: Context) -> list[Finding]:
        W, P = ctx.facts.W, ctx.facts.P
        nil = np.abs(W) <= ZERO
        dead = nil & (P > 1e-7)
        if not dead.any() or dead.all(axis=(0, 1)).any():
            return []  # none, or a key no row weighs (KeysWithoutWeight's)
        s = logits(ctx.probe.q, ctx.probe.k)
        with np.errstate(invalid="ignore"):
            if not (np.abs(W - softmax_rows(np.where(nil, -np.inf, s))) <= ROW_ATOL).all():
                return []  # the weights kept are not the softmax over the keys kept
        for T in KEY_TILES:
            said = threshold(s, nil, P, T)
            if said:
                return measured(ctx, [f"measured: {said}"], look=SKIP_LOOK, tiles_skipped=T)
        return []


def threshold(s: np.ndarray, nil: np.ndarray, P: np.ndarray, T: int) -> str | None:
    """Words where the keys with no weight (nil) that P weighs are whole tiles of T past the first,
    each such tile's largest score further under the running max than every kept tile's; None
    otherwise. A tile whose every weight is under ZERO in P too tells nothing either way."""
    N = s.shape[-1]
    if N <= T:
        return None
    # each key tile past the first, its slots past N taken as no weight of no key
    empty = in_tiles(nil, T, True)[..., 1:, :].all(axis=-1)
    weighed = (in_tiles(P, T, 0.0)[..., 1:, :] > ZERO).any(axis=-1)
    skipped, kept = empty & weighed, ~empty
    lost = nil & (P > 10 * ZERO)  # a weight the row should have, missing: key by key inside a kept tile is no skip
    partly = in_tiles(lost, T, False)[..., 1:, :].any(axis=-1) & kept
    if partly.any() or lost[..., :T].any() or not skipped.any() or not kept.any():
        return None
    gap = tile_gaps(s, T)
    low, high = gap[kept].max(), gap[skipped].min()
    if not (high > 0 and high - low > MARGIN):
        return None
    rows = int(skipped.any(axis=-1).sum())
    dropped = float(np.where(nil, P, 0.0).sum(axis=-1).max())
    return (f"{int(skipped.sum())} key tiles of {T} (in {rows} rows) get no weight, whole, and the weights kept are "
            f"the softmax over the keys kept; every such tile's largest score is {fmt(high)} or more under the "
            f"running max of the tiles before it, every kept tile's at most {fmt(low)}: tiles skipped under a "
            f"threshold between the two ({fmt(low / np.log(2))} to {fmt(high / np.log(2))} in log2 units), their "
            f"weight dropped from l and the output (at most {fmt(dropped)} of a row's here; more where many tiles "
            "are skipped): a skip test whose threshold is too near the max")
