"""A warp a row, a key a lane, modelled with one butterfly written otherwise. The course's design:
a row's keys dealt a tile of T at a time (key j0 + g to lane g of a warp's 32, a half-warp's 16, a
wavefront's 64); each tile's max reduced by an xor butterfly, m_new = max(m, tile max), each lane's
weight p = exp(s - m_new) of its own key, the tile's sum of p reduced by a second butterfly, l and
o rescaled by exp(m - m_new), and every lane adding p_j V_j for each key j of the tile (p_j from
lane j). Every lane keeps its own m, l and o, so a butterfly that leaves out offsets (one that
starts below T/2, or stops above 1), or a reduction by shuffles down whose result lane 0 never sends
back, leaves lanes with states of their own, and each lane's columns carry its own weights. Where
one such reduction gives, for every output column, one lane's weights, it is named, with the
offsets it runs over and the lane of each column.
"""
from __future__ import annotations

import numpy as np

from .step import column_owners, columns_by_lane

TILES = (32, 16, 64)
MAX_STEP, SUM_STEP = "the tile's max reduced", "the tile's sum reduced"  # which butterfly, in the words said
EMPTY = -1e30  # a slot past N, as programs mark it: exp(EMPTY - m) is 0, exp(EMPTY - EMPTY) is 1
CLOSE = 2e-5  # a lane's modelled weights meet a column's measured ones within this
SCREEN_ROWS = 8  # rows a model is tried on before it is run on every row


def offsets(start: int, stop: int) -> list[int]:
    """An xor butterfly's offsets: start, start / 2, ..., stop."""
    out = []
    while start >= stop and start:
        out.append(start)
        start //= 2
    return out


def partner(lane: np.ndarray, off: int, down: bool) -> np.ndarray:
    """The lane each lane reads at a step: lane ^ off (an xor butterfly), or lane + off where that is a
    lane of the tile and its own value past it (__shfl_down_sync)."""
    return np.where(lane + off < lane.size, lane + off, lane) if down else lane ^ off


def lane_weights(s: np.ndarray, T: int, max_steps: list[int], sum_steps: list[int], max_down: bool = False,
                 sum_down: bool = False) -> np.ndarray:
    """(rows, T, N): each lane's weights at the end, the design above with these reductions (xor
    butterflies, or shuffles down where asked)."""
    rows, N = s.shape
    lane = np.arange(T)
    m, l, acc = np.full((rows, T), EMPTY), np.zeros((rows, T)), np.zeros((rows, T, N))
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        for j0 in range(0, N, T):
            n = min(T, N - j0)
            st = np.full((rows, T), EMPTY)
            st[:, :n] = s[:, j0:j0 + n]
            tm = st.copy()
            for off in max_steps:
                tm = np.maximum(tm, tm[:, partner(lane, off, max_down)])
            m_new = np.maximum(m, tm)
            alpha = np.exp(m - m_new)
            p = np.where(lane < n, np.exp(st - m_new), 0.0)
            ts = p.copy()
            for off in sum_steps:
                ts = ts + ts[:, partner(lane, off, sum_down)]
            l = l * alpha + ts
            acc *= alpha[..., None]
            acc[:, :, j0:j0 + n] += p[:, None, :n]  # lane g adds p_j, shuffled from lane j, for each key j
            m = m_new
        return acc / l[..., None]


def over(start: int, stop: int) -> str:
    return f"at offset {start} alone" if start == stop else f"over offsets {start}..{stop}"


def variants(T: int):
    """(which, words, offsets, down): one reduction that leaves out its first or its last steps, or
    all, or shuffles down and never sends lane 0's result back."""
    whole = offsets(T // 2, 1)
    xor = "by an xor butterfly"
    for which in ("max", "sum"):
        for start in whole[1:]:
            yield which, f"{xor} {over(start, 1)} where it is {T // 2}..1 (its first steps left out)", \
                offsets(start, 1), False
        for stop in whole[:-1][::-1]:  # 2, 4, ..., T / 2: `off > 1` stops at 2
            yield which, f"{xor} {over(T // 2, stop)} where it is {T // 2}..1 (its last steps left out)", \
                offsets(T // 2, stop), False
        yield which, f"{xor} never run (each lane keeps its own key's, where offsets {T // 2}..1 belong)", [], False
        yield which, (f"by __shfl_down_sync over offsets {T // 2}..1 whose result, lane 0's, is never sent back to "
                      f"the other lanes (lane g keeps its part over lanes g..{T - 1}: a broadcast, __shfl_sync(mask, "
                      "v, 0), or an xor butterfly belongs)"), whole, True


def candidates(lanes: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """(d, T): whether each column's weights (d, rows, N) are each lane's (lanes: (rows, T, N)) on these
    rows: every column against every lane at once (a few rows: a screen, where lanes may agree)."""
    return np.abs(weights[:, :, None, :] - lanes[None]).max(axis=(1, 3)) <= CLOSE


def reading(weights: np.ndarray, s: np.ndarray) -> str | None:
    """weights (d, N, N): each column's weights; s (N, N) the right scores. Where one variant's lanes
    give every column one lane's weights (the lanes not all alike), in words; else None."""
    N = s.shape[1]
    screen = slice(0, min(SCREEN_ROWS, s.shape[0]))
    for T in (T for T in TILES if T <= N):
        whole = offsets(T // 2, 1)
        for which, words, steps, down in variants(T):
            max_steps, sum_steps = (steps, whole) if which == "max" else (whole, steps)
            downs = dict(max_down=down) if which == "max" else dict(sum_down=down)
            screened = candidates(lane_weights(s[screen], T, max_steps, sum_steps, **downs), weights[:, screen])
            if not screened.any(axis=1).all() or screened.all(axis=1).all():
                continue  # a column no lane gives, or every lane alike on the screen
            lanes = np.moveaxis(lane_weights(s, T, max_steps, sum_steps, **downs), 1, 0)  # every row: (T, rows, N)
            owner = column_owners(lanes, weights, lambda lane, W: np.allclose(lane, W, atol=CLOSE, rtol=0), screened)
            if owner is None:
                continue
            noun = "maxima" if which == "max" else "sums"
            return (f"each output column's weights are one lane's own: a key a lane in tiles of {T} (key j0 + g on "
                    f"lane g), {MAX_STEP if which == 'max' else SUM_STEP} {words}, so the lanes "
                    f"end with {noun} of their own and each writes its own weights to its columns "
                    f"({columns_by_lane(owner)}); look at that butterfly's loop")
    return None
