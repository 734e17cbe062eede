"""Why a case failed, found as a TA would find it: with the tools, on the smallest failing case
of each kind (a crash first, then a wrong answer).

diagnose.py says what is wrong in the output; this module runs the program again to find out
why, within a time budget (BUDGET_S, each step said as it starts), and says it in a line or two
with the evidence:

  rerun       run again (up to MAX_RUNS runs in all, the judged one counted): each run checked
              against the correct output and against the judged output, the runs against each
              other. A failure that does not come back is named intermittent ("failed k of n
              runs"); values that differ between runs by more than the tolerance are a race (how
              many, how far); differences far below it (the order of floating-point atomics or
              reductions) are named harmless, never the cause of a failure.
  memcheck    compute-sanitizer's first error (misaligned or out-of-bounds access, a launch that
              could not start) for a GPU program that wrote wrong values or failed.
  racecheck   compute-sanitizer's first shared-memory hazard, for a wrong answer memcheck
              does not explain, and first of all (before memcheck) where the runs showed a
              result that depends on timing: on one batch cut to its first RACECHECK_ROWS rows
              (a race in a kernel shows on any input it runs), then on the whole batch.
  host crash  a program killed by SIGSEGV, SIGABRT, SIGBUS or SIGFPE: the debugger's backtrace;
              with the source (--program hw4.cu), a rebuild with -g -lineinfo and
              AddressSanitizer on the host code, whose report names the line.
  size        across the cases of one run: verdicts that change at a size where a usual
              product (N*N*4 bytes, B*N*d, ...) passes 2^31 point at a 32-bit size.
  probes      for a wrong answer nothing above explains and the catalogue (mistakes.py) does
              not name: what the program computes, measured on probe inputs (probes/: its
              weights W against P, where its values went, which elements it read, experiments).

A large case is tried on a copy of its first batches first (same N and d), where the tools
are fast; where that copy passes, the whole case is used. A tool that is not installed is
named with what it would tell.

Here: the steps (Investigation) and explain, which fa run calls. The runs again are reruns.py,
what the tools print is read in tool_logs.py, the size and split findings are across_cases.py.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

import numpy as np

from .. import locations
from ..cases import suite
from ..cases.suite import Target
from ..programs import programs, wave64
from ..programs.devices import list_devices
from ..programs.programs import Launcher, Program
from . import expected
from .across_cases import across_cases
from .diagnose import Diagnosis, signal_name
from . import probes
from .findings import Finding, Kind
from .reruns import (MAX_RUNS, RACECHECK_ROWS, RERUNS_AFTER_EVIDENCE, RERUN_SHARE, Reruns, TrialCase, one_batch,
                     reduced_copy, run_once)
from .tool_logs import (BACKTRACE_FRAMES, Budget, CRASH_SIGNALS, DEBUGGER_TAIL, asan_report, backtrace, caught_in,
                        debugger_exit, find_tool, frame_text, gpu_kind, is_own_frame, is_system_frame, run_captured,
                        sanitize, sanitizer_lines)

BUDGET_S = 60.0


# ---------------------------------------------------------------- the steps
class Investigation:
    """The steps for one failing case, in the order a TA would take them."""

    def __init__(self, program: Program, target: Target, verdict: str, signal: str | None, correct: np.ndarray,
                 tol: float, launcher: Launcher | None, say: Callable[[str], None], budget_s: float = BUDGET_S,
                 judged=None, catalogue_named: bool = False):
        self.program, self.target, self.verdict = program, target, verdict
        self.judged = judged  # judge.JudgedOutput of the run that was judged, where it failed
        self.signal, self.tol = signal, tol
        self.correct, self.launcher, self.say = correct, launcher, say
        self.budget = Budget(budget_s)
        self.kind = gpu_kind(program)
        self.catalogue_named = catalogue_named  # the quick look (mistakes.py) named a mistake
        self.findings: list[Finding] = []
        self.probed = False
        self.done: list[str] = []  # the steps that ran to the end and found nothing

    def step(self, what: str) -> bool:
        """Say the step as it starts; False once the budget is spent."""
        if self.budget.left < 1:
            self.say(f"why {self.target.name}: out of time ({self.budget.seconds:g} s) before {what}")
            return False
        self.say(f"why {self.target.name}: {what} ({self.budget.used:.0f} s of {self.budget.seconds:g} s)")
        return True

    def run(self, work: Path) -> list[Finding]:
        self.steps(work)
        if self.measurable():
            self.probe(work)
        if not any(f.is_cause or f.kind == Kind.HARMLESS for f in self.findings) and self.done:
            measured = any(f.kind == Kind.OBSERVED for f in self.findings)  # the probes said what they measured
            self.findings.append(Finding(Kind.CLEAN, [f"{'also' if measured else 'nothing more found'}: "
                                                      f"{'; '.join(self.done)}"]))
        return self.findings

    def no_gpu_here(self) -> bool:
        """A GPU program run where its GPU is not (fa run --without-gpu): said once, as what the
        machine explains, with no rerun and no tool, which cannot change it."""
        vendor = {"cuda": "nvidia", "hip": "amd"}.get(self.kind)
        if self.launcher is not None or vendor is None or any(d.vendor == vendor for d in list_devices()):
            return False
        self.findings.append(Finding(Kind.OBSERVED, [
            f"this machine has no {'NVIDIA' if vendor == 'nvidia' else 'AMD'} GPU: the program's first GPU call "
            "fails here whatever its code does (its stderr above says how); no rerun or tool can change that: run "
            "it where such a GPU is"], dict(no_gpu=vendor)))
        self.probed = True  # nothing to measure here either
        return True

    def probe(self, work: Path) -> None:
        self.probed = True
        self.findings += probes.measure(self.program, self.target.input_path, self.target.shape, self.target.name,
                                        self.tol, self.launcher, work, self.budget, self.say, self.kind,
                                        picture_path(self.program, self.target))

    def measurable(self) -> bool:
        """The probes (probes/) measure what the program computes: for a wrong answer or an output of
        the wrong size that the catalogue did not name and no run, sanitizer or crash explains."""
        return self.verdict in ("WRONG", "ERROR") and self.signal not in CRASH_SIGNALS and not self.probed and \
            not self.catalogue_named and not any(f.is_cause for f in self.findings) and self.budget.left >= 2

    def steps(self, work: Path) -> None:
        if self.signal not in CRASH_SIGNALS and self.no_gpu_here():  # a host crash is still looked into
            return
        whole = TrialCase(self.target.name, self.target.input_path, self.target.shape, self.correct)
        if self.signal in CRASH_SIGNALS:
            self.host_crash(whole, work)
            return
        case = reduced_copy(self.target, work, self.correct) or whole
        case = self.rerun(case, whole, work)
        source = self.program.source
        if wave64.emulates(source) and self.measurable():
            self.probe(work)  # the 32-lane experiment says more of a port than the sanitizers of its emulation
            if any(f.is_cause for f in self.findings):
                return
        if self.kind == "cuda":
            if any(f.kind in (Kind.RACE, Kind.INTERMITTENT) for f in self.findings):
                # a result that depends on timing: racecheck first, on its cut batch, while the budget lasts
                self.racecheck(case, work)
                self.sanitize("memcheck", case, work)
            elif self.sanitize("memcheck", case, work) and self.verdict == "WRONG":
                self.racecheck(case, work)
        elif self.kind == "hip":
            self.findings.append(Finding(Kind.MISSING_TOOL, [
                "no sanitizer of AMD's runs here: rocgdb, or a build with -fsanitize=address (xnack+) on the AMD "
                "node, would name an invalid access"]))

    def rerun(self, case: TrialCase, whole: TrialCase, work: Path) -> TrialCase:
        """Run again on the trial case: every run checked against the correct output, against the
        judged output and against the others (Reruns), up to MAX_RUNS runs while they all agree."""
        judged_failed = self.judged_failed_on(case, whole)
        if judged_failed is False:  # the copy of the first batches holds none of the wrong values
            self.say(f"why {self.target.name}: the judged output is right in {case.label}; the runs use the whole case")
            case, judged_failed = whole, self.judged_failed_on(whole, whole)
        runs = Reruns(case, self.tol, self.judged, judged_failed)
        rerun_budget = self.budget.seconds * RERUN_SHARE
        while runs.count < MAX_RUNS:
            enough = runs.evidence and runs.reruns >= RERUNS_AFTER_EVIDENCE
            if runs.reruns >= 2 and (enough or self.budget.used > rerun_budget):
                break
            up_to = MAX_RUNS - runs.count + runs.reruns
            if not self.step(f"rerun {runs.reruns + 1} (of up to {up_to}) on {case.label}"):
                break
            _, got = run_once(self.program, case, work / "rerun.out", self.launcher, self.budget.left)
            if runs.reruns == 0 and judged_failed is None and case is not whole and runs.passes(got):
                # nothing known of where the judged run failed, and the copy passes: the whole case
                self.say(f"why {self.target.name}: {case.label} passes; the runs use the whole case")
                case = whole
                runs = Reruns(case, self.tol, self.judged, self.judged_failed_on(whole, whole))
                continue
            runs.add(got)
        found = runs.findings(self.kind)
        self.findings += found
        if not found:
            self.done.append(runs.agreement())
        return case

    def judged_failed_on(self, case: TrialCase, whole: TrialCase) -> bool | None:
        """Whether the judged run failed on this trial case: True for the whole case (its verdict),
        from the judged output's wrong batches for a copy of the first batches, None if unknown."""
        if case is whole:
            return self.verdict in ("WRONG", "ERROR")
        return self.judged.failed_within(case.shape.B) if self.judged else None

    def sanitize(self, tool: str, case: TrialCase, work: Path) -> bool:
        """compute-sanitizer's first report; True where it found nothing (or could not run)."""
        if find_tool("compute-sanitizer") is None:
            self.findings.append(Finding(Kind.MISSING_TOOL, [
                f"compute-sanitizer is not installed: `compute-sanitizer --tool {tool} {self.program.path} INPUT "
                f"OUTPUT` would name {'the first invalid access' if tool == 'memcheck' else 'a shared-memory race'}"]))
            return True
        if not self.step(f"compute-sanitizer --tool {tool} on {case.label}"):
            return True
        said = sanitize(tool, self.with_lines().argv, case.input_path, work, self.budget.left, self.on_node)
        if not said.first:
            if said.finished:
                self.done.append(f"{tool} clean on {case.label}")
            else:
                self.findings.append(Finding(Kind.MISSING_TOOL, [f"{tool}: stopped after the time budget with nothing "
                                                              f"reported yet (fa run --why {self.target.name})"]))
            return True
        total = f" ({said.count} errors in all)" if said.count else ""
        self.findings.append(Finding(tool, [f"{tool} on {case.label}{total}:", *sanitizer_lines(said.first)],
                                     dict(report=said.first, count=said.count, on=case.label)))
        return False

    def racecheck(self, case: TrialCase, work: Path) -> None:
        """racecheck on one batch cut to its first RACECHECK_ROWS rows, where it answers in seconds
        (its cost grows with every shared-memory access), then on the whole first batch."""
        tried = set()
        for rows in (RACECHECK_ROWS, None):
            cut = one_batch(case, work, rows)
            if cut is None or cut.shape in tried:
                continue
            tried.add(cut.shape)
            if not self.sanitize("racecheck", cut, work) or any(f.kind == Kind.MISSING_TOOL for f in self.findings):
                return

    def on_node(self, argv: list[str]) -> list[str]:
        """A tool's command where the program runs: here, or on a cluster node through srun."""
        return (self.launcher or Launcher()).wrap(argv)

    def with_lines(self) -> Program:
        return with_lines(self.program)

    def host_crash(self, case: TrialCase, work: Path) -> None:
        """A debugger's backtrace, then with the source an AddressSanitizer build's report."""
        debugger = next((d for d in (("rocgdb",) if self.kind == "hip" else ()) + ("gdb", "cuda-gdb") if find_tool(d)),
                        None)
        if debugger is None:
            self.findings.append(Finding(Kind.MISSING_TOOL, [
                f"no debugger here (gdb, cuda-gdb, rocgdb): `gdb -batch -ex run -ex bt --args {self.program.path} "
                "INPUT OUTPUT` would show where it crashed"]))
        elif self.step(f"{debugger}: where it crashes"):
            self.debug(find_tool(debugger), self.program, case, work, Kind.CRASH)
        if self.program.source is None:
            if not any(f.kind == Kind.CRASH and "line" in f.fields for f in self.findings):
                self.findings.append(Finding(Kind.MISSING_TOOL, [
                    f"with the source, fa rebuilds it with -g and AddressSanitizer to name the line: "
                    f"fa run {self.target.name} --program {programs.source_hint(self.program.path)}"]))
            return
        lines = "-g -lineinfo" if self.program.source.suffix == ".cu" else "-g"
        if not self.step(f"rebuilding {self.program.source.name} with {lines} and AddressSanitizer"):
            return
        try:
            asan = programs.ensure_built(rebuilt(self.program, sanitize=True))
        except Exception as e:  # a compiler or a machine without the sanitizer's library: say so, go on
            self.findings.append(Finding(Kind.MISSING_TOOL, [f"no AddressSanitizer build here: {e}"]))
        else:
            if not self.step(f"the AddressSanitizer build on {case.label}"):
                return
            code, output = run_captured(self.on_node([*asan.argv, str(case.input_path), str(work / "asan.out")]),
                                        self.budget.left, env=ASAN_ENV)
            report = asan_report(output)
            if report:
                self.findings.append(Finding(Kind.ASAN, report, dict(report=report)))
                return
            said = [l for l in output.splitlines() if l.strip()]
            self.findings.append(Finding(Kind.MISSING_TOOL, [
                "the AddressSanitizer build reported nothing" + (f": {said[0][:160]}" if said else "")]))
        if debugger and self.step(f"{debugger} on a -g build"):
            try:
                debug = programs.ensure_built(rebuilt(self.program, sanitize=False))
            except Exception as e:
                self.findings.append(Finding(Kind.MISSING_TOOL, [f"no -g build here: {e}"]))
                return
            self.debug(find_tool(debugger), debug, case, work, Kind.CRASH, build="the -g build")

    def debug(self, debugger: str, program: Program, case: TrialCase, work: Path, kind: str,
              env: dict | None = None, build: str = "") -> None:
        argv = self.on_node([debugger, "-q", "-nx", "-batch", "-ex", "set pagination off", "-ex", "run", "-ex", "bt",
                             "--args", *program.argv, str(case.input_path), str(work / "gdb.out")])
        code, output = run_captured(argv, self.budget.left, env=env)
        signal, frames = backtrace(output)
        name = Path(debugger).name
        if signal is None:
            ended = debugger_exit(output)
            if ended and ended.startswith("exited"):
                self.findings.append(Finding(kind, [
                    f"under {name} it did not crash ({name}: the program {ended}): a crash that comes and goes, or "
                    "depends on memory layout, as a host buffer overrun's does (a copy or loop past the end of a "
                    "malloc'ed array)"], dict(reproduced=False, debugger_said=ended)))
            else:
                said = [l.strip() for l in output.splitlines() if l.strip()][-DEBUGGER_TAIL:]
                what = "stopped at the time budget" if code is None else ended or "no signal or exit fa could read"
                self.findings.append(Finding(Kind.MISSING_TOOL, [
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
        self.findings.append(Finding(kind, lines, fields))


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


def investigate(program: Program, target: Target, verdict: str, signal: str | None, tol: float,
                launcher: Launcher | None, say: Callable[[str], None], budget_s: float = BUDGET_S,
                output_dir: Path | None = None, judged=None, catalogue_named: bool = False) -> list[Finding]:
    """Every step that applies to this case, within budget_s seconds; judged: the judged output's
    judge.JudgedOutput, where it failed."""
    correct = expected.output_of(target)
    with locations.scratch("why", output_dir) as tmp:
        inquiry = Investigation(program, target, verdict, signal, correct, tol, launcher, say, budget_s, judged,
                                catalogue_named)
        return inquiry.run(Path(tmp))


def picture_path(program: Program, target: Target) -> Path:
    """Where the picture of W against P goes: fa's cache, by program and case."""
    return locations.cache_dir() / "diagnosis" / f"{Path(program.path).name}-{target.name}-weights.png"


# ---------------------------------------------------------------- a run's failures
FIRST = ("ERROR", "WRONG")  # the kinds of failure investigated, each once, in this order: a crash says most
MIN_SECOND_S = 5.0  # a second kind is investigated only with this much of the budget left


def smallest_failure(results: list) -> object | None:
    """The failing case (WRONG or ERROR) with the least work: where the tools are fastest."""
    failed = [r for r in results if r.verdict in ("WRONG", "ERROR")]
    return min(failed, key=lambda r: (r.target.shape.flops, r.target.shape.input_bytes), default=None)


def explain(results: list, options, say: Callable[[str], None], budget_s: float = BUDGET_S,
            chosen: object | None = None) -> list[Finding]:
    """Investigate `chosen` (whatever its verdict), else the smallest case of each kind of failure,
    the most telling first (an ERROR: a crash, an error the program reported; then a WRONG), each
    with what the budget has left; add what was found to the case's diagnosis; return what the
    verdicts say across all cases (across_cases)."""
    passed = [r.target.shape for r in results if r.verdict == "PASS"]
    failed = [r.target.shape for r in results if r.verdict in ("WRONG", "ERROR")]
    wrong = [r.target.shape for r in results if r.verdict == "WRONG"]
    findings, start, looked = [], time.monotonic(), []
    for case in [chosen] if chosen else [smallest_failure([r for r in results if r.verdict == v]) for v in FIRST]:
        left = round(budget_s - (time.monotonic() - start), 1)
        if case is None or case.verdict == "TLE" or (left <= 0 and not looked):
            continue
        if looked and left < MIN_SECOND_S:  # said, so that no one reads its silence as nothing found
            found = [Finding(Kind.MISSING_TOOL, [f"not looked into: {max(left, 0):g} s of the {budget_s:g} s were left "
                                                 f"after {looked[0]}'s {looked[1]}, under the {MIN_SECOND_S:g} s a "
                                                 f"second case takes (fa run {case.target.name} --why "
                                                 f"{case.target.name} looks into this one)"])]
        else:
            named = bool(case.diagnosis and case.diagnosis.fields.get("looks_like"))
            found = investigate(case.program, case.target, case.verdict, signal_name(case.run.returncode),
                                options.tol, options.launcher, say, left, options.output_dir, case.judged, named)
            looked = [case.target.name, case.verdict]
        if case.diagnosis is None:
            case.diagnosis = Diagnosis([], {})
        for f in found:
            case.diagnosis.lines += f.lines
        case.diagnosis.fields["causes"] = [dict(kind=f.kind, lines=f.lines, **f.fields) for f in found]
        findings += found
    # cases to run are suggested only where every failure is a wrong answer and nothing was named:
    # a mistake, a race or a crash says more
    named = any(f.is_cause for f in findings) or any(r.diagnosis and r.diagnosis.fields.get("looks_like")
                                                     for r in results)
    return across_cases(passed, failed, suite.cases("c"), suggest=len(wrong) == len(failed) and not named)
