"""Exact attention in float64: O = softmax(Q K^T / sqrt(d)) V, the row max subtracted.

Work is tiled over query rows so that memory stays O(batches * rows_per_tile * N), never
O(N^2) for a whole input. `rows` selects a subset of query rows per batch (sampled checks).
"""
from __future__ import annotations

import numpy as np

# Bytes of float64 scores held at once (one tile of rows against all N keys, for all batches).
SCORE_BUDGET = 32 << 20


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
    """Float64 attention of batches q, k, v shaped (G, N, d).

    rows: None for every query row, or an int array (G, R) of rows to compute per batch.
    Returns (G, R, d) float64 (R = N when rows is None).
    """
    G, N, d = q.shape
    k64 = np.asarray(k, dtype=np.float64)
    v64 = np.asarray(v, dtype=np.float64)
    if rows is None:
        rows = np.broadcast_to(np.arange(N), (G, N))
    R = rows.shape[1]
    out = np.empty((G, R, d), dtype=np.float64)
    scale = 1.0 / np.sqrt(d)
    tile = max(1, SCORE_BUDGET // (8 * G * N))
    batch_index = np.arange(G)[:, None]
    for r0 in range(0, R, tile):
        q_tile = np.asarray(q[batch_index, rows[:, r0 : r0 + tile]], dtype=np.float64)
        # An input holding inf or NaN gives inf - inf and 0/0 here: NaN is the exact answer, no warning.
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            scores = np.matmul(q_tile, k64.transpose(0, 2, 1)) * scale
            scores -= scores.max(axis=2, keepdims=True)
            np.exp(scores, out=scores)
            out[:, r0 : r0 + tile] = np.matmul(scores, v64) / scores.sum(axis=2, keepdims=True)
    return out
