"""A program that passes can still write its output before the device finished: a copy back
queued on a stream and never waited for, a kernel on a stream the copy does not wait on, mapped
memory read with no synchronization. Here the GPU may finish first every time; on the judge's it
may not. So a student's GPU program that passes is run on the race check's small input (at the d
of its smallest passing case) twice as built and twice with the device made slower: fa's launch
layer (the GTX 1080's rules for hw4.cu, the MI210 emulation for hw4.hip) makes each of its first
launches wait DELAY_MS on the launch's stream first (FA_DEVICE_DELAY_MS, src_cuda/launch_log.h).
A program that synchronizes before it writes is unchanged; one that does not writes what was
there before the device finished, the same each time:

  passes here, but with the device made slower (each of its first launches preceded by 100 ms
  of waiting on its stream) it writes 16384 of 16384 values wrong in 2 of 2 runs on B=2, N=256,
  d=32, the same output bit for bit, where as built it is right in 2 of 2: ...

A failing case whose runs again showed a result that depends on timing (SlowerThanHost, a step
on the case) is run SLOWED_RUNS times slowed: where every one fails, bit for bit the same, and
WAITED_RUNS runs with every launch and copy waited for are right, the failure that came and went
is the order of host and device, not a race inside a kernel (a race there does not wait for the
launch; a kernel that reads memory other blocks write can settle slowed, but waiting does not
make it right).

A failing case whose runs again all failed alike (LaunchesWaited) is run WAITED_RUNS times as
built and as many with every launch and asynchronous copy waited for (CUDA_LAUNCH_BLOCKING=1 and
FA_COPIES_WAITED=1, fa's launch layer's: the runtime's own waits for kernels only), by turns: right every
time waited, and wrong and the same every time as built, the host went on before the device
finished (a loaded machine can make an early write fail every run). A race inside a kernel, a
wrong index or a wrong formula stay wrong.
"""
from __future__ import annotations

import dataclasses
import re
import shutil

import numpy as np

from .. import settings
from ..programs import gtx1080, wave64
from ..programs.programs import Program
from .diagnose import quoted, source_lines
from .findings import Finding, Kind
from .race_check import GLOBAL_B, applies as student_gpu_program, check_case
from .reruns import over, run_once
from .steps import Context, Step

DELAY_MS = 100
RUN_TIMEOUT_S = 30.0
SLOWED_RUNS = 3
WAITED_RUNS = 3
SLOWED = f"with the device made slower (each of its first launches preceded by {DELAY_MS} ms of waiting on its stream)"
EARLY = ("it writes its output before the device finished (a copy back that is not waited for, a kernel on a stream "
         "the copy does not wait on, mapped memory read with no synchronization)")
# Where a program orders its host and device, ORDERING_SHOWN lines with the warning: its first two
# asynchronous copies back to the host (the output the host goes on with), a synchronization, then
# the first line of each other kind: an asynchronous copy, a stream or host memory the device writes.
COPY_BACK = r"Memcpy\w*Async\b.*DeviceToHost"
NON_BLOCKING = r"StreamNonBlocking"  # a stream that does not wait for the default stream's work (nor it for its)
ORDERING_LINES = (NON_BLOCKING, COPY_BACK, COPY_BACK, r"[Ss]ynchronize", r"Memcpy\w*Async",
                  r"Stream\w*Create|MallocHost|HostAlloc|MallocManaged")
ORDERING_SHOWN = 3
# Where launches overlap: the first two launches given a stream (a fourth launch parameter), then
# what orders streams (an event recorded or waited on, a synchronization).
STREAM_LAUNCH = r"<<<(?:[^,>]*,){3}\s*\w[^>]*>>>"
OVERLAP_LINES = (STREAM_LAUNCH, STREAM_LAUNCH, r"StreamWaitEvent|EventRecord|[Ss]ynchronize")
OVERLAP = ("launches or copies that overlap where one needs another's result (kernels on streams with no event or "
           "wait between them, a copy on another stream than the kernel that writes its data, the output read "
           "before the device finished); a race inside a kernel does not go away when its launch is waited for")


def with_setting(program: Program, *assignments: str) -> Program:
    """The same build, run with variables set on env's command line (a sandbox passes on no
    variable of fa's own; the command line reaches the program everywhere)."""
    return dataclasses.replace(program, interpreter=(shutil.which("env") or "/usr/bin/env", *assignments,
                                                     *program.interpreter))


