"""What the keys a row kept say, where a reading of W found rows that give the other keys no weight
and weigh the kept ones as the softmax over them: one whole key tile kept (the running state set
from that tile alone) or the last key alone (each key replaced the state it should add to).
"""
from __future__ import annotations

import numpy as np

from ..mistakes import KEY_TILES

# where the running max takes a new value: `m = mn;`, `m0 = fmaxf(m0, s)`, `row_max[i] = m_new` (not its start
# at -INFINITY, nor names that only begin with m_: `m_rows`)
LAST_KEY_LOOK = ("the running max's update", r"\b(?:m|mi|m\d|m_(?:i|old|prev|run|cur|row)|mx|row_?max|run\w*max)\s*"
                                             r"(?:\[[^\]]*\])?\s*=(?!=)(?!\s*-?\s*(?:INFINITY|FLT_MAX|HUGE|\d))")


def restarted(left_out: np.ndarray, N: int) -> str:
    """Where the keys kept are one whole tile: the other reading of it (the running state set from
    that tile alone, as the tile a "first tile" test picks, visited last), in words; else ''."""
    kept = np.setdiff1d(np.arange(N), left_out)
    T = kept.size
    if T not in KEY_TILES or kept[0] % T or kept[-1] != kept[0] + T - 1:
        return ""
    how = ("a \"first tile\" test on the key index, as j0 == 0, where the first tile the rows visit belongs: their "
           "blocks visit this one last" if kept[0] == 0 else "a reset of them where that tile is reached")
    return (f", or those rows' running state set from the tile of keys {kept[0]}..{kept[-1]} alone, the tiles before "
            f"it thrown away: m, l and o started again there ({how})")


def last_key_alone(left_out: np.ndarray, N: int) -> str | None:
    """Where the one key kept is the last (N > 1): the output row is V's last row, and the three
    ways a program gets there, in words; None otherwise."""
    kept = np.setdiff1d(np.arange(N), left_out)
    if N < 2 or kept.size != 1 or kept[0] != N - 1:
        return None
    return ("the one key kept is the last, N - 1, weighed 1: the output row is V's last row, whatever the scores: as "
            "where each key replaces the row's state instead of adding to it (the old state's factor exp(m - m_new) 0 "
            "at every key: the running max never advanced, left at -inf, or o and l assigned where they accumulate), "
            "or a key loop that runs only its last key (its start, or a `for (...);` with the body after it), or V "
            "read at row N - 1 for every key; look at where the running max takes its new value, then at the key "
            "loop")
