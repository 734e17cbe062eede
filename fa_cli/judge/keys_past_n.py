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
    keys scored against the rows that follow K (V's first pad rows as the input has them, or the next
    batch's K rows where K is kept apart: every batch but the last checked) and weighed in l alone."""
    q, k, v = payload
    N = shape.N
    pads: dict[int, list[int]] = {}
    for T in TILES:
        if 0 < -N % T <= N:  # the rows read past K are one part's own (more: further parts, or past the input)
            pads.setdefault(-N % T, []).append(T)
    taken = np.arange(N) if rows is None else rows
    index = np.broadcast_to(taken, (shape.B, taken.size))
    for pad, tiles in pads.items():
        after = [(f"the rows that follow K in the input (V's rows 0..{pad - 1})", v[:, :pad], shape.B)]
        if shape.B > 1:
            after.append((f"the rows that follow K_b in a buffer of K alone (the next batch's K rows 0..{pad - 1}; the "
                          "last batch not checked)", k[1:, :pad], shape.B - 1))
        for where, extra, B in after:
            keys = np.concatenate([k[:B], extra], axis=1)
            values = np.concatenate([v[:B], np.zeros_like(extra)], axis=1)  # weighed in l, met by no V row
            with np.errstate(invalid="ignore"):
                if not (np.abs(got[:B] - reference.attention(q[:B], keys, values, index[:B])) <= tol).all():
                    continue
            sizes = " or ".join(str(T) for T in tiles)
            return (f"every value checked is attention whose sum l holds {pad} keys more: the slots {N}..{N + pad - 1}"
                    f" of a last tile of {sizes} keys scored against {where} and weighed in l, never in the output: "
                    "as where the tile's slots past N are not masked where its scores and its sum are taken (only "
                    "the output's loop stops at N)?")
    return None