def waiting(program: Program) -> tuple[Program, str, str]:
    """The same build with everything it starts waited for, and those words, short and with the
    settings: every launch and every asynchronous copy under fa's launch layer, every launch alone
    without it (nothing there to wait for the copies)."""
    copies = layered(program)
    assignments = settings.launches_waited(copies)
    what = "every launch and copy waited for" if copies else "every launch waited for"
    return with_setting(program, *assignments), what, f"{what} ({' '.join(assignments)})"


def delayed(program: Program) -> Program:
    """The same build, run with the device made slower (FA_DEVICE_DELAY_MS)."""
    return with_setting(program, settings.device_delay(DELAY_MS))


def layered(program: Program) -> bool:
    """Built with fa's launch layer, which the delay needs."""
    source = program.source
    return source is not None and (gtx1080.applies(source) or wave64.emulates(source))


def layered_wrong_trial(ctx: Context, *not_after: Kind) -> bool:
    """A wrong case of a student's build under fa's launch layer, with its trial case, that no step
    has named a cause of, nor found any of `not_after` (kinds whose outputs a variant run would not
    tell apart): where a run of a variant of the build (copies kept, shared memory filled) applies."""
    return ctx.verdict == "WRONG" and student_gpu_program(ctx.program) and layered(ctx.program) and \
        ctx.trial is not None and not ctx.found_cause and not ctx.has(*not_after)


def ordering_lines(ctx: Context, patterns: tuple[str, ...] = ORDERING_LINES) -> str:
    shown = source_lines(ctx.source, patterns, ORDERING_SHOWN) if ctx.source else []
    apart = " (a stream made non-blocking does not wait for the default stream's kernels, nor they for its copies)" \
        if any(re.search(NON_BLOCKING, code) for _, code in shown) else ""
    return f"; lines that order host and device in {ctx.source.name}{apart}: {quoted(shown)}" if shown else ""


def outputs_of(ctx: Context, program: Program, case, runs: int, what: str, counted: bool = True, first: int = 1,
               of: int | None = None) -> list | None:
    """The program's outputs (None where it wrote none of the right size) in `runs` runs on a trial
    case (each said as `what`, counted or not: run first + k of `of`, or of `runs`); None where the
    budget ended first."""
    outputs = []
    for k in range(runs):
        if not ctx.starting(f"{what}, run {first + k} of {of or runs} on {case.label}" if counted
                            else f"{what} on {case.label}"):
            return None
        _, got = run_once(program, case, ctx.work / "slow.out", ctx.launcher, min(RUN_TIMEOUT_S, ctx.budget.left))
        outputs.append(got)
    return outputs


def wrong_in(outputs: list, case, tol: float) -> list[int | None]:
    """Values over the tolerance in each output (None: no output of the right size)."""
    return [None if o is None else int(over(o, case.expected, tol).sum()) for o in outputs]


def alike(outputs: list) -> bool:
    return all(o is not None and np.array_equal(o, outputs[0], equal_nan=True) for o in outputs)


def by_turns(ctx: Context, programs: dict[str, Program], case) -> dict[str, list] | None:
    """WAITED_RUNS runs of each program, by turns (each pair under the same load): their outputs by
    name; None where the budget ended first."""
    outputs: dict[str, list] = {what: [] for what in programs}
    for k in range(WAITED_RUNS):
        for what, program in programs.items():
            got = outputs_of(ctx, program, case, 1, f"{what}, run {k + 1} of {WAITED_RUNS}", counted=False)
            if got is None:
                return None
            outputs[what] += got
    return outputs


def waited_by_turns(ctx: Context, case) -> list[Finding]:
    """A result that depends on timing, run with every launch and copy waited for and as built by
    turns (WAITED_RUNS each): right every time waited and wrong in most runs as built between them,
    launches that overlap; still wrong waited, a race inside a kernel (or memory read unwritten)."""
    waited_for, short, words = waiting(ctx.program)
    outputs = by_turns(ctx, {"as built": ctx.program, short: waited_for}, case)
    if outputs is None:
        return []
    built, waited = wrong_in(outputs["as built"], case, ctx.tol), wrong_in(outputs[short], case, ctx.tol)
    if None in built or None in waited:
        return []
    failed = sum(w > 0 for w in built)
    if any(waited):
        return [Finding(Kind.OBSERVED, [
            f"with {words} it still fails {sum(w > 0 for w in waited)} of {WAITED_RUNS} runs on {case.label}: at "
            "least part of the timing is inside the kernels (a race between threads or blocks, or memory read before "
            "it is written), not only launches that overlap"])]
    if failed < 2:
        return [Finding(Kind.OBSERVED, [
            f"with {words} it is right in {WAITED_RUNS} of {WAITED_RUNS} runs on {case.label}, but as built it "
            f"failed only {failed} of the {WAITED_RUNS} runs between them: no claim"])]
    return [Finding(Kind.MEASURED, [
        f"measured: with {words} it is right in {WAITED_RUNS} of {WAITED_RUNS} runs on {case.label}, and as built, "
        f"run by turns with them, it fails {failed} of {WAITED_RUNS} (wrong values: {', '.join(map(str, built))}): "
        + OVERLAP + ordering_lines(ctx, OVERLAP_LINES)], dict(waited_right=WAITED_RUNS, case=case.label))]


