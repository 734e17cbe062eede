"""Keys whose weights meet no row of V: in a set of output columns, W is P on some keys and 0 on
the others, the same keys in every row, repeating every m keys (a tile's slots). Their weights
were computed right but multiplied something that is not V: an index of V's rows that runs past
the tile (or into another buffer). Where the output with V all zero is those keys' weights times
values (fitted by least squares, one value a key and column), the values are looked for in the
probe's K and Q, and where they are K's elements laid out at another pitch (a tile of K stored at
one pitch and read at V's), the pitches are said (key_patterns.two_pitches' formula).
"""
from __future__ import annotations

import numpy as np

from .key_patterns import PITCHES, nearest, tile_at_pitches
from .step import fmt, spans

RIGHT_ATOL = 2e-5  # a weight equal to P's (a float32 program's)
TELLING = 1e-4  # a key some row weighs this much: its weight, left out, shows
PERIODS = (2, 4, 8, 16, 32, 64, 128, 256)  # a tile's slots
FIT_RTOL = 1e-3  # the fitted values give the output where V is zero to this share of its largest
VALUE_TOL = 2e-5  # a fitted value is an element of K or Q within this (random elements: one in ~10^4 by chance)
FOUND = 0.9  # of the fitted values found in one buffer
PITCH_AGREE = 0.95  # of the values found, those a pitch formula places
LEAD = "keys whose weights meet no row of V: "
LEFT_OUT = "keys left out of the softmax: "
# where keys are left out: the count of a tile's keys (N % T, N - j0 < T ? ... : T, min(T, N - j0)), a loop's bound
KEY_COUNT_LOOK = ("a count of a tile's keys", r"\b[Nn]\s*%\s*\w+|\b[Nn]\s*-\s*\w+\s*<|\bmin\s*\(\s*\w+\s*,\s*[Nn]\s*-")
NOTHING_MET = (": their weights were summed into l and never multiplied any row of V: the P V loop runs over fewer "
               "of a tile's keys than were scored (its bound, or its start), or those rows of the V tile are never "
               "loaded (left 0)")


def keys_gone(W: np.ndarray, P: np.ndarray) -> np.ndarray | None:
    """The keys W leaves at 0 where every other key's weight is P's, as a mask; None where W is no
    such split (or all or none of the keys)."""
    right = (np.abs(W - P) <= RIGHT_ATOL).all(axis=0)
    zero = (np.abs(W) <= RIGHT_ATOL).all(axis=0)
    gone = zero & ~right  # a key no row weighs over RIGHT_ATOL in P is both: counted as right
    if not (right | zero).all() or not gone.any() or not (right & ~zero).any():
        return None
    return gone


def left_out(W: np.ndarray, P: np.ndarray) -> str | None:
    """Keys with 0 weight in every row where the other keys' weights are the right scores' softmax
    over them alone: those keys left out of the sum and the output alike (whether the max saw them
    the weights cannot show: it cancels); in words, else None."""
    gone = (np.abs(W) <= RIGHT_ATOL).all(axis=0) & (P.max(axis=0) > TELLING)
    if not gone.any() or gone.all():
        return None
    kept = np.where(gone[None], 0.0, P)
    if np.abs(W - kept / kept.sum(axis=1, keepdims=True)).max() > RIGHT_ATOL:
        return None
    return (f"{LEFT_OUT}{keys_said(gone, P)[0]} have 0 weight in every row, the others the right "
            "scores' softmax over them alone: those keys were left out of the sum and the output alike (a loop's "
            "bound or a tile's count of keys that stops short of them)")


def keys_said(gone: np.ndarray, P: np.ndarray) -> tuple[str, int | None]:
    """The keys of the mask in words, by their slots where they repeat every m keys, with their
    count; and m (None where they do not repeat)."""
    m = period(gone, P.max(axis=0) > TELLING)
    which = f"keys {spans(np.flatnonzero(gone))}" if m is None else \
        f"the keys j with j mod {m} in {{{spans(np.flatnonzero(gone[:m]))}}}"
    return f"{which} ({int(gone.sum())} of {gone.size})", m


