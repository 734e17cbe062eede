"""A program that passes can still write its output before the device finished: a copy back
queued on a stream and never waited for, a kernel on a stream the copy does not wait on, mapped
memory read with no synchronization. Here the GPU may finish first every time; on the judge's it
may not. So a student's GPU program that passes is run once more on its smallest passing case
with the device made slower: fa's launch layer (the GTX 1080's rules for hw4.cu, the MI210
emulation for hw4.hip) precedes each of its first launches with DELAY_MS of waiting on the
launch's stream (FA_DEVICE_DELAY_MS, src_cuda/launch_log.h). A program that synchronizes before
it writes is unchanged; one that does not writes what was there before the device finished:

  passes here, but with the device made slower (each of its first 4 launches preceded by 100 ms
  of waiting on its stream) it writes 8192 of 8192 values wrong on t01: ...
"""
from __future__ import annotations

import dataclasses
import shutil

import numpy as np

from .. import settings
from ..cases.format import open_output
from ..programs import gtx1080, programs, wave64
from ..programs.programs import Program
from . import expected
from .diagnose import source_lines
from .findings import Finding, Kind
from .race_check import applies as student_gpu_program
from .steps import Context, Step

DELAY_MS = 100
RUN_TIMEOUT_S = 30.0
# Where a program orders its host and device, the first line of each kind shown with the warning:
# an asynchronous copy, a synchronization, a stream or host memory the device writes.
ORDERING_LINES = (r"Memcpy\w*Async", r"[Ss]ynchronize", r"Stream\w*Create|MallocHost|HostAlloc|MallocManaged")


def delayed(program: Program) -> Program:
    """The same build, run with the device made slower (env FA_DEVICE_DELAY_MS=...: a sandbox
    passes on no variable of fa's own, the command line reaches the program everywhere)."""
    return dataclasses.replace(program, interpreter=(shutil.which("env") or "/usr/bin/env",
                                                     settings.device_delay(DELAY_MS), *program.interpreter))


def layered(program: Program) -> bool:
    """Built with fa's launch layer, which the delay needs."""
    source = program.source
    return source is not None and (gtx1080.applies(source) or wave64.emulates(source))


class SlowDevice(Step):
    """A passing case run again with the device made slower: still right?"""

    name = "the device made slower"

    def applies(self, ctx: Context) -> bool:
        return student_gpu_program(ctx.program) and layered(ctx.program) and \
            any(r.verdict == "PASS" for r in ctx.results)

    def run(self, ctx: Context) -> list[Finding]:
        case = min((r for r in ctx.results if r.verdict == "PASS"), key=lambda r: r.target.shape.flops)
        target = case.target
        if ctx.budget.left < 2:
            return [Finding(Kind.MISSING_TOOL, [f"the device made slower: not run, the {ctx.budget.seconds:g} s of the "
                                                "search for a cause were spent (fa run --why-budget)"])]
        ctx.say(f"the device made slower ({DELAY_MS} ms after each of the first launches) on {target.name}")
        out = ctx.work / "slow.out"
        result = programs.run(delayed(ctx.program), target.input_path, out, ctx.launcher,
                              timeout=min(RUN_TIMEOUT_S, ctx.budget.left), timed=False)
        slowed = f"with the device made slower (each of its first launches preceded by {DELAY_MS} ms of waiting " \
                 "on its stream)"
        if result.timed_out or result.returncode != 0 or not out.exists() or \
                out.stat().st_size != target.shape.output_bytes:
            how = "ran out of time" if result.timed_out else f"exited with {result.returncode}" \
                if result.returncode else "wrote no output of the right size"
            return [Finding(Kind.OBSERVED, [f"{slowed} it {how} on {target.name}"], dict(slow_device=how))]
        got = np.asarray(open_output(out, target.shape), dtype=np.float64)
        err = np.abs(got - expected.output_of(target))
        wrong = int((~(err <= ctx.tol)).sum())
        if not wrong:
            return []
        shown = source_lines(ctx.source, ORDERING_LINES, len(ORDERING_LINES)) if ctx.source else []
        where = f"; lines that order host and device in {ctx.source.name}: " + \
            ", ".join(f"{n} `{c}`" for n, c in shown) if shown else ""
        return [Finding(Kind.WARNING, [
            f"passes here, but {slowed} it writes {wrong} of {err.size} values wrong on {target.name}: it writes its "
            "output before the device finished (a copy back that is not waited for, a kernel on a stream the copy "
            f"does not wait on, mapped memory read with no synchronization); the judge's GPU may be that slow{where}"],
            dict(slow_device_wrong=wrong, case=target.name))]
