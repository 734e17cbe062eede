"""Each lane divided by a sum of its own, modelled: a row's keys dealt a tile at a time, key j0 + g
to lane g of T (a warp's 32, a half-warp's 16, a wavefront's 64), each tile's (max, sum of
exp(s - max)) reduced by an xor butterfly, and the running sum l = l * exp(m - m_new) + ts *
exp(tm - m_new) kept by every lane. The max's butterfly right (so each weight's numerator is), the
sum's merge written in one of a few forms: where one form gives, for every lane, a sum whose ratio
to the row's true sum is the factor measured on the columns that lane writes, that form is named.
"""
from __future__ import annotations

import numpy as np

from .step import column_owners, columns_by_lane, fmt

TILES = (32, 16, 64)  # lanes a row's keys are dealt to, a key a lane: a warp, a half-warp, a wavefront
# the sum's butterfly step: ts from its own (ts, tm) and the partner's (os, om), nm = max(tm, om); the first is right
SUM_FORMS = (
    ("ts = ts * exp(tm - nm) + os * exp(om - nm)",
     lambda ts, os, tm, om, nm: ts * np.exp(tm - nm) + os * np.exp(om - nm)),
    ("ts = ts * exp(tm - nm) + os * exp(om - tm) (the partner's sum taken against the lane's own max, not the merged "
     "one)", lambda ts, os, tm, om, nm: ts * np.exp(tm - nm) + os * np.exp(om - tm)),
    ("ts = ts * exp(tm - nm) + os (the partner's sum not rescaled)",
     lambda ts, os, tm, om, nm: ts * np.exp(tm - nm) + os),
    ("ts = ts + os * exp(om - nm) (its own sum not rescaled)", lambda ts, os, tm, om, nm: ts + os * np.exp(om - nm)),
    ("ts = ts + os (neither sum rescaled to the merged max)", lambda ts, os, tm, om, nm: ts + os),
)
WIDTH_WORDS = ("a width of {w} where its offsets span {T} lanes (__shfl_xor_sync(mask, v, off, {w})): at offsets "
               "of {w} and more a lane whose partner lies in a later segment of {w} gets its own sum back, the others "
               "their partner's")
FACTOR_RTOL = 2e-3  # a lane's modelled factor meets a column's measured one within this (float32 sums)


def lane_sums(s: np.ndarray, T: int, merge, width: int | None = None) -> np.ndarray:
    """(T, rows): the running sum l each lane of T ends with, relative to the row's max, for scores s
    (rows, N) dealt a tile at a time and each tile's sum merged by `merge` (width: the sum's shuffle
    given that width, under T: at an offset of width or more a lane whose partner lies in a later
    segment gets its own sum back, as __shfl_xor_sync does; the max's butterfly right)."""
    rows, N = s.shape
    tiles = -(-N // T)
    padded = np.full((rows, tiles * T), -np.inf)
    padded[:, :N] = s
    tm = padded.reshape(rows, tiles, T).transpose(2, 0, 1)  # (T, rows, tiles): lane g holds key t * T + g
    with np.errstate(invalid="ignore", over="ignore"):
        ts = np.where(np.isfinite(tm), 1.0, 0.0)
        off = T // 2
        while off:
            partner = np.arange(T) ^ off
            summed = partner if width is None or off < width else np.minimum(partner, np.arange(T))
            nm = np.maximum(tm, tm[partner])
            ts = merge(ts, ts[summed], tm, tm[summed], nm)
            ts = np.where(np.isnan(ts), 0.0, ts)  # two slots past N met: -inf - -inf, a sum of 0 there
            tm, off = nm, off // 2
        top = s.max(axis=1)[None, :, None]
        return (ts * np.exp(tm - top)).sum(axis=2)  # every tile's sum brought to the row's max: the l kept


def reading(factor: np.ndarray, s: np.ndarray) -> str | None:
    """factor (columns, rows): W / P measured in each column's weights, each column P times its own
    factor a row; s (rows, N) the right scores. Where one SUM_FORMS step (not the right one), or the
    right one given too narrow a width, gives every column's factor as true l / one lane's l, in
    words, a model whose lane g owns columns c = g mod T first (the usual layout); else None."""
    true_l = np.exp(s - s.max(axis=1, keepdims=True)).sum(axis=1)
    close = lambda lane, f: np.allclose(lane, f, rtol=FACTOR_RTOL)  # noqa: E731
    found = []
    for T in (T for T in TILES if T <= s.shape[1]):
        narrow = [(f"given {WIDTH_WORDS.format(w=T // k, T=T)}", SUM_FORMS[0][1], T // k) for k in (2, 4)]
        forms = [(f"written as `{w}` where it is `{SUM_FORMS[0][0]}`", m, None) for w, m in SUM_FORMS[1:]]
        models = [(f"{STEP_WORDS}{step}", true_l[None] / lane_sums(s, T, merge, width)) for step, merge, width in
                  forms + narrow] + [(FIRST_OWN_WORDS, true_l[None] / first_tile_own(s, T))]
        for words, modelled in models:  # modelled: (T, rows)
            owner = column_owners(modelled, factor, close)
            if owner is not None:
                usual = all(close(modelled[c % T], f) for c, f in enumerate(factor))  # lane c mod T's own columns
                found.append((not usual, T, words, modelled, owner))
    if not found:
        return None
    _, T, words, modelled, owner = min(found, key=lambda f: f[0])  # the usual layout first, else the first
    return (f"each column is divided by its lane's own sum l, modelled: keys dealt a tile of {T} at a time (key j0 + "
            f"g to lane g), {words}, so the lanes end with different sums (factors {fmt(modelled.min())} to "
            f"{fmt(modelled.max())}) and each divides its own columns by its own ({columns_by_lane(owner)}); "
            "look at " + ("the first tile's update of l" if words == FIRST_OWN_WORDS else "the sum's shuffle loop"))


STEP_WORDS = "each tile's max and sum reduced by an xor butterfly whose sum step is "
FIRST_OWN_WORDS = ("the first tile's l set to the lane's own weight (l = p where l = the tile's reduced sum belongs), "
                   "every later tile's sum added right")


def first_tile_own(s: np.ndarray, T: int) -> np.ndarray:
    """(T, rows): each lane's l, relative to the row's max, where the first tile's sum is the lane's
    own weight (its key g's; 0 past N) and every later tile's sum is right."""
    rows, N = s.shape
    top = s.max(axis=1, keepdims=True)
    own = np.zeros((T, rows))
    own[:min(T, N)] = np.exp(s[:, :T] - top).T
    return own + np.exp(s[:, T:] - top).sum(axis=1)[None]
