"""The measurements the other steps read: the program's output on the probe input (twice), and
its attention weights W read from runs with one-hot V.

Nearly every attention program computes O = W V with weights W that depend on Q and K only. The
runs with one-hot V (design.onehot_v) read W; W is then checked against the output with the
case's own V: where W V gives that output, W is what the program applied, and the analyses
(readings.py) compare it with the true P = softmax(Q K^T / sqrt(d)).
"""
from __future__ import annotations

import numpy as np

from ...programs import wave64
from ..findings import Finding, Kind
from . import design
from ..steps import Facts
from .step import Context, Probe, fmt, run_many

# W V must give the output with the case's V to within this (float32 programs: about 1e-6).
LINEAR_ATOL = 1e-4
LINEAR_RTOL = 1e-3
MAX_ONEHOT_RUNS = 16  # N / d runs at most (N = 512 at d = 32): beyond it W is read in one run, or not at all
MAX_BATCHED_RUNS = 64  # a GPU program's one-hot V as batches of one run, up to N = 2048 at d = 32
# Two runs that differ by no more than this are one output (the order of atomics or of a reduction's
# terms), read as the first run's: a float32 sum of order 3 changes in its last bits, about 1e-6.
ORDER_CHANGE = 2e-5
GUARD_BATCHES = 1  # written after a probe input whose last batch alone changes between runs (Context.guard)


class ProbeRuns(Probe):
    """The probe input, run twice: is the output the same each time, and does it still fail?"""

    name = "the probe input, run twice"

    def run(self, ctx: Context) -> list[Finding]:
        found = self.measure(ctx)
        shape = ctx.case_shape
        right = []  # right at the small N: the smallest of the larger Ns (up to the case's own) where it is wrong
        for N in design.larger_rows(ctx.probe.shape.N, shape.N) if ctx.facts.probe_right and shape else ():
            right.append(ctx.probe.label)
            ctx.probe = design.from_case(ctx.case_path, shape, ctx.case_label, N)
            ctx.facts = Facts()
            found = self.measure(ctx)
            if not ctx.facts.probe_right:
                found.insert(0, Finding(Kind.OBSERVED, [f"probe: on {' and on '.join(right)} the output is right; on "
                                                        f"{ctx.probe.label} it is wrong: the probes use that"]))
                break
        return found

    def measure(self, ctx: Context) -> list[Finding]:
        inp = ctx.probe
        first, second = ctx.run(inp), ctx.run(inp)
        if first is None and ctx.raw is not None:  # an output of the wrong size: where did its values go?
            ctx.facts.raw, ctx.facts.true = ctx.raw, inp.output()
            written = (inp.shape.B + ctx.guard) * inp.shape.N * inp.shape.d
            return [Finding(Kind.OBSERVED, [f"probe: on {inp.label} the output has {ctx.raw.size} values, "
                                            f"{ctx.raw.size - written:+d} against B*N*d"])]
        if first is None or second is None:
            ctx.facts.no_output = True
            ctx.facts.stop = not wave64.emulates(ctx.source)  # a hw4.hip still gets its 32-lane build
            return [Finding(Kind.OBSERVED, [f"probe: the program wrote no output of the right size on {inp.label}: "
                                            "its weights cannot be read"])]
        true = inp.output()
        ctx.facts.out, ctx.facts.true = first, true
        with np.errstate(invalid="ignore"):  # inf - inf, and NaN where one run wrote NaN and the other not
            changed = ~((first == second) | (np.isnan(first) & np.isnan(second)))
            gap = np.abs(first.astype(np.float64) - second)[changed]
        diff = float(np.nanmax(gap, initial=0.0))
        # the order of atomics: what the weights are read against, within LINEAR_ATOL
        rounding = changed.any() and bool(np.isfinite(gap).all()) and diff <= ORDER_CHANGE
        if changed.any() and not rounding:
            if ctx.guard == 0 and not changed[:-1].any():  # only the last batch: memory past the input?
                ctx.guard = GUARD_BATCHES
                again = self.measure(ctx)
                moved = any("cannot be read as weights" in line for f in again for line in f.lines)
                held = "" if moved else ": with it, two runs agree, and the probes run so"
                return [Finding(Kind.OBSERVED, [
                    f"probe: two runs on {inp.label} differ only in its last batch ({int(changed.sum())} values, up "
                    f"to {fmt(diff)}); run again with a batch of drawn values after the last (what a program that "
                    f"reads past its input would then read), its output left out{held}"])] + again
            ctx.facts.out, ctx.facts.changes = None, True
            ctx.facts.stop = not wave64.emulates(ctx.source)  # a hw4.hip still gets its 32-lane build
            return [Finding(Kind.OBSERVED, [f"probe: two runs on {inp.label} differ in {int(changed.sum())} values "
                                            f"(up to {fmt(diff)}): an output that changes cannot be read as weights"
                                            + (" (with a batch of drawn values after the last too)" if ctx.guard
                                               else "")])]
        err = np.abs(first - true)
        worst = float(np.nanmax(np.where(np.isnan(err), np.inf, err)))
        ctx.facts.probe_fails = worst > ctx.tol
        found = [Finding(Kind.OBSERVED, [f"probe: two runs on {inp.label} differ by at most {fmt(diff)} (the order of "
                                         "floating-point atomics or reductions, far under the weights' check of "
                                         f"{fmt(LINEAR_ATOL)}): the first run's output is read"])] if rounding else []
        if worst <= ctx.tol:
            ctx.facts.stop = ctx.facts.probe_right = True
            return found + [Finding(Kind.OBSERVED, [f"probe: on {inp.label} the output is right (max error "
                                                    f"{fmt(worst)}): what fails in {ctx.case_label} needs more of it "
                                                    "(its N, its B)"])]
        return found


