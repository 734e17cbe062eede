"""Which batches' inputs a batch's output depends on: the probe run again with one batch's Q, K or
V drawn anew (the first batch's, then the last's), each in a run of its own. A right program
changes that batch's output only; where another batch's output moves too, that batch reads the
changed batch's input where its own belongs (a batch offset, or buffers that overlap: one written
past its size into the next, as a plane pitched wider than it was sized for) or carries a state
from it. Said as observed: the steps after it still look for the mechanism."""
from __future__ import annotations

import numpy as np

from ..findings import Finding, Kind
from .step import Context, Probe, ProbeInput, spans

MOVED = 1e-4  # an output value that changes by more than this moved (atomics' rounding stays far under it)
DRAW_SEED = 11


def redrawn(inp: ProbeInput, tensor: str, b: int) -> ProbeInput:
    """The probe with batch b's `tensor` (q, k or v) drawn anew, uniform in [-3, 3]."""
    arrays = {"q": inp.q, "k": inp.k, "v": inp.v}
    changed = np.array(arrays[tensor], dtype=np.float32, copy=True)
    changed[b] = np.random.default_rng(DRAW_SEED + b).uniform(-3, 3, size=changed.shape[1:])
    arrays[tensor] = changed
    label = f"{inp.label} with batch {b}'s {tensor.upper()} drawn anew"
    return ProbeInput(arrays["q"], arrays["k"], arrays["v"], label)


def moved_batches(got: np.ndarray, base: np.ndarray) -> np.ndarray:
    """The batches whose output moved (NaN against a number counts; NaN against NaN, and an infinity
    against the same infinity, do not: inf - inf is NaN)."""
    with np.errstate(invalid="ignore"):
        same = (got == base) | (np.abs(got - base) <= MOVED) | (np.isnan(got) & np.isnan(base))
    return np.flatnonzero(~same.all(axis=(1, 2)))


class InputsAcrossBatches(Probe):
    """Batch 0's and the last batch's Q, K and V drawn anew in turn: which other batches move."""

    name = "each batch's inputs changed in turn"

    def applies(self, ctx: Context) -> bool:
        return not ctx.facts.named and not ctx.facts.changes and ctx.facts.out is not None and \
            ctx.probe.shape.B >= 2 and ctx.facts.wrong_batches is not None and len(ctx.facts.wrong_batches) > 0

    def run(self, ctx: Context) -> list[Finding]:
        B = ctx.probe.shape.B
        found, tried = [], 0
        for b in sorted({0, B - 1}):
            for tensor in ("q", "k", "v"):
                got = ctx.run(redrawn(ctx.probe, tensor, b))
                if got is None:
                    continue
                tried += 1
                others = [c for c in moved_batches(got, ctx.facts.out) if c != b]
                if others:
                    found.append((b, tensor.upper(), others))
        if not found:
            return [Finding(Kind.OBSERVED, [f"measured: batch 0's and batch {B - 1}'s Q, K and V drawn anew in turn "
                                            f"({tried} runs on {ctx.probe.label}) move no other batch's output"])] \
                if tried else []
        said = "; ".join(f"batch {b}'s {t} drawn anew moves the output of batch{'es' if len(o) > 1 else ''} "
                         f"{spans(np.array(o))}" for b, t, o in found)
        return [Finding(Kind.OBSERVED, [
            f"measured: {said} (each in a run of its own on {ctx.probe.label}): what those batches compute depends on "
            "another batch's input: they read it where their own belongs (a batch offset or stride, or buffers that "
            "overlap: one written past its size into the next, as a plane or copy pitched or counted wider than it "
            "was sized for), or a state is carried from one batch's work to the next (a tile buffer or its index not "
            "set anew where a batch begins)"],
            dict(inputs_across_batches=[[b, t, [int(c) for c in o]] for b, t, o in found]))]
