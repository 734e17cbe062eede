"""The steps of an investigation that run the program again or under a tool, as a TA would
(investigation.py puts them in order with the others):

  NoGpuHere     a GPU program run where its GPU is not: said once, nothing else to try.
  SandboxLimit  a run the sandbox ended at one of its limits: said once, as the sandbox saw it.
  HostCrash     a program killed by SIGSEGV, SIGABRT, SIGBUS or SIGFPE: the debugger's backtrace;
                with the source (--program hw4.cu), a rebuild with -g -lineinfo and
                AddressSanitizer on the host code, whose report names the line.
  Rerun         run again (up to MAX_RUNS runs in all, the judged one counted): each run checked
                against the correct output and against the judged output, the runs against each
                other. A failure that does not come back is named intermittent ("failed k of n
                runs"); values that differ between runs by more than the tolerance are a race (how
                many, how far); differences far below it (the order of floating-point atomics or
                reductions) are named harmless, never the cause of a failure.
  Racecheck     compute-sanitizer's first shared-memory hazard: first of all (before memcheck)
                where the runs showed a result that depends on timing, else for a wrong answer
                memcheck does not explain; on one batch cut to its first RACECHECK_ROWS rows (a race
                in a kernel shows on any input it runs), then on the whole batch.
  Memcheck      compute-sanitizer's first error (misaligned or out-of-bounds access, a launch that
                could not start) for a GPU program that wrote wrong values or failed. For a
                hw4.hip on the MI210 emulation, Racecheck and Memcheck come after the probes.
  SyncInitcheck synccheck and initcheck side by side, after the probes, where nothing above named
                a cause: a barrier not every thread reaches, memory read before it was written.
  AmdTools      hw4.hip built for AMD: the tools that would tell, on the AMD node.
  NothingMore   what ran and found nothing, said as observations, never an all-clear.

A large case is tried on a copy of its first batches first (same N and d), where the tools are
fast; where that copy passes, the whole case is used. A tool that is not installed is named with
what it would tell. The runs again are reruns.py; what the tools print is read in tool_logs.py.
"""
from __future__ import annotations

import re
from pathlib import Path

from ..programs import programs, sandbox, wave64
from ..programs.devices import list_devices
from ..programs.programs import Program
from .findings import Finding, Kind
from .reruns import (MAX_RUNS, RACECHECK_ROWS, RERUNS_AFTER_EVIDENCE, RERUN_SHARE, Reruns, TrialCase, one_batch,
                     reduced_copy, run_once)
from .report_readings import address_readings, global_past_end, shared_past_end, unwritten_output
from .steps import Context, Step
from .tool_logs import (BACKTRACE_FRAMES, CRASH_SIGNALS, DEBUGGER_TAIL, LAYER_ONLY_SHOWN, NO_CUDA_CALL_SAID,
                        TOOL_WORDS, SanitizerReport, asan_report, backtrace, caught_in, debugger_exit, find_tool,
                        frame_text, is_own_frame, is_system_frame, run_captured, sanitize_side_by_side, sanitizer_lines)


def crashed(ctx: Context) -> bool:
    return ctx.signal in CRASH_SIGNALS


class NoGpuHere(Step):
    """A GPU program run where its GPU is not (fa run --without-gpu): said once, as what the
    machine explains, with no rerun and no tool, which cannot change it."""

    name = "the program's GPU, here"

    def applies(self, ctx: Context) -> bool:
        vendor = {"cuda": "nvidia", "hip": "amd"}.get(ctx.kind)
        return not crashed(ctx) and ctx.launcher is None and vendor is not None and \
            not any(d.vendor == vendor for d in list_devices())

    def run(self, ctx: Context) -> list[Finding]:
        ctx.ended = True
        vendor = {"cuda": "nvidia", "hip": "amd"}[ctx.kind]
        return [Finding(Kind.OBSERVED, [
            f"this machine has no {'NVIDIA' if vendor == 'nvidia' else 'AMD'} GPU: the program's first GPU call "
            "fails here whatever its code does (its stderr above says how); no rerun or tool can change that: run "
            "it where such a GPU is"], dict(no_gpu=vendor))]


