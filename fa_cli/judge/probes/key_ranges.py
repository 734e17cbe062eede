"""Keys weighed by range: every row of the measured W weighs the keys of one range of N/S only,
said with the range as a formula of the row where one fits (a split over the keys whose partial
results are merged from other places than they were written at)."""
from __future__ import annotations

import numpy as np

from ..findings import Finding, Kind
from .readings import ZERO, WeightReading, measured
from .step import Context


RANGE_FORMULAS = (  # the key range a row weighs, from its row r in its batch b of N rows (S ranges of N/S keys)
    ("r mod {S}", lambda b, r, N, S: r % S),
    ("(b N + r) mod {S}", lambda b, r, N, S: (b * N + r) % S),
    ("r div {L}, the row's own range", lambda b, r, N, S: r // (N // S)),
)


class OneKeyRangeARow(WeightReading):
    """Every row weighs the keys of one range of N/S only (S = 2..16 ranges; its weights there
    whatever they are): said with the range as a formula of the row, where one fits (the range
    r mod S: a split over the keys whose partial results are merged from other places)."""

    name = "one range of keys a row"

    def applies(self, ctx: Context) -> bool:
        """Which keys' V rows reach a row at all holds whether or not the output is W V (a combine
        that mixes rows of other batches is not): read wherever W was."""
        return ctx.facts.W is not None and not ctx.facts.named

    def run(self, ctx: Context) -> list[Finding]:
        W, N = ctx.facts.W, ctx.probe.shape.N
        B = W.shape[0]
        for S in (s for s in (16, 8, 4, 2) if N % s == 0 and N // s >= 2):  # the finest ranges that hold
            weighed = (np.abs(W) > ZERO).reshape(B, N, S, N // S)
            ranges = weighed.any(axis=3)
            if not (ranges.sum(axis=2) == 1).all():
                continue
            taken = ranges.argmax(axis=2)  # (B, N): the one range each row weighs
            if np.take_along_axis(weighed, taken[..., None, None], axis=2).mean() < 0.5:
                return []  # a few keys a row (one key: the output a row of V), not a range of keys weighed
            b, r = np.meshgrid(np.arange(B), np.arange(N), indexing="ij")
            formula = next((f.format(S=S, L=N // S) for f, rule in RANGE_FORMULAS
                            if np.array_equal(rule(b, r, N, S), taken)), None)
            said = f"measured: each row weighs the keys of one range of {N // S} of the {S} ranges of N = {N} only" + \
                ("" if ctx.facts.linear else " (W read with one-hot V, though the output is not W V)")
            if formula is None:
                rows = ", ".join(f"row {i}: range {int(x)}" for i, x in enumerate(taken[0, :4]))
                return [Finding(Kind.OBSERVED, [f"{said} ({rows}, ...), by no formula fa tried"],
                                dict(key_range_a_row=S))]
            if formula.endswith("own range"):
                return measured(ctx, [f"{said}, its own (row r: the keys of range r div {N // S}): a loop over the "
                                      "keys that visits only the row's own tile"], key_range_a_row=S)
            return measured(ctx, [f"{said}, the range {formula}, and none outside it: as where a split over the keys "
                                  "has its partial results merged from other places than they were written at (the "
                                  "combine's index of a row's partial, [split][row] against [row][split])"],
                            ("the partials' index", r"\bsplit|SPLIT|partial|\bpart\b"), key_range_a_row=S)
        return []