class SlowerThanHost(Step):
    """A failing case whose result depends on timing, run slowed: does it then fail every time,
    the same way, and is it right with every launch and copy waited for?"""

    name = "the device made slower, on the failing case"

    def applies(self, ctx: Context) -> bool:
        return ctx.has(Kind.RACE, Kind.INTERMITTENT) and student_gpu_program(ctx.program) and layered(ctx.program)

    def run(self, ctx: Context) -> list[Finding]:
        case = ctx.trial
        outputs = outputs_of(ctx, delayed(ctx.program), case, SLOWED_RUNS, "the device made slower")
        if outputs is None:
            return []
        wrong = wrong_in(outputs, case, ctx.tol)
        if None in wrong:
            return [Finding(Kind.OBSERVED, [f"{SLOWED} it wrote no output of the right size in {wrong.count(None)} "
                                            f"of {SLOWED_RUNS} runs on {case.label}"])]
        same = alike(outputs)
        said = f"{SLOWED} it fails {sum(w > 0 for w in wrong)} of {SLOWED_RUNS} runs on {case.label}" + \
            (", the same output bit for bit" if same else ", outputs that differ")
        if not (same and all(wrong)):  # said as measured; whether waiting for each launch settles it, by turns
            return [Finding(Kind.OBSERVED, [f"{said} (wrong values: {', '.join(map(str, wrong))})"]),
                    *waited_by_turns(ctx, case)]
        # Slowed and wrong alike is the host's order only where waiting for the device makes it right: a
        # kernel that reads memory another block is writing can settle into one wrong output slowed, too.
        waited_for, short, words = waiting(ctx.program)
        waited = outputs_of(ctx, waited_for, case, WAITED_RUNS, short)
        right = wrong_in(waited, case, ctx.tol) if waited is not None else None
        if right is None or any(w != 0 for w in right):
            shown = "no output" if right is None else f"wrong values: {', '.join(map(str, right))}"
            return [Finding(Kind.OBSERVED, [
                f"{said} ({wrong[0]} values wrong), but with {words} it is not right either ({shown}): not the "
                "order of host and device alone; no claim from it"])]
        return [Finding(Kind.MEASURED, [
            f"measured: {said}, {wrong[0]} of {outputs[0].size} values wrong, where the runs again without it "
            f"(above) depend on timing, and with {short} it is right in {WAITED_RUNS} of "
            f"{WAITED_RUNS}: {EARLY}; a race inside a kernel would not wait for the launch"
            + ordering_lines(ctx)], dict(slow_device_wrong=wrong[0], case=case.label))]


class LaunchesWaited(Step):
    """A failing case whose runs again all failed alike, run as built and with every launch waited
    for, by turns (each pair under the same load): right every time waited, wrong and the same
    every time as built, the host did not wait for the device."""

    name = "every launch and copy waited for, on the failing case"

    def applies(self, ctx: Context) -> bool:
        return ctx.verdict == "WRONG" and student_gpu_program(ctx.program) and ctx.kind != "hip" and \
            not ctx.found_cause and bool(ctx.done)  # ctx.done: the runs again ended without a cause (Rerun)

    def run(self, ctx: Context) -> list[Finding]:
        waited_for, short, words = waiting(ctx.program)
        case, waited = ctx.trial, f"with {words}"
        # one run waited for first: wrong there too, and the pairs by turns would tell nothing more
        first = outputs_of(ctx, waited_for, case, 1, f"{short}, a first run", counted=False)
        if first is None:
            return []
        if any(w != 0 for w in wrong_in(first, case, ctx.tol)):
            ctx.done.append(f"wrong {waited} too")
            return []
        outputs = by_turns(ctx, {"as built": ctx.program, short: waited_for}, case)
        if outputs is None:
            return []
        built = wrong_in(outputs["as built"], case, ctx.tol)
        right = wrong_in(outputs[short], case, ctx.tol)
        if any(w != 0 for w in right):  # None (no output) or wrong: not a matter of waiting
            ctx.done.append(f"wrong {waited} too")
            return []
        if None in built or not all(built) or not alike(outputs["as built"]):
            return [Finding(Kind.OBSERVED, [f"{waited} it is right in {WAITED_RUNS} of {WAITED_RUNS} runs on "
                                            f"{case.label}, but the runs as built between them are not all wrong "
                                            f"alike (wrong values: {', '.join(map(str, built))}): no claim"])]
        return [Finding(Kind.MEASURED, [
            f"measured: {waited} it is right in {WAITED_RUNS} of {WAITED_RUNS} runs on {case.label}, and as built, "
            f"run by turns with them, wrong in every one, the same output bit for bit ({built[0]} values): the host "
            f"goes on before the device finished (a copy back or a read of the output not waited for, a kernel on "
            f"a stream that does not wait for another's)" + ordering_lines(ctx)],
            dict(waited_right=WAITED_RUNS, case=case.label))]