class SandboxLimit(Step):
    """A run the sandbox ended at one of its limits (processes, files, bytes written, a file's size,
    CPU time): said once, as the sandbox saw it; every run again would end there the same."""

    name = "the sandbox's limits"

    def applies(self, ctx: Context) -> bool:
        return (ctx.launcher_says or "").startswith(sandbox.KILLED)

    def run(self, ctx: Context) -> list[Finding]:
        ctx.ended = True
        return [Finding(Kind.LIMIT, [
            f"the sandbox ended the run: {ctx.launcher_says[len(sandbox.KILLED):]}; a program past the sandbox's "
            "limits is stopped there whatever it computes, so no rerun, tool or probe was tried"])]


class Rerun(Step):
    """Run again on the trial case: every run checked against the correct output, against the
    judged output and against the others (Reruns), up to MAX_RUNS runs while they all agree."""

    name = "runs again"

    def applies(self, ctx: Context) -> bool:
        return not crashed(ctx) and ctx.correct is not None  # none: a failed run on a drawn input, unchecked

    def run(self, ctx: Context) -> list[Finding]:
        whole = ctx.whole
        case = reduced_copy(ctx.target, ctx.work, ctx.correct) or whole
        judged_failed = judged_failed_on(ctx, case)
        if judged_failed is False:  # the copy of the first batches holds none of the wrong values
            ctx.say(f"why {ctx.case_label}: the judged output is right in {case.label}; the runs use the whole case")
            case, judged_failed = whole, judged_failed_on(ctx, whole)
        runs = Reruns(case, ctx.tol, ctx.judged, judged_failed)
        since, share = ctx.budget.used, ctx.budget.left * RERUN_SHARE  # this case's share of what is left
        while runs.count < MAX_RUNS:
            enough = runs.evidence and runs.reruns >= RERUNS_AFTER_EVIDENCE
            if runs.reruns >= 2 and (enough or ctx.budget.used - since > share):
                break
            up_to = MAX_RUNS - runs.count + runs.reruns
            if not ctx.starting(f"rerun {runs.reruns + 1} (of up to {up_to}) on {case.label}"):
                break
            result, got = run_once(ctx.program, case, ctx.work / "rerun.out", ctx.launcher, ctx.budget.left)
            status = result.returncode if result else 0
            if not runs.reruns and judged_failed is None and case is not whole and runs.passes(got, status):
                # nothing known of where the judged run failed, and the copy passes: the whole case
                ctx.say(f"why {ctx.case_label}: {case.label} passes; the runs use the whole case")
                case, runs = whole, Reruns(whole, ctx.tol, ctx.judged, judged_failed_on(ctx, whole))
                continue
            runs.add(got, status)
        ctx.trial = case
        found = runs.findings(ctx.kind)
        if not found:
            ctx.done.append(runs.agreement())
        return found


def judged_failed_on(ctx: Context, case: TrialCase) -> bool | None:
    """Whether the judged run failed on this trial case: True for the whole case (its verdict),
    from the judged output's wrong batches for a copy of the first batches, None if unknown."""
    if not ctx.judged_run:
        return None
    if case is ctx.whole:
        return ctx.verdict in ("WRONG", "ERROR")
    return ctx.judged.failed_within(case.shape.B) if ctx.judged else None


def timing_shown(ctx: Context) -> bool:
    """The runs showed a result that depends on timing: a race, a failure that comes and goes."""
    return ctx.has(Kind.RACE, Kind.INTERMITTENT)


NOT_THE_PROGRAMS = ("with no source line: not said as the program's, since on the MI210 emulation a wavefront's two "
                    "warps also meet through shared memory, in the emulation's own code within the same kernel")


