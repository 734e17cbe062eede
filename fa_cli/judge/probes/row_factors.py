"""Where W was not read (the budget ended before or during the runs with one-hot V, or the output
held NaN): each wrong row the right row times a factor of its own, read from the probe's output
alone (where W was read, Factors reads the same factor from it). The weights are then the right
ones, and the factor is the right l over the l the program divided by. Named only where one of
factors.wrong_sum's running sums gives that factor, or a sum of the scores themselves
(score_sums.py: a factor of either sign, rows with NaN or inf left out of the reading and said so).
It runs no program: it comes after the readings of W and runs whatever time is left.
"""
from __future__ import annotations

import numpy as np

from ..findings import Finding
from .factors import wrong_sum
from .readings import FIT_SHARE, FLAT, LOOK, measured
from .score_sums import OUTPUT_SUBJECT, signed_factors
from .softmax_steps import STEP_LOOK
from .step import Context, Probe, logits

FIT_ATOL = 1e-4  # a row is f times the right row where every value is within this (and FIT_RTOL of it)
FIT_RTOL = 1e-3


def row_factors(out: np.ndarray, true: np.ndarray) -> np.ndarray | None:
    """f (B, N) with out = f true row by row, where FIT_SHARE of the rows holding numbers fit (f of
    either sign; a row with NaN or inf is no row read) and some row's f is off 1 by more than FLAT;
    None otherwise."""
    out, true = out.astype(np.float64), true.astype(np.float64)
    numbers = np.isfinite(out).all(axis=-1)
    out = np.where(numbers[..., None], out, 0.0)
    norm = (true * true).sum(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        f = (out * true).sum(axis=-1) / norm
        miss = np.abs(out - f[..., None] * true).max(axis=-1)
    fits = numbers & (norm > 0) & (f != 0) & (miss <= FIT_ATOL + FIT_RTOL * np.abs(out).max(axis=-1))
    if not numbers.any() or fits[numbers].mean() < FIT_SHARE or \
            not (np.abs(np.log(np.abs(np.where(fits, f, 1.0)))) > FLAT).any() and not (f[fits] < 0).any():
        return None
    return np.where(fits, f, np.nan)


class RowFactors(Probe):
    """The probe's output as the right rows times a factor a row: which running sum l gives it."""

    name = "each wrong row the right row times a factor of its own"
    measures = False  # no run: it reads the probe's output, whatever time is left

    def applies(self, ctx: Context) -> bool:
        out = ctx.facts.out
        return out is not None and ctx.facts.W is None and ctx.facts.probe_fails and not ctx.facts.named \
            and ctx.probe is not None and bool(np.isfinite(out).any())

    def run(self, ctx: Context) -> list[Finding]:
        f = row_factors(ctx.facts.out, ctx.facts.true)
        if f is None:
            return []
        s = logits(ctx.probe.q, ctx.probe.k)
        total = np.exp(s - s.max(axis=-1, keepdims=True)).sum(axis=-1)
        fit = int(np.isfinite(f).sum())
        nan = ": NaN or inf in some" if not np.isfinite(ctx.facts.out).all() else ": f = 1 there"
        rows = "every row of the output is" if fit == f.size else \
            f"{fit} of {f.size} rows of the output are (the other {f.size - fit} left out of the reading{nan})"
        if (f[np.isfinite(f)] < 0).any():  # no sum of weights: a sum of the scores, or no sum named
            said, fields = signed_factors(f, s, OUTPUT_SUBJECT) or (None, {})
            return measured(ctx, [f"measured on {ctx.probe.label}: {rows} {said}"], look=STEP_LOOK["sum"],
                            **fields) if said else []
        fields = dict(row_factor=[float(np.nanmin(f)), float(np.nanmax(f))])
        if (which := wrong_sum(np.where(np.isnan(f), 1.0, f), s, total, fields)) is None:
            return []
        look = LOOK.get(fields.pop("look", ""), STEP_LOOK["sum"])
        return measured(ctx, [
            f"measured on {ctx.probe.label}: {rows} the right row times a factor of its own (from {np.nanmin(f):.4g} "
            f"to {np.nanmax(f):.4g}): the right weights, divided by another sum (f = the right l / the l it divided "
            f"by): {which}"], look=look, **fields)
