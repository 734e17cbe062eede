"""The factor a on the logits a program used, from log W = a * (the true logits) + a constant per
row: named by its value among the constants of a softmax's scale (sqrt(d), ln 2, log2(e), a head
dimension hard-coded, sqrt(d) as a whole number), and a scale a little off 1 told from float32's
rounding by the fit's own error. factors.Factors reads it; tile_logits reads the names per tile
and per row.
"""
from __future__ import annotations

import numpy as np

from .readings import TINY_WEIGHT


# Factors on the logits, by name: a slope of log W against the true logits.
SLOPES = {
    "sqrt(d)": lambda d: np.sqrt(d), "1/sqrt(d)": lambda d: 1 / np.sqrt(d), "d": lambda d: d, "1/d": lambda d: 1 / d,
    "ln 2": lambda d: np.log(2), "log2(e)": lambda d: np.log2(np.e), "2": lambda d: 2.0, "1/2": lambda d: 0.5,
    "sqrt(d) * log2(e)": lambda d: np.sqrt(d) * np.log2(np.e), "ln 2 / sqrt(d)": lambda d: np.log(2) / np.sqrt(d),
    "sqrt(d) * ln 2": lambda d: np.sqrt(d) * np.log(2), "log2(e) / sqrt(d)": lambda d: np.log2(np.e) / np.sqrt(d),
    "sqrt(d / 32)": lambda d: np.sqrt(d / 32), "sqrt(d / 64)": lambda d: np.sqrt(d / 64),
    "sqrt(d) / floor(sqrt(d))": lambda d: np.sqrt(d) / np.floor(np.sqrt(d)),
    "sqrt(d) / round(sqrt(d))": lambda d: np.sqrt(d) / np.round(np.sqrt(d)),
}
SLOPE_WORDS = {
    "sqrt(d)": "the scores are not divided by sqrt(d)", "1/sqrt(d)": "the scores are divided by sqrt(d) twice (by d)",
    "ln 2": "exp2 is given the logits without the factor log2(e)",
    "log2(e)": "the logits are multiplied by log2(e) and then given to exp, not exp2",
    "(ln 2)^2": "a softmax kept in base 2 (exp2 of the scores times a constant c) whose c holds ln 2 where "
                "log2(e) belongs",
    "sqrt(d / 32)": "the scale is 1/sqrt(32) where this input's d needs 1/sqrt(d) (a head dimension hard-coded)",
    "sqrt(d / 64)": "the scale is 1/sqrt(64) where this input's d needs 1/sqrt(d) (a head dimension hard-coded)",
    "sqrt(d) / floor(sqrt(d))": "the scale is 1 / floor(sqrt(d)): sqrt(d) kept as a whole number (an int variable, "
                                "or (int)sqrtf(d)), right only where d is a square",
    "sqrt(d) / round(sqrt(d))": "the scale is 1 / round(sqrt(d)): sqrt(d) rounded to a whole number (lroundf, or "
                                "an int given sqrtf(d) + 0.5), right only where d is a square",
    "0": "the scores are multiplied by 0, so every key weighs the same (1 / sqrt(d) computed in whole numbers is 0: "
         "1 / (int)sqrtf(d), or an int scale)",
}


def constant_name(a: float, d: int) -> str | None:
    """a as sqrt(d)^p * (ln 2)^q for small whole p and q (the constants of a softmax's scale and
    of exp against exp2), where one fits within 1%."""
    for p in range(-2, 3):
        for q in range(-2, 3):
            if (p, q) != (0, 0) and abs(a / (np.sqrt(d) ** p * np.log(2) ** q) - 1) <= 1e-2:
                return " * ".join(t for t in (power_of("sqrt(d)", p), power_of("(ln 2)", q)) if t)
    return None


def power_of(name: str, p: int) -> str:
    return "" if p == 0 else name if p == 1 else f"{name}^{p}"


def logit_slope(W: np.ndarray, s: np.ndarray, d: int) -> tuple[str, dict] | None:
    """log W_ij = a s_ij + c_i: the factor a on the logits, where it fits."""
    with np.errstate(divide="ignore", invalid="ignore"):  # W of 0 or negative: no logit, unused
        y = np.log(W)
    use = np.isfinite(y) & (W > TINY_WEIGHT)
    if use.mean() < 0.5:
        return None
    yc = np.where(use, y, 0.0)
    n = use.sum(axis=2, keepdims=True)
    xm = (np.where(use, s, 0).sum(axis=2, keepdims=True) / np.maximum(n, 1))
    ym = yc.sum(axis=2, keepdims=True) / np.maximum(n, 1)
    dx, dy = np.where(use, s - xm, 0), np.where(use, yc - ym, 0)
    a = (dx * dy).sum() / (dx * dx).sum()
    resid = np.abs(dy - a * dx)[use]
    if np.quantile(resid, 0.99) > 1e-2:
        return None
    if abs(a - 1) <= 1e-2:  # near 1: said where the fit is tight enough to tell it from 1
        return near_scale(a, resid, (dx * dx).sum(), d)
    name = "0" if abs(a) <= 1e-3 else \
        next((k for k, f in SLOPES.items() if abs(a / f(d) - 1) <= 1e-2), None) or constant_name(a, d)
    said = f"log W = a * (the true logits) + a constant per row, with a = {a:.4g}"
    if name:
        said += f" = {name}" + (f": {SLOPE_WORDS[name]}" if name in SLOPE_WORDS else "")
    return said + "; look at the scale of the scores and the exponential", dict(logit_factor=float(a), named=name,
                                                                                 look="scale")


NEAR_SCALE = 2e-4  # the least |a - 1| said: a float32 scale is right to 1e-7, float16's to 5e-4


def near_scale(a: float, resid: np.ndarray, spread: float, d: int) -> tuple[str, dict] | None:
    """A factor on the logits within 1% of 1, said where it is over NEAR_SCALE and 30 standard
    errors of the fit away from 1: the scale computed approximately."""
    se = float(np.sqrt((resid ** 2).sum() / max(resid.size - 2, 1) / spread))
    if abs(a - 1) <= max(NEAR_SCALE, 30 * se):
        return None
    said = (f"log W = a * (the true logits) + a constant per row, with a = {a:.6f} (within {se:.1g}): the scores "
            f"are scaled by {a / np.sqrt(d):.7g} where 1/sqrt(d) = {1 / np.sqrt(d):.7g} belongs, {(a - 1) * 100:+.3f}%: "
            "a scale computed approximately (a fast reciprocal square root, a constant written with few digits, a "
            "scale kept in half precision), an error that grows with the scores")
    return said + "; look at the scale of the scores", dict(logit_factor=float(a), look="scale")