def emulations_own(said: SanitizerReport, placed_in: str | None) -> bool:
    """A racecheck hazard on the MI210 emulation with no line in the student's file (placed_in): the
    emulation's own exchange between a wavefront's two warps, inlined in the student's kernel."""
    return bool(placed_in) and said.tool == "racecheck" and bool(said.first) and \
        not re.search(re.escape(placed_in) + r":\d+", " ".join(said.first))


class Sanitizer(Step):
    """compute-sanitizer on a CUDA program's trial case; its first report, with lines where fa
    rebuilt the program with -lineinfo. A hw4.hip on the MI210 emulation (built by nvcc) gets its
    rows after the probes (emulated=True): the 32-lane experiment says more of a port than the
    sanitizers of its emulation, whose own exchanges between its two warps are not the student's."""

    tool = "memcheck"

    def __init__(self, emulated: bool = False):
        self.emulated = emulated

    @property
    def name(self) -> str:
        return f"compute-sanitizer --tool {self.tool}"

    def on_this_program(self, ctx: Context, after_a_mechanism: bool = False) -> bool:
        """A CUDA build not crashed: before the probes for hw4.cu, after them (and only where they
        measured no mechanism, unless after_a_mechanism) for hw4.hip on the emulation."""
        if ctx.kind != "cuda" or crashed(ctx) or wave64.emulates(ctx.source) != self.emulated:
            return False
        return after_a_mechanism or not (self.emulated and ctx.has(Kind.MEASURED))

    tools: tuple[str, ...] = ()  # several tools side by side, where a step runs more than self.tool

    def sanitize(self, ctx: Context, case: TrialCase) -> bool:
        """Each tool's first report as a finding; True where none found anything (or could not run)."""
        tools = self.tools or (self.tool,)
        if find_tool("compute-sanitizer") is None:
            ctx.findings.append(Finding(Kind.MISSING_TOOL, [
                f"compute-sanitizer is not installed: `compute-sanitizer --tool {tool} {ctx.program.path} INPUT "
                f"OUTPUT` would name {TOOL_WORDS[tool]}" for tool in tools]))
            return True
        if not ctx.starting(f"compute-sanitizer --tool {', '.join(tools)} on {case.label}"):
            ctx.findings.append(Finding(Kind.MISSING_TOOL, [
                f"{', '.join(tools)} not run on {case.label}: fa run --why-budget's {ctx.budget.seconds:g} s were "
                f"spent before it (it looks for {' or '.join(TOOL_WORDS[tool] for tool in tools)})"]))
            return True
        reports = sanitize_side_by_side(tools, with_lines(ctx.program).argv, case.input_path, ctx.work,
                                        ctx.budget.left, ctx.on_node)
        placed_in = ctx.source.name if self.emulated and ctx.source else None
        return all([self.told(ctx, case, said, placed_in) for said in reports])

    @staticmethod
    def told(ctx: Context, case: TrialCase, said: SanitizerReport, placed_in: str | None = None) -> bool:
        """One tool's report added to what the case's steps found; True where it found nothing.
        placed_in: on the MI210 emulation, the student's file (emulations_own)."""
        tool = said.tool
        if said.checked_nothing:  # the tool's own error, whatever it printed after
            ctx.done.append(f"{tool} checked nothing on {case.label}: {NO_CUDA_CALL_SAID}")
            return True
        if emulations_own(said, placed_in):
            ctx.done.append(f"{tool} on {case.label}: {sanitizer_lines(said.first)[0]} {NOT_THE_PROGRAMS}")
            return True
        if not said.first:
            if said.shown_all:
                ctx.findings.append(Finding(Kind.MISSING_TOOL, [f"{tool} on {case.label}: {LAYER_ONLY_SHOWN}"]))
            elif said.finished and said.in_layers:  # not clean: what it saw was in fa's layers' code alone
                ctx.done.append(f"{tool} on {case.label}: {said.in_layers} report{'s' if said.in_layers > 1 else ''}, "
                                "each in the code of fa's judge-GPU layer (the MI210 emulation's or the launch log's "
                                "own), none at a line of the program's")
            elif said.finished:
                ctx.done.append(f"{tool} clean on {case.label}")
            else:
                ctx.findings.append(Finding(Kind.MISSING_TOOL, [f"{tool}: stopped after the time budget with nothing "
                                                             f"reported yet (fa run --why {ctx.case_label})"]))
            return True
        total = f" ({said.counted('errors')})" if said.counted() else ""
        words = "" if tool in ("memcheck", "racecheck") else f" {TOOL_WORDS[tool]}:"
        lines = [f"{tool} on {case.label}{total}:{words}", *sanitizer_lines(said.first)]
        if tool == "initcheck" and (where := unwritten_output(said.first, case.shape.B, case.shape.N, case.shape.d)):
            lines.append(where)
        if tool == "memcheck" and (past := shared_past_end(said.first, ctx.run_stderr)):
            lines.append(past)
        elif tool == "memcheck" and (beyond := global_past_end(said.first, case.shape)):
            lines.append(beyond)
        if tool == "memcheck":
            lines += address_readings(said.first, ctx.source)
        fields = dict(report=said.first, count=said.count, on=case.label)
        if tool == "racecheck" and said.first[0].startswith("Warning: "):
            fields.update(warning_level=True)  # threads of a warp in step: a lead the probes still measure past
        ctx.findings.append(Finding(Kind(tool), lines, fields))
        return False


