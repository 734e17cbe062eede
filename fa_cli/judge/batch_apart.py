"""A case whose values changed between runs, with two batches or more: the first batch that changed
run as the only batch, three times. Right and the same every time alone, its values change only
where other batches run beside it: blocks of different batches that use the same memory (a scratch
buffer or row statistics indexed without the batch, one batch's place reached from another's), or a
race that needs more blocks to show. Changing alone too: a race within the batch's own blocks, or
memory past a buffer's end. Said as observed: the tools after it still look."""
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
            result, got = run_once(ctx.program, alone, ctx.work / "alone.out", ctx.launcher, ctx.budget.left)
            runs.add(got, result.returncode if result else 0)
        where = (f"batch {b} of {ctx.trial.label}, whose values changed between runs there, run as the only batch "
                 f"({alone.label})")
        if runs.reruns < ALONE_RUNS:
            return [Finding(Kind.MISSING_TOOL, [f"{where}: {runs.reruns} of {ALONE_RUNS} runs before the budget was "
                                                "spent: nothing said of them"])]
        where += f" {ALONE_RUNS} times"
        if runs.no_output:
            return [Finding(Kind.OBSERVED, [f"measured: {where}: no output of the right size in {runs.no_output} of "
                                            f"{ALONE_RUNS} runs"])]
        if not any(runs.failed) and not runs.changed:  # kept an observation: the tools after still look
            return [Finding(Kind.OBSERVED, [
                f"measured: {where}: right every time, the same bit for bit: its values change only where other "
                "batches run beside it (blocks of different batches that use the same memory: a scratch buffer or "
                "row statistics indexed without the batch, or one batch's place reached from another's), or with a "
                "race within a batch that shows only with more blocks running"], dict(batch_alone_steady=b))]
        if runs.over or runs.intermittent:
            return [Finding(Kind.OBSERVED, [
                f"measured: {where}: its values change alone too (failed {sum(runs.failed)} of {ALONE_RUNS}): a race "
                "within the batch's own blocks, or memory past a buffer's end read there, whose contents change from "
                "run to run"])]
        return [Finding(Kind.OBSERVED, [f"measured: {where}: {'wrong' if any(runs.failed) else 'right'} every time"
                                        + ("" if not runs.changed else ", within the tolerance, not bit for bit the "
                                           "same")])]


def changed_batches(ctx: Context) -> list[int]:
    """The batches the reruns saw change past the tolerance (Reruns' race finding), in order."""
    return next((f.fields["batches_differ"] for f in ctx.findings
                 if f.kind == Kind.RACE and f.fields.get("batches_differ")), [])
