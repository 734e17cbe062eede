"""Keys past N weighed: a row's last (or only) key tile whose slots past N are scored, not masked,
against the floats that follow K in the course's layout (V's first rows), their weights counted
in the row's sum l (and its max) and never met in the output (only the output's loop stops at N).
Read from a drawn input's output and its Q, K and V alone (larger_input's readings)."""
from __future__ import annotations

import numpy as np

from ..cases.format import Shape
from . import reference

TILES = (16, 32, 64)  # the key tiles whose slots past N may be read


def unmasked_slots(payload: tuple, shape: Shape, rows: np.ndarray | None, got: np.ndarray, tol: float) -> str | None:
    """Where every value checked is attention with the pad = -N % T slots past N of a tile of T
    keys scored against V's first pad rows (the rows after K) and weighed in l alone: in words."""
    q, k, v = payload
    N = shape.N
    pads: dict[int, list[int]] = {}
    for T in TILES:
        if 0 < -N % T <= N:  # the rows read past K are V's own (more: the next batch's Q, or past the input)
            pads.setdefault(-N % T, []).append(T)
    index = np.broadcast_to(np.arange(N) if rows is None else rows, (shape.B, N if rows is None else rows.size))
    for pad, tiles in pads.items():
        keys = np.concatenate([k, v[:, :pad]], axis=1)
        values = np.concatenate([v, np.zeros_like(v[:, :pad])], axis=1)  # weighed in l, met by no V row
        with np.errstate(invalid="ignore"):
            if (np.abs(got - reference.attention(q, keys, values, index)) <= tol).all():
                sizes = " or ".join(str(T) for T in tiles)
                return (f"every value checked is attention whose sum l holds {pad} keys more: the slots "
                        f"{N}..{N + pad - 1} of a last tile of {sizes} keys scored against the rows that follow K in "
                        f"the input (V's rows 0..{pad - 1}) and weighed in l, never in the output: as where the "
                        "tile's slots past N are not masked where its scores and its sum are taken (only the "
                        "output's loop stops at N)?")
    return None