class Memcheck(Sanitizer):
    tool = "memcheck"

    def applies(self, ctx: Context) -> bool:
        return self.on_this_program(ctx)

    def run(self, ctx: Context) -> list[Finding]:
        self.sanitize(ctx, ctx.trial)
        return []


class Racecheck(Sanitizer):
    """racecheck on one batch cut to its first RACECHECK_ROWS rows, where it answers in seconds
    (its cost grows with every shared-memory access), then on the whole first batch: before
    memcheck where the runs showed a result that depends on timing (first), else for a wrong
    answer memcheck did not explain."""

    tool = "racecheck"

    def __init__(self, first: bool, emulated: bool = False):
        super().__init__(emulated)
        self.first = first

    def applies(self, ctx: Context) -> bool:
        if self.first:  # runs that depend on timing: racecheck's word whatever the probes measured
            return self.on_this_program(ctx, after_a_mechanism=True) and timing_shown(ctx)
        if not self.on_this_program(ctx):
            return False
        return not timing_shown(ctx) and ctx.verdict == "WRONG" and not ctx.has(Kind.MEMCHECK)

    def run(self, ctx: Context) -> list[Finding]:
        tried = set()
        for rows in (RACECHECK_ROWS, None):
            cut = one_batch(ctx.trial, ctx.work, rows)
            if cut is None or cut.shape in tried:
                continue
            tried.add(cut.shape)
            if not self.sanitize(ctx, cut) or ctx.has(Kind.MISSING_TOOL):
                break
        return []


class SyncInitcheck(Sanitizer):
    """synccheck and initcheck side by side, for a failing case that no run, memcheck, racecheck or
    probe explains: a barrier that not every thread of the block reaches (a __syncthreads inside a
    branch that depends on the thread), a warp mask that leaves out lanes that call with it, global
    memory read before anything was written to it (said as seen: an unwritten read can be harmless)."""

    tool = "synccheck"
    tools = ("synccheck", "initcheck")

    @property
    def name(self) -> str:
        return "compute-sanitizer --tool synccheck, initcheck"

    def applies(self, ctx: Context) -> bool:
        return self.on_this_program(ctx) and ctx.verdict in ("WRONG", "ERROR") and \
            not ctx.has(Kind.MEMCHECK, Kind.RACECHECK, Kind.MEASURED)

    def run(self, ctx: Context) -> list[Finding]:
        self.sanitize(ctx, ctx.trial)
        return []