def batched(ctx: Context) -> bool:
    """W read in one run whose batches hold the one-hot Vs (design.onehot_batches): a GPU program
    whose probe needs more runs than MAX_ONEHOT_RUNS (a second of start-up each), up to
    MAX_BATCHED_RUNS; the W V check then also tells batches that meet."""
    return ctx.kind != "cpu" and MAX_ONEHOT_RUNS < design.onehot_runs(ctx.probe.shape) <= MAX_BATCHED_RUNS


class ReadWeights(Probe):
    """W from ceil(N/d) runs with one-hot V; checked: W V gives the output with the case's V."""

    name = "the weights W, read with one-hot V"

    def applies(self, ctx: Context) -> bool:
        runs = design.onehot_runs(ctx.probe.shape)
        return not ctx.facts.named and (runs <= MAX_ONEHOT_RUNS or batched(ctx)) and \
            ctx.facts.out is not None and bool(np.isfinite(ctx.facts.out).all())

    def run(self, ctx: Context) -> list[Finding]:
        inp = ctx.probe
        B, N, d = inp.shape.B, inp.shape.N, inp.shape.d
        W = np.zeros((B, N, N))
        runs = design.onehot_runs(inp.shape)
        one_run = batched(ctx)
        together, apart = run_many(ctx, design.onehot_batches(inp)) if one_run else (None, None)  # B * runs
        if apart:
            return [Finding(Kind.OBSERVED, [f"probe: one-hot V as {B * runs} batches of one run: {apart}"])]
        if one_run and together is None:
            return [Finding(Kind.OBSERVED, [f"probe: no output of the right size with one-hot V as {B * runs} batches "
                                            "of one run: the weights were not read"])]
        for r in range(runs):
            if together is not None:
                got = together.reshape(B, runs, N, d)[:, r]
            elif ctx.budget.left < 2:
                return [Finding(Kind.MISSING_TOOL, [f"probe: out of time after {r} of {runs} runs with one-hot V"])]
            else:
                got = ctx.run(inp.with_v(design.onehot_v(inp.shape, r), f"one-hot V, run {r}"))
            if got is None:
                return [Finding(Kind.OBSERVED, [f"probe: no output of the right size with one-hot V (run {r}): "
                                                "the weights were not read"])]
            keys = r * d + np.arange(d)
            inside = keys < N
            W[:, :, keys[inside]] = got[:, :, inside]
            if not inside.all() and np.abs(got[:, :, ~inside]).max(initial=0) > LINEAR_ATOL:
                ctx.facts.columns_mixed = True  # a column of V with no 1 gave something: not W V
        predicted = np.matmul(W, inp.v.astype(np.float64))
        out = ctx.facts.out.astype(np.float64)
        with np.errstate(invalid="ignore"):
            off = np.abs(predicted - out)
        ok = off <= LINEAR_ATOL + LINEAR_RTOL * np.abs(out)
        ctx.facts.W, ctx.facts.P = W, inp.weights()
        if ok.all() and not ctx.facts.columns_mixed:
            ctx.facts.linear = True
            return []
        share = 1 - ok.mean()
        how = f"{B * runs} batches of one run, each batch of {inp.label} with one-hot V" if together is not None \
            else f"{ctx.runs} runs on {inp.label}"
        return [Finding(Kind.OBSERVED, [
            f"probe: the output is not W V for weights W read with one-hot V ({how}): "
            f"W V misses the output with the case's V in {share:.1%} of the values (by up to {fmt(np.nanmax(off))}): "
            "column c of O depends on other elements of V than column c, or on V's values themselves"
            + (", or the batches of that one run meet (a batch's result depends on the others beside it)"
               if together is not None else "")])]
