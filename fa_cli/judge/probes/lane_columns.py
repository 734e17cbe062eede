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
    if len(columns) == 1 and columns[0] != 0:
        return None  # one column alone fits any lane: only lane 0's, where a reduction leaves its result, is said
    for G in LANE_GROUPS:
        lane = int(columns[0]) % G
        if np.array_equal(columns, np.arange(lane, d, G)):
            shown = ", ".join(map(str, columns))
            which = f"columns {shown} hold" if len(columns) > 1 else f"column {shown} holds"
            how = ("as a __shfl_down tree leaves it, never broadcast back: `x = __shfl_sync(mask, x, 0)`" if lane == 0
                   else f"never broadcast back from lane {lane}")
            return (f"only {which} the right values (the dims c with c mod {G} = {lane}: lane {lane}'s, where a lane "
                    f"owns the dims c mod {G}), in every row; every other column is infinite or NaN in every row: the "
                    f"other lanes divide by (or rescale with) a row's sum or max that only lane {lane} holds, 0 or "
                    f"-inf in theirs (a reduction whose result stays in lane {lane}, {how})")
    return None