class AmdTools(Step):
    name = "the AMD node's tools"

    def applies(self, ctx: Context) -> bool:
        return ctx.kind == "hip" and not crashed(ctx)  # a build for AMD (the emulation's is nvcc's: "cuda")

    def run(self, ctx: Context) -> list[Finding]:
        return [Finding(Kind.MISSING_TOOL, [
            "no sanitizer of AMD's runs here: rocgdb, or a build with -fsanitize=address (xnack+) on the AMD "
            "node, would name an invalid access"])]


class NothingMore(Step):
    """What ran and found nothing, where no run or tool explains the failure: observations, never
    an all-clear ("also" beside what the probes measured, or beside runs that differ: which tools
    then saw no hazard is what there is to say of where)."""

    name = "what found nothing"

    def applies(self, ctx: Context) -> bool:
        unlocated = (Kind.MEASURED, Kind.RACE, Kind.INTERMITTENT)  # causes that name no access nor line
        return bool(ctx.done) and not any(f.is_cause and f.kind not in unlocated for f in ctx.findings) and \
            not ctx.has(Kind.HARMLESS)

    def run(self, ctx: Context) -> list[Finding]:
        measured = ctx.has(Kind.OBSERVED, Kind.MEASURED, Kind.INITCHECK, Kind.RACE, Kind.INTERMITTENT)
        return [Finding(Kind.CLEAN, [f"{'also' if measured else 'nothing more found'}: {'; '.join(ctx.done)}"])]


class HostCrash(Step):
    """A debugger's backtrace, then with the source an AddressSanitizer build's report, then the
    debugger on a -g build."""

    name = "where it crashed"

    def applies(self, ctx: Context) -> bool:
        return crashed(ctx)

    def run(self, ctx: Context) -> list[Finding]:
        ctx.ended = True
        debugger = next((d for d in (("rocgdb",) if ctx.kind == "hip" else ()) + ("gdb", "cuda-gdb") if find_tool(d)),
                        None)
        if debugger is None:
            ctx.findings.append(Finding(Kind.MISSING_TOOL, [
                f"no debugger here (gdb, cuda-gdb, rocgdb): `gdb -batch -ex run -ex bt --args {ctx.program.path} "
                "INPUT OUTPUT` would show where it crashed"]))
        elif ctx.starting(f"{debugger}: where it crashes"):
            debug(ctx, find_tool(debugger), ctx.program, ctx.whole)
        if ctx.source is None:
            if not any(f.kind == Kind.CRASH and "line" in f.fields for f in ctx.findings):
                ctx.findings.append(Finding(Kind.MISSING_TOOL, [
                    f"with the source, fa rebuilds it with -g and AddressSanitizer to name the line: "
                    f"fa run {ctx.case_label} --program {programs.source_hint(ctx.program.path)}"]))
            return []
        if self.asan(ctx) or not debugger or not ctx.starting(f"{debugger} on a -g build"):
            return []
        try:
            built = programs.ensure_built(rebuilt(ctx.program, sanitize=False))
        except Exception as e:
            ctx.findings.append(Finding(Kind.MISSING_TOOL, [f"no -g build here: {e}"]))
            return []
        debug(ctx, find_tool(debugger), built, ctx.whole, build="the -g build")
        return []

    def asan(self, ctx: Context) -> bool:
        """The AddressSanitizer build's report; True where it named the line or the budget ended."""
        lines = "-g -lineinfo" if ctx.source.suffix == ".cu" else "-g"
        if not ctx.starting(f"rebuilding {ctx.source.name} with {lines} and AddressSanitizer"):
            return True
        try:
            asan = programs.ensure_built(rebuilt(ctx.program, sanitize=True))
        except Exception as e:  # a compiler or a machine without the sanitizer's library: say so, go on
            ctx.findings.append(Finding(Kind.MISSING_TOOL, [f"no AddressSanitizer build here: {e}"]))
            return False
        if not ctx.starting(f"the AddressSanitizer build on {ctx.whole.label}"):
            return True
        code, output = run_captured(ctx.on_node([*asan.argv, str(ctx.whole.input_path), str(ctx.work / "asan.out")]),
                                    ctx.budget.left, env=ASAN_ENV)
        report = asan_report(output)
        if report:
            ctx.findings.append(Finding(Kind.ASAN, report, dict(report=report)))
            return True
        said = [l for l in output.splitlines() if l.strip()]
        ctx.findings.append(Finding(Kind.MISSING_TOOL, [
            "the AddressSanitizer build reported nothing" + (f": {said[0][:160]}" if said else "")]))
        return False


