"""One investigation: every way fa looks for why a program fails (or may fail), as steps of one
interface (steps.Step) in one ordered table, within one time budget (docs/diagnosis.md shows the
table; a test ties it to this code).

CASE_STEPS run on each failing case looked into (the most telling first: an ERROR, then a WRONG,
each once while the budget lasts); RUN_STEPS then run once on the run's program. A step runs
where it applies, judged from what the steps before it found (the Context): the catalogue's lead
is a hypothesis the later steps may refine, never a gate; the tools stand aside once a cause is
found; the probes measure a wrong answer that nothing before them explained.

Adding a step: a Step subclass in the module of its kind, and a row of the table here.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from .. import locations
from ..cases import suite
from ..cases.format import Shape
from ..cases.suite import Target
from ..programs import wave64
from ..programs.programs import Launcher, Program
from . import expected, probes, race_check, step_times
from .slow_device import LaunchesWaited, SlowDevice, SlowerThanHost
from .error_size import ErrorOfAPass
from .launch_errors import KernelFault
from .leaving_early import LeftBeforeBarrier
from .refused_input import RefusedInput, RightBeforeExit
from .event_wait import TimeReadEarly
from .freed_early import FreedBeforeUse
from .launch_source import LaunchAsWritten
from .warp_lanes import WarpLanes
from .shared_poison import UnwrittenShared
from .copied_back import CopiedBack
from .across_cases import across_cases, narrow_leads
from .batch_coverage import BatchesCovered
from .larger_input import LargerInput, correct_output
from .batch_apart import ChangingBatchAlone
from .cause import (AmdTools, HostCrash, Memcheck, NoGpuHere, NothingMore, Racecheck, Rerun, SandboxLimit,
                    SyncInitcheck)
from .diagnose import Diagnosis, signal_name
from .findings import Finding, Kind
from .reruns import TrialCase
from .steps import Context, Step
from .tool_logs import Budget, CRASH_SIGNALS, gpu_kind

BUDGET_S = 60.0  # fa run --why-budget's default: the whole investigation of a run
MIN_STEP_S = 1.0  # a probe is started only with this much of the budget left
FIRST = ("ERROR", "WRONG")  # the kinds of failure investigated, each once, in this order: a crash says most
MIN_SECOND_S = 5.0  # a second kind is investigated only with this much of the budget left


class Catalogue(Step):
    """What the quick look (mistakes.py, in the case's diagnosis) said the output looks like: kept
    as the lead the measuring steps may refine, said already under the case."""

    name = "the catalogue's lead"

    def applies(self, ctx: Context) -> bool:
        return bool(ctx.hypothesis)

    def run(self, ctx: Context) -> list[Finding]:
        return [Finding(Kind.HYPOTHESIS, [], dict(looks_like=ctx.hypothesis))]


class MI210Hints(Step):
    """A hw4.hip run through the MI210 emulation: the AMD-only patterns of its source where it failed;
    where it passed, those the emulation cannot show (a mask shifted by a full wavefront's 64)."""

    name = "the MI210's patterns in the source"

    def applies(self, ctx: Context) -> bool:
        return wave64.emulates(ctx.source) and bool(ctx.results)

    def run(self, ctx: Context) -> list[Finding]:
        if all(r.ok for r in ctx.results):
            return [Finding(Kind.WARNING, [f"passes here, but {hint}"], dict(source_hint=hint))
                    for hint in wave64.source_hints(ctx.source, (wave64.FULL_MASK,))]
        return [Finding(Kind.HYPOTHESIS, [f"looks like (MI210 only): {hint}"], dict(source_hint=hint))
                for hint in wave64.source_hints(ctx.source)]


class AcrossCases(Step):
    """What the verdicts say together: a 32-bit size, a split by N or d; cases to run next only
    where every failure is a wrong answer and nothing was named (a mistake, a race or a crash
    says more)."""

    name = "the cases together"

    def run(self, ctx: Context) -> list[Finding]:
        results = ctx.results
        passed = [r.target.shape for r in results if r.verdict == "PASS"]
        failed = [r.target.shape for r in results if r.verdict in ("WRONG", "ERROR")]
        wrong = [r.target.shape for r in results if r.verdict == "WRONG"]
        named = ctx.found_cause or ctx.has(Kind.HYPOTHESIS) or any(
            r.diagnosis and r.diagnosis.fields.get("looks_like") for r in results)
        found = across_cases(passed, failed, suite.cases("c"), suggest=len(wrong) == len(failed) and not named)
        return [Finding(f.kind, ["across the cases: " + " ".join(f.lines)], f.fields) for f in found]


class LargerLookedInto(Step):
    """A program that passed every case run and was wrong on LargerInput's drawn input, or failed
    on it (every value to be checked; a crash however checked: the debugger needs no reference):
    that input looked into as a failing case (CASE_STEPS), with what the budget has left; what
    they found said as the larger input's."""

    name = "the larger input, looked into as a failing case"

    @staticmethod
    def warned(ctx: Context) -> Finding | None:
        kept = (f for f in ctx.findings if f.fields.get("larger_input"))
        return next((f for f in kept if Path(f.fields["larger_input"]).exists()), None)

    def applies(self, ctx: Context) -> bool:
        return bool(ctx.results) and all(r.verdict == "PASS" for r in ctx.results) and \
            self.warned(ctx) is not None and ctx.budget.left >= MIN_SECOND_S

    def run(self, ctx: Context) -> list[Finding]:
        warned = self.warned(ctx)
        path, shape = Path(warned.fields["larger_input"]), Shape(*warned.fields["larger_shape"])
        target = Target(LARGER_LABEL, path, shape, None)
        failed = warned.fields.get("larger_failed", 0)
        signal = signal_name(failed) if failed else None
        case = Context(ctx.program, ctx.launcher, ctx.work, ctx.budget, ctx.say, ctx.tol, None, LARGER_LABEL,
                       case_path=path, case_shape=shape, kind=ctx.kind, target=target,
                       verdict="ERROR" if failed else "WRONG", signal=signal, judged_run=False,
                       launcher_says=warned.fields.get("larger_launcher_says"),
                       run_stderr=warned.fields.get("larger_stderr", ""),
                       correct=None if failed else correct_output(path, shape, None))  # a failed run: no reference
        return [Finding(f.kind, [f"{LARGER_LABEL} (the drawn {shape} input), looked into: {'; '.join(f.lines)}"],
                        f.fields) for f in case_steps(case) if f.lines]


LARGER_LABEL = "larger.in"  # as the larger input's warning names it (its fa gen command writes that file)


# The table: what is looked at, in order. The probes' own order is probes.PROBES.
CASE_STEPS: tuple[Step, ...] = (
    Catalogue(), NoGpuHere(), SandboxLimit(), RightBeforeExit(), RefusedInput(), FreedBeforeUse(), TimeReadEarly(),
    LaunchAsWritten(),
    WarpLanes(), HostCrash(), KernelFault(), Rerun(), SlowerThanHost(), ChangingBatchAlone(), LaunchesWaited(),
    Racecheck(first=True), Memcheck(), Racecheck(first=False),  # hw4.cu
    LeftBeforeBarrier(), CopiedBack(), UnwrittenShared(), *probes.PROBES, SyncInitcheck(),
    Racecheck(first=True, emulated=True), Memcheck(emulated=True), Racecheck(first=False, emulated=True),  # hw4.hip
    SyncInitcheck(emulated=True),
    AmdTools(), NothingMore())
RUN_STEPS: tuple[Step, ...] = (MI210Hints(), BatchesCovered(), AcrossCases(), ErrorOfAPass(), SlowDevice(),
                               race_check.PassingBuild(), LargerInput(), LargerLookedInto())


def probing(ctx: Context) -> bool:
    """The probes measure a wrong answer or an output of the wrong size that no rerun, sanitizer or
    crash explains, until one names a mechanism or nothing is left to measure. Runs that only showed
    a result that depends on timing explain nothing by themselves (a program that reads past its
    input reads what its own blocks are writing), nor does racecheck's warning level (lanes of a
    warp that rely on running in step, often harmless), nor a racecheck hazard in a program whose
    runs were the same every time: it names two lines, not what the output is made of (a double
    buffer's other half read: set46's s01): the probes still measure."""
    steady = not ctx.has(Kind.RACE, Kind.INTERMITTENT)
    unexplained = all(f.kind in (Kind.RACE, Kind.INTERMITTENT) or f.fields.get("warning_level") or
                      (f.kind is Kind.RACECHECK and steady) for f in ctx.findings if f.is_cause)
    return ctx.verdict in ("WRONG", "ERROR") and ctx.signal not in CRASH_SIGNALS and not ctx.facts.stop and \
        (ctx.facts.named or unexplained)


def take(steps: tuple[Step, ...], ctx: Context) -> list[Finding]:
    """Each step that applies, in order, within the budget; what it found added to ctx.findings."""
    for step in steps:
        if ctx.ended:
            break
        if step.measures:
            if not probing(ctx):
                continue
            if ctx.probe is None:
                ctx.probe = probes.design.from_case(ctx.case_path, ctx.case_shape, ctx.case_label)
        if not step.applies(ctx):
            continue
        if step.measures:
            if ctx.budget.left < MIN_STEP_S:
                ctx.findings.append(Finding(Kind.MISSING_TOOL, [f"probe: out of time before {step.name}"]))
                ctx.facts.stop = True
                continue
            ctx.say(f"why {ctx.case_label}: probe: {step.name} ({ctx.budget.used:.0f} s of {ctx.budget.seconds:g} s)")
        try:
            with step_times.timed(step.name, lambda: ctx.budget.used, case=ctx.case_label,
                                  left_s=round(ctx.budget.left, 1)):
                found = step.run(ctx)
            if getattr(step, "from_right_scores", False) and any(f.kind is Kind.MEASURED for f in found):
                ctx.findings[:] = [f for f in ctx.findings if not f.fields.get("scores_read_otherwise")]
            ctx.findings += found
        except Exception as e:  # fa's own fault: said as such, the verdict and the other steps stand
            if not step.measures:
                raise
            ctx.findings.append(Finding(Kind.MISSING_TOOL, [f"probe: {step.name} stopped on an error of fa's own "
                                                            f"({type(e).__name__}: {e}); the other steps went on"]))
    return ctx.findings


def investigate(case, tol: float, launcher: Launcher | None, say: Callable[[str], None], budget: Budget,
                work: Path) -> list[Finding]:
    """CASE_STEPS on one case's result (verdict.CaseResult), with what the budget has left."""
    target, program = case.target, case.program
    correct = expected.output_of(target)
    ctx = Context(program, launcher, work, budget, say, tol, None, target.name, case_path=target.input_path,
                  case_shape=target.shape, kind=gpu_kind(program), target=target, verdict=case.verdict,
                  signal=signal_name(case.run.returncode), launcher_says=case.run.launcher_says, judged=case.judged,
                  run_stderr=case.run.stderr or "", correct=correct,
                  right_before_exit=bool(case.diagnosis and case.diagnosis.fields.get("right_before_exit")),
                  hypothesis=list(case.diagnosis.fields.get("looks_like", [])) if case.diagnosis else [],
                  pattern=dict(case.diagnosis.fields.get("pattern") or {}) if case.diagnosis else {})
    return case_steps(ctx)


def case_steps(ctx: Context) -> list[Finding]:
    """CASE_STEPS on the case of ctx (its target and correct output), the tools on the whole case."""
    ctx.whole = TrialCase(ctx.case_label, ctx.case_path, ctx.case_shape, ctx.correct)
    ctx.trial = ctx.whole
    return take(CASE_STEPS, ctx)


NAN_FIRST_WORK = 64  # a case with NaN is looked into first where its work is at most this many times the least


def smallest_failure(results: list) -> object | None:
    """The failing case (WRONG or ERROR) most telling and with the least work: a wrong output that holds
    NaN or inf before one that does not (a division by zero or an overflow says more than a small error,
    and the NaN probes read it), and one of values before one of zeros (zeros weigh nothing: a
    program whose output is 0 at some N and not at another shows its weights at the other), each
    where its work is within NAN_FIRST_WORK of the least, then the least work (where the tools are
    fastest)."""
    failed = [r for r in results if r.verdict in ("WRONG", "ERROR")]
    if not failed:
        return None
    least = min(r.target.shape.flops for r in failed)
    near = lambda r: r.target.shape.flops <= NAN_FIRST_WORK * least
    return min(failed, key=lambda r: (not (holds_nonfinite(r) and near(r)), all_zeros(r) or not near(r),
                                      r.target.shape.flops, r.target.shape.input_bytes))


def all_zeros(result) -> bool:
    """Whether a judged case's output read as all zeros (the catalogue's lead)."""
    return bool(result.diagnosis is not None and "all zeros" in result.diagnosis.fields.get("looks_like", []))


def holds_nonfinite(result) -> bool:
    """Whether a judged case's output held NaN or inf, as its where-and-how-much diagnosis counted."""
    return bool(result.diagnosis is not None and result.diagnosis.fields.get("nonfinite"))


def explain(results: list, options, say: Callable[[str], None], budget_s: float = BUDGET_S,
            chosen: object | None = None, program: Program | None = None, race_check_too: bool = True,
            why: str | None = None) -> list[Finding]:
    """The whole investigation of a run, within budget_s seconds: `chosen` (whatever its verdict),
    else the smallest case of each kind of failure, the most telling first, each with what the
    budget has left, its findings added to the case's diagnosis; then RUN_STEPS on the program.
    Returns what the run's steps found."""
    budget = Budget(budget_s)
    all_found: list[Finding] = []
    narrow_leads(results)  # the catalogue's leads that fit every failing case, before any case is looked into
    with locations.scratch("why", options.output_dir) as tmp:
        looked = []
        for case in [chosen] if chosen else [smallest_failure([r for r in results if r.verdict == v]) for v in FIRST]:
            if case is None or case.verdict == "TLE" or (budget.left <= 0 and not looked):
                continue
            if looked and budget.left < MIN_SECOND_S:  # said, so that no one reads its silence as nothing found
                found = [Finding(Kind.MISSING_TOOL, [
                    f"not looked into: {budget.left:.1f} s of the {budget_s:g} s were left after {looked[0]}'s "
                    f"{looked[1]}, under the {MIN_SECOND_S:g} s a second case takes (fa run {case.target.name} --why "
                    f"{case.target.name} looks into this one)"])]
            else:
                found = investigate(case, options.tol, options.launcher, say, budget, Path(tmp))
                looked = [case.target.name, case.verdict]
            attach(case, found)
            all_found += found
        if program is None:
            return []
        ctx = Context(program, options.launcher, Path(tmp), budget, say, options.tol, None, why or "",
                      kind=gpu_kind(program), results=results, findings=list(all_found))
        steps = tuple(s for s in RUN_STEPS if race_check_too or not isinstance(s, race_check.PassingBuild))
        return take(steps, ctx)[len(all_found):]


def attach(case, found: list[Finding]) -> None:
    """A case's findings, as lines under its diagnosis and as fields of its record."""
    if case.diagnosis is None:
        case.diagnosis = Diagnosis([], {})
    for f in found:
        case.diagnosis.lines += f.lines
    case.diagnosis.fields["causes"] = [dict(kind=f.kind, lines=f.lines, **f.fields) for f in found]
