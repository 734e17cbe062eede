"""Weights with a floor: an exponential clamped from below (exp2f(fmaxf(x, -16)), a `p < eps ? eps : p`)
gives every key far below the row's max the same weight, where the right softmax gives it next to
none. Read on the keys after each row's largest score (there the running max is the row's final one,
in a program that goes key by key or tile by tile alike): the least of their weights, relative to the
largest key's, is the same value in every row while the right ratio is far under it, and every such
key's weight is the larger of its right ratio and that value.
"""
from __future__ import annotations

import numpy as np

from ..findings import Finding
from .readings import LOOK, WeightReading, measured
from .step import Context, fmt, logits

SPREAD = 1e-3  # the floor read in every row within this, relative
MIN_ROWS = 8  # rows that show the floor (a key after the max far under it) before it is named
UNDER = 10  # a right ratio this many times under the weight read: that key is floored
FIT_SHARE = 0.95  # of the keys after the max that the floor model gives within SPREAD
MAX_FLOOR = 1e-2  # a floor is far under the largest weight (uniform weights are no floor)
NEAR = 3.0  # keys whose right ratio is within this factor of the floor tell max(t, f) from t + f


def floor_of(W: np.ndarray, s: np.ndarray) -> tuple[float, int] | None:
    """(the floor relative to the row's largest weight, rows that show it), where W (B, N, N) is the
    softmax of s with every weight after the row's max clamped from below at one value; else None."""
    shown, after_max = [], []
    for b, r in np.ndindex(*W.shape[:2]):
        a = int(np.argmax(s[b, r]))
        if a >= W.shape[2] - 1 or not W[b, r, a] > 0:
            continue
        with np.errstate(divide="ignore", invalid="ignore"):
            w, t = W[b, r, a + 1:] / W[b, r, a], np.exp(s[b, r, a + 1:] - s[b, r, a])
        after_max.append((w, t))
        j = int(np.argmin(w))
        if w[j] > 0 and t[j] * UNDER < w[j]:
            shown.append(float(w[j]))
    if len(shown) < MIN_ROWS:
        return None
    f = float(np.median(shown))
    if f > MAX_FLOOR or np.abs(np.array(shown) / f - 1).max() > SPREAD:
        return None
    w, t = (np.concatenate(a) for a in zip(*after_max))
    clamped = np.abs(w - np.maximum(t, f)) <= SPREAD * np.maximum(t, f)
    near = (t > f / NEAR) & (t < f * NEAR)  # a clamp gives max(t, f) there, a floor added t + f
    if clamped.mean() < FIT_SHARE or near.sum() < MIN_ROWS or clamped[near].mean() < FIT_SHARE:
        return None
    return f, len(shown)


def named_power(f: float) -> str:
    """f as a power of 2 or of e where it is one (2^-16, e^-20), else ''."""
    for base, name in ((2.0, "2"), (np.e, "e")):
        k = np.log(f) / np.log(base)
        if abs(k - round(k)) <= 1e-3:
            return f" = {name}^{int(round(k))}"
    return ""


class WeightFloor(WeightReading):
    """Every weight far under the row's largest raised to one floor: a clamped exponential."""

    name = "weights with a floor"

    def run(self, ctx: Context) -> list[Finding]:
        s = logits(ctx.probe.q, ctx.probe.k)
        found = floor_of(ctx.facts.W, s)
        if found is None:
            return []
        f, rows = found
        return measured(ctx, [
            f"measured on {ctx.probe.label}: after each row's largest score, every key whose right weight is under "
            f"{fmt(f)}{named_power(f)} of the largest one's gets exactly that much ({rows} rows show it, the keys over "
            "it their right weights, those near it the larger of the two, not their sum): the exponential is clamped "
            "from below (a floor on exp(s - m) or on its argument), so each key far under the max adds the floor to l "
            "and to the output; look at the exponential's argument"],
            look=LOOK["exp"], weight_floor=f)
