"""A case whose values changed between runs, with two batches or more: the first batch that changed
run as the only batch, three times. Right and the same every time alone, the race is where the
batches run together: blocks of different batches that use the same memory (a scratch buffer or
row statistics indexed without the batch, one batch's place reached from another's). Changing alone
too, it is a race within a batch's own blocks."""
from __future__ import annotations

from .findings import Finding, Kind
from .reruns import Reruns, one_batch, run_once
from .steps import Context, Step

ALONE_RUNS = 3


class ChangingBatchAlone(Step):
    name = "the batch that changed between runs, run alone"

    def applies(self, ctx: Context) -> bool:
        return ctx.trial is not None and ctx.trial.shape.B > 1 and bool(changed_batches(ctx))

    def run(self, ctx: Context) -> list[Finding]:
        b = changed_batches(ctx)[0]
        alone = one_batch(ctx.trial, ctx.work, batch=b)
        runs = Reruns(alone, ctx.tol, None, None)
        while runs.reruns < ALONE_RUNS and ctx.starting(f"batch {b} alone, run {runs.reruns + 1} of {ALONE_RUNS}"):
            runs.add(run_once(ctx.program, alone, ctx.work / "alone.out", ctx.launcher, ctx.budget.left)[1])
        if runs.reruns < ALONE_RUNS:
            return []
        right, steady = not any(runs.failed), not runs.changed and not runs.no_output
        where = (f"batch {b} of {ctx.trial.label}, whose values changed between runs there, run as the only batch "
                 f"({alone.label}) {ALONE_RUNS} times")
        if right and steady:
            return [Finding(Kind.MEASURED, [
                f"measured: {where}: right every time, the same bit for bit: the race is where the batches run "
                "together: blocks of different batches that use the same memory (a scratch buffer or row statistics "
                "indexed without the batch, or one batch's place reached from another's); a race within a batch "
                "that shows only with more blocks running fits too"], dict(batch_alone_steady=b))]
        if runs.over or runs.intermittent:
            return [Finding(Kind.OBSERVED, [f"measured: {where}: its values change alone too (failed "
                                            f"{sum(runs.failed)} of {ALONE_RUNS}): a race within a batch's own blocks"])]
        return [Finding(Kind.OBSERVED, [f"measured: {where}: {'right' if right else 'wrong'} every time"
                                        + ("" if steady else ", not bit for bit the same")])]


def changed_batches(ctx: Context) -> list[int]:
    """The batches the reruns saw change past the tolerance (Reruns' race finding), in order."""
    return next((f.fields["batches_differ"] for f in ctx.findings
                 if f.kind == Kind.RACE and f.fields.get("batches_differ")), [])