def period(gone: np.ndarray, telling: np.ndarray) -> int | None:
    """The smallest tile m whose slots say every key's state: the keys that show agree slot by slot."""
    N = gone.size
    for m in (m for m in PERIODS if m <= N // 2):
        slots = np.arange(N) % m
        if all(len(set(gone[(slots == s) & telling])) <= 1 for s in range(m)):
            return m
    return None


def unmet(W: np.ndarray, P: np.ndarray, constant: np.ndarray | None, cols: np.ndarray,
          buffers: dict[str, np.ndarray]) -> str | None:
    """In words: which keys meet no row of V in these columns, and what their weights met instead
    where that is read from the output with V all zero (constant, N x d); None where W is no split."""
    gone = keys_gone(W, P)
    if gone is None:
        return None
    which, m = keys_said(gone, P)
    said = f"{LEAD}{which} have 0 weight on every row of V, the other keys P's weights exactly (so theirs are in l)"
    if constant is None:
        return said
    if not np.abs(constant[:, cols]).max() > RIGHT_ATOL:  # V all zero gives 0 here: they met nothing at all
        return said + NOTHING_MET
    return said + (": their weights met something other than V (a V row index past the tile, or another buffer's)"
                   + met_instead(P[:, gone], constant[:, cols], np.flatnonzero(gone), cols, m, buffers))


def met_instead(Pg: np.ndarray, target: np.ndarray, keys: np.ndarray, cols: np.ndarray, m: int | None,
                buffers: dict[str, np.ndarray]) -> str:
    """The values the left-out keys' weights met, fitted from target = Pg @ Y and looked for in
    the buffers: ', and ...' in words, or '' where no fit holds."""
    Y, *_ = np.linalg.lstsq(Pg, target, rcond=None)
    if np.abs(Pg @ Y - target).max() > FIT_RTOL * np.abs(target).max():
        return ""
    for name, X in buffers.items():
        flat = X.astype(np.float64).ravel()
        order = np.argsort(flat)
        at, hit = nearest(flat[order], Y.ravel(), VALUE_TOL * max(1.0, np.abs(flat).max()))
        if hit.mean() < FOUND:
            continue
        source = np.where(hit, order[at], -1).reshape(Y.shape)  # (gone key, column)
        a, b = np.argwhere(source >= 0)[0]  # the first value found: its key, its column
        d = X.shape[1]
        words = (f"; the output with V all zero is their weights times elements of {name} ({int(hit.sum())} of "
                 f"the {hit.size} values fitted, key by key and column by column): key {keys[a]}'s weight meets "
                 f"{name}[{source[a, b] // d}, {source[a, b] % d}] in column {cols[b]}")
        if m and (fits := pitches(source, keys, cols, m, X.shape[0], d)):
            words += f"; they fit {name}'s tile of {m} keys stored at a pitch of {fits[0]} floats a row " \
                     f"and read at {fits[1]}: key j0 + r's weight in column c meets " \
                     f"{name}[j0 + (r*{fits[1]} + c) // {fits[0]}, (r*{fits[1]} + c) % {fits[0]}]"
        return words
    return f"; the output with V all zero is their weights times values (fitted to {fmt(FIT_RTOL)} of it) that " \
           "are no element of K or Q"


def pitches(source: np.ndarray, keys: np.ndarray, cols: np.ndarray, m: int, N: int, d: int) -> tuple[int, int] | None:
    """The smallest (stored pitch, read pitch) under which the elements found (PITCH_AGREE of them)
    are the tile's elements key j's weight takes in column c (over a tile's first rows, pitches
    (p, p - 1) all place an element alike); None where none fits."""
    j, c = np.meshgrid(keys, cols, indexing="ij")
    found = source >= 0  # a pad slot's value (the memory's) may match an element by chance: most must fit
    fitting = [(p, q) for p in PITCHES for q in PITCHES if p != q and p >= d and
               (source[found] == tile_at_pitches(j[found], c[found], m, p, q, N, d)).mean() >= PITCH_AGREE]
    return fitting[0] if fitting else None
