"""An output right in the columns of one lane and infinite or NaN in all the others: the lanes that
own the other dims divide by (or rescale with) a row statistic only that lane holds (a warp
reduction by __shfl_down leaves its result in lane 0; the broadcast back is missing: set47's s08)."""
from __future__ import annotations

import numpy as np

LANE_GROUPS = (32, 64)  # a warp's lanes, a wavefront's: a lane owns the dims c with c mod G its own

REDUCTION_LOOK = ("a reduction that leaves its result in one lane (a shuffle down, a broadcast)",
                  (r"__shfl_down(_sync)?\s*\(", r"__shfl(_sync)?\s*\([^;]*,\s*0\s*\)"))


def one_lanes_columns(out: np.ndarray, true: np.ndarray, tol: float) -> str | None:
    """Words where the columns whose every value is right are exactly one lane's (c mod G = L) and
    every value of the other columns is infinite or NaN; None otherwise."""
    with np.errstate(invalid="ignore"):
        right = (np.abs(out - true) <= tol).all(axis=(0, 1))
    lost = (~np.isfinite(out)).all(axis=(0, 1))
    d = out.shape[2]
    if not right.any() or not (right | lost).all():
        return None
    columns = np.flatnonzero(right)
    for G in LANE_GROUPS:
        lane = int(columns[0]) % G
        if np.array_equal(columns, np.arange(lane, d, G)):
            shown = ", ".join(map(str, columns))
            return (f"only column{'s' if len(columns) > 1 else ''} {shown} (the dims c with c mod {G} = {lane}: lane "
                    f"{lane}'s, where a lane owns the dims c mod {G}) hold the right values, in every row; every other "
                    f"column is infinite or NaN in every row: the other lanes divide by (or rescale with) a row's sum "
                    f"or max that only lane {lane} holds, 0 or -inf in theirs (a reduction whose result stays in lane "
                    f"{lane}, as a __shfl_down tree leaves it, never broadcast back: `x = __shfl_sync(mask, x, "
                    f"{lane})`)")
    return None