class SlowDevice(Step):
    """A passing build, on the race check's two-batch input (GLOBAL_B x RACE_N x d) at the d of its
    smallest passing case: run once with the device made slower; where that is right, nothing more
    (a class runs this for every passing program: the usual answer takes one run; a build wrong as
    built there and right slowed is not looked at here, a larger input's run is LargerInput's).
    Where it is not: runs as built and one more slowed. Right as built, wrong and the same slowed:
    a warning."""

    name = "the device made slower"
    runs = 2

    def applies(self, ctx: Context) -> bool:
        return student_gpu_program(ctx.program) and layered(ctx.program) and \
            any(r.verdict == "PASS" for r in ctx.results)

    def run(self, ctx: Context) -> list[Finding]:
        d = min((r for r in ctx.results if r.verdict == "PASS"), key=lambda r: r.target.shape.flops).target.shape.d
        left = f"{ctx.budget.left:.0f} s left of fa run --why-budget's {ctx.budget.seconds:g} s"
        if ctx.budget.left < 2:
            return [Finding(Kind.MISSING_TOOL, [f"the device made slower: not run: {left}"])]
        case = check_case(ctx.work, d, B=GLOBAL_B)
        slowed = outputs_of(ctx, delayed(ctx.program), case, 1, "the device made slower", of=self.runs)
        if slowed is not None and wrong_in(slowed, case, ctx.tol) == [0]:
            return []  # right slowed: nothing to tell apart from a run as built
        built = outputs_of(ctx, ctx.program, case, self.runs, "as built") if slowed is not None else None
        more = outputs_of(ctx, delayed(ctx.program), case, self.runs - 1, "the device made slower", first=2,
                          of=self.runs) if built is not None else None
        if more is None:
            return [Finding(Kind.MISSING_TOOL, [f"the device made slower: stopped: {left}"])]
        slowed = slowed + more
        as_built = wrong_in(built, case, ctx.tol)
        right_built = sum(1 for w in as_built if w == 0)
        values = ", ".join("no output" if w is None else str(w) for w in as_built)
        if not right_built:  # wrong as built on an input of the cases' kind: nothing to set slowed against
            wrong_built = (f"as built it is wrong in {self.runs} of {self.runs} runs on {case.label} (wrong values: "
                           f"{values})")
            if not all(r.verdict == "PASS" for r in ctx.results):  # a failing case says more
                return [Finding(Kind.OBSERVED, [f"the device made slower: not tried: {wrong_built}"])]
            return [Finding(Kind.WARNING, [f"passes the cases run, but {wrong_built}; the device made slower: not "
                                           "tried (no run as built right to set against it)"],
                            dict(built_wrong=as_built, case=case.label))]
        wrong = wrong_in(slowed, case, ctx.tol)
        runs = f"in {sum(1 for w in wrong if w)} of {self.runs} runs on {case.label}"
        built_words = f"as built it is right in {right_built} of {self.runs}" + (
            "" if right_built == self.runs else f" (wrong values: {values}: it depends on timing)")
        if None in wrong or not (all(wrong) and alike(slowed)):
            return [Finding(Kind.OBSERVED, [f"{SLOWED} it fails {runs} (wrong values: {wrong}), outputs that differ "
                                            f"or none; {built_words}"])]
        return [Finding(Kind.WARNING, [
            f"passes here, but {SLOWED} it writes {wrong[0]} of {slowed[0].size} values wrong {runs}, the same output "
            f"bit for bit, where {built_words}: {EARLY}; the judge's GPU may be "
            f"that slow{ordering_lines(ctx)}"], dict(slow_device_wrong=wrong[0], case=case.label))]