def debug(ctx: Context, debugger: str, program: Program, case: TrialCase, build: str = "") -> None:
    argv = ctx.on_node([debugger, "-q", "-nx", "-batch", "-ex", "set pagination off", "-ex", "run", "-ex", "bt",
                        "--args", *program.argv, str(case.input_path), str(ctx.work / "gdb.out")])
    code, output = run_captured(argv, ctx.budget.left)
    signal, frames = backtrace(output)
    name = Path(debugger).name
    if signal is None:
        ended = debugger_exit(output)
        if ended and ended.startswith("exited"):
            ctx.findings.append(Finding(Kind.CRASH, [
                f"under {name} it did not crash ({name}: the program {ended}): a crash that comes and goes, or "
                "depends on memory layout, as a host buffer overrun's does (a copy or loop past the end of a "
                "malloc'ed array)"], dict(reproduced=False, debugger_said=ended)))
        else:
            said = [l.strip() for l in output.splitlines() if l.strip()][-DEBUGGER_TAIL:]
            what = "stopped at the time budget" if code is None else ended or "no signal or exit fa could read"
            ctx.findings.append(Finding(Kind.MISSING_TOOL, [
                f"{name}: {what}; its last lines: " + (" | ".join(said) if said else "(none)")],
                dict(debugger_tail=said)))
        return
    shown = [frame_text(f) for f in frames[:BACKTRACE_FRAMES]]
    own = next((frame_text(f) for f in frames if is_own_frame(f)), None)
    fields = dict(signal=signal, frames=shown)
    thread = caught_in(output)
    if thread:
        fields["thread"] = thread
    lines = [f"{name}{f' on {build}' if build else ''}: {signal} in {shown[0] if shown else '?'}"
             + (f", in {thread} (not the main thread)" if thread else "")]
    if own and own != (shown[0] if shown else None):
        lines.append(f"called from {own}")
    if own:
        fields["line"] = own
    elif len(shown) > 1 and (callers := [f for f in shown[1:] if not is_system_frame(f)]):
        lines.append("called from " + " <- ".join(callers) + " (no line numbers: built without -g)")
    ctx.findings.append(Finding(Kind.CRASH, lines, fields))


ASAN_ENV = {"ASAN_OPTIONS": "protect_shadow_gap=0:detect_leaks=0:abort_on_error=0"}  # CUDA maps the shadow gap


def rebuilt(program: Program, sanitize: bool) -> Program:
    """The same source with -g (and -lineinfo for nvcc), and AddressSanitizer on the host code.
    nvcc builds a hw4.cu, and a hw4.hip too where it runs on the MI210 emulation."""
    cuda = programs.source_compiler(program.source) == "nvcc"
    flags = ("-g", "-lineinfo") if cuda else ("-g",)
    if sanitize:
        flags += ("-Xcompiler", "-fsanitize=address,-fno-omit-frame-pointer", "-Xlinker", "-lasan") if cuda else \
            ("-fsanitize=address", "-fno-omit-frame-pointer")
    return programs.from_source(program.source, flags, "asan" if sanitize else "debug")


def with_lines(program: Program) -> Program:
    """The program, rebuilt with -g -lineinfo where fa has its source, so that the tools name
    file:line (the course's line has no -lineinfo); as it is otherwise."""
    if program.source is None:
        return program
    try:
        return programs.ensure_built(rebuilt(program, sanitize=False))
    except Exception:  # the program as it is still tells kernel and offset
        return program
