"""Why a case failed, found as a TA would find it: with the tools, on the smallest failing case.

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

A large case is tried on a copy of its first batches first (same N and d), where the tools
are fast; where that copy passes, the whole case is used. A tool that is not installed is
named with what it would tell.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from . import expected
from .. import locations, settings
from ..programs import programs
from ..cases import suite
from .diagnose import Diagnosis, signal_name
from ..cases.format import HEADER_BYTES, Shape, header_bytes, open_output
from ..programs.programs import Launcher, Program
from ..cases.suite import Target

BUDGET_S = 60.0
MAX_RUNS = 10  # runs of the trial case, the judged one counted, while every run agrees
RERUN_SHARE = 0.4  # of the budget the reruns may take while they agree (the sanitizers need the rest)
RERUNS_AFTER_EVIDENCE = 3  # reruns made before stopping at the first sign of a race
REDUCED_BATCHES = 2  # batches of a large case's copy the tools run on
RACECHECK_ROWS = 512  # rows of Q, K and V in racecheck's first, cut input
REDUCE_ABOVE_BYTES = 16 << 20  # inputs larger than this are tried on such a copy first
CRASH_SIGNALS = ("SIGSEGV", "SIGABRT", "SIGBUS", "SIGFPE", "SIGILL")
SANITIZER_LINES = 3  # of a sanitizer's report, quoted after its first line
BACKTRACE_FRAMES = 4


@dataclass
class Finding:
    kind: str  # race, harmless, memcheck, racecheck, crash, asan, size, missing-tool, clean
    lines: list[str]
    fields: dict = field(default_factory=dict)

    @property
    def is_cause(self) -> bool:
        return self.kind in ("race", "intermittent", "memcheck", "racecheck", "crash", "asan", "size")


# What a result that depends on timing comes from, in the words of the program's kind.
RACE_WORDS = {
    "cpu": "threads sharing a variable without a lock or a reduction, or a value read before it is written",
    "cuda": "a missing __syncthreads, threads writing one place, or memory read before it is written",
    "hip": "a missing __syncthreads, threads writing one place, or memory read before it is written",
}


# ---------------------------------------------------------------- the tools
def find_tool(name: str) -> str | None:
    """A tool on PATH or where the CUDA toolkit keeps it (beside nvcc, CUDA_HOME, /usr/local/cuda)."""
    found = shutil.which(name)
    if found:
        return found
    folders = [settings.cuda_home(), "/usr/local/cuda", "/opt/cuda"]
    nvcc = shutil.which("nvcc")
    if nvcc:
        folders.insert(0, str(Path(nvcc).resolve().parent.parent))
    for folder in filter(None, folders):
        path = Path(folder) / "bin" / name
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    return None


def gpu_kind(program: Program) -> str:
    """"cuda", "hip" or "cpu": what the program runs its kernels on, from its binary's sections
    (nvcc puts device code in .nv_fatbin, hipcc in .hip_fatbin)."""
    if program.name in ("cuda", "hip-cuda"):
        return "cuda"
    if program.name == "hip":
        return "hip"
    try:
        data = program.path.read_bytes()
    except OSError:
        return "cpu"
    if b".nv_fatbin" in data or b"__nv_module_id" in data:
        return "cuda"
    if b".hip_fatbin" in data or b"__hip_fatbin" in data:
        return "hip"
    return "cpu"


@dataclass
class Budget:
    seconds: float
    start: float = field(default_factory=time.perf_counter)

    @property
    def used(self) -> float:
        return time.perf_counter() - self.start

    @property
    def left(self) -> float:
        return max(0.0, self.seconds - self.used)


def run_captured(argv: list[str], timeout: float, env: dict | None = None) -> tuple[int | None, str]:
    """A tool's exit code and its output (stdout and stderr together); None past the timeout."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                            start_new_session=True, preexec_fn=programs.die_with_fa(),
                            env={**os.environ, **(env or {})})
    try:
        out, _ = proc.communicate(timeout=max(timeout, 0.1))
        return proc.returncode, out
    except subprocess.TimeoutExpired:
        return None, programs.stop(proc, output=0)
    except BaseException:
        programs.stop(proc)
        raise


# ---------------------------------------------------------------- what the tools said
def first_sanitizer_error(log: str) -> list[str]:
    """compute-sanitizer's first error: its headline and the lines that place it."""
    lines = [l.removeprefix("=========").rstrip() for l in log.splitlines() if l.startswith("=========")]
    for i, line in enumerate(lines):
        text = line.strip()
        if not text or line.startswith("     ") or text.startswith(("COMPUTE-SANITIZER", "ERROR SUMMARY",
                                                                     "RACECHECK SUMMARY", "Target application")):
            continue
        if "Maximum number of" in text or "Environment variable" in text:  # a note on the tool's limits
            continue
        detail = []
        for follow in lines[i + 1:]:
            if not follow.startswith("     ") or "Saved host backtrace" in follow:
                break
            detail.append(follow.strip())
        return [text, *detail[:SANITIZER_LINES]]
    return []


def sanitizer_lines(first: list[str]) -> list[str]:
    """A sanitizer's first report in a line or two: what, where (kernel, offset, file:line)."""
    race = re.match(r"(?:Error: )?Race reported between (\w+) access at (.+)", first[0])
    if race:
        other = re.match(r"and (\w+) access at (.+)", first[1]) if len(first) > 1 else None
        text = f"a shared-memory race: a {race.group(1).lower()} at {short_place(race.group(2))}"
        if other:
            text += f" against a {other.group(1).lower()} at {short_place(other.group(2))}"
        return [text]
    detail = [short_place(l) if l.startswith("at ") else l for l in first[1:]]
    return [first[0].removeprefix("Error: ")] + (["; ".join(detail)] if detail else [])


def sanitizer_count(log: str) -> int | None:
    match = re.search(r"(?:ERROR SUMMARY|RACECHECK SUMMARY): (\d+) (?:error|hazard)", log)
    return int(match.group(1)) if match else None


def short_place(line: str) -> str:
    """"at void attention<64>(const float *, ...)+0x2d0 in /x/hw4.cu:87" -> "attention<64>+0x2d0, hw4.cu:87"."""
    text = re.sub(r"^(and )?(\w+ access )?at ", "", line.strip())
    text, _, where = text.partition(" in ") if " in /" not in text else text.rpartition(" in ")
    name, plus, offset = text.partition("+0x")
    name = name.removeprefix("void ")
    if name.endswith(")"):  # drop the argument list: the last balanced (...)
        depth = 0
        for i in range(len(name) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(name[i], 0)
            if depth == 0:
                name = name[:i]
                break
    place = name + (plus + offset if plus else "")
    if where:
        file, _, rest = where.partition(" ")
        place += f", {Path(file).name}" + (f" {rest}" if rest else "")
    return place


# gdb's line for a stop by a signal, in any thread: "Program received signal SIGSEGV", "Thread 2
# "hw4" received signal SIGSEGV", "Thread 0x7ffff (LWP 12) received signal SIGSEGV".
CAUGHT = re.compile(r"^(?:\[.*?\]\s*)?(Program|Thread .+?) received signal (SIG\w+)", re.MULTILINE)
# gdb's line for a program that ended by itself.
EXITED = re.compile(r"\[Inferior \d+ \(.*?\) exited (normally|with code (\d+))\]")
KILLED = re.compile(r"Program terminated with signal (SIG\w+)")
DEBUGGER_TAIL = 3  # lines of a debugger's output quoted where fa could not read it


def backtrace(log: str) -> tuple[str | None, list[str]]:
    """The signal a debugger caught (in whichever thread) and the first frames of its backtrace:
    gdb's `bt` after a stop shows the thread that received the signal."""
    signal = CAUGHT.search(log)
    frames = [l.strip() for l in log.splitlines() if re.match(r"#\d+\s", l.strip())]
    return (signal.group(2) if signal else None), frames


def caught_in(log: str) -> str | None:
    """The thread that received the signal where it is not the main one: 'Thread 2 "hw4"'."""
    signal = CAUGHT.search(log)
    who = signal.group(1) if signal else "Program"
    return None if who == "Program" or re.match(r"Thread 1\b", who) else who


def debugger_exit(log: str) -> str | None:
    """How the program ended under the debugger by itself: "exited normally", "exited with code
    N", "terminated with SIGABRT"; None where the debugger's output does not say."""
    exited = EXITED.search(log)
    if exited:
        return f"exited {exited.group(1)}"
    killed = KILLED.search(log)
    return f"terminated with {killed.group(1)}" if killed else None


def is_own_frame(frame: str) -> bool:
    """A frame with a file and line in the program's own source, not the C library's or CUDA's."""
    where = re.search(r" at (\S+):\d+", frame)
    if not where:
        return False
    file = where.group(1)  # the C library's frames name its build tree: ./stdlib/..., ../sysdeps/...
    return not file.startswith(("./", "../", "/usr/")) and not re.search(r"sysdeps|glibc|libio|nptl", file)


def is_system_frame(text: str) -> bool:
    """A frame of the C or C++ library or the thread machinery ("?? () from /lib/...", start_thread
    in ./nptl/...), which says nothing of the student's code."""
    return bool(re.search(r" from /(usr/)?lib|\.\./sysdeps|\./nptl|^\?\? \(\)|^(start_thread|clone3?)\b", text))


def frame_text(frame: str) -> str:
    """"#1  0x000055 in main () at hw4.cu:87" -> "main () at hw4.cu:87"."""
    text = re.sub(r"^#\d+\s+(0x[0-9a-f]+ in )?", "", frame)
    return re.sub(r"\(.*?\)", "()", text, count=1)


def asan_report(log: str) -> list[str]:
    """AddressSanitizer's headline, its access line, and the first frame in the student's code."""
    head = re.search(r"ERROR: AddressSanitizer: (.+?) on (?:unknown )?address (0x[0-9a-f]+)[^\n]*?(?: (T\d+))?\)?$",
                     log, re.MULTILINE) or re.search(r"ERROR: AddressSanitizer: (.+)", log)
    if not head:
        return []
    what = head.group(1)
    if head.re.groups == 3:
        address, thread = head.group(2), head.group(3)
        if int(address, 16) < 4096:
            what += f" at address {address} (a null pointer)"
        if thread and thread != "T0":
            what += f" in thread {thread} (not the main thread)"
    access = re.search(r"^(READ|WRITE) of size (\d+)", log, re.MULTILINE)
    frames = re.findall(r"#\d+ 0x[0-9a-f]+ in (\S+) (\S+:\d+)", log)
    own = [f"{fn} {Path(where).name}" for fn, where in frames
           if not re.search(r"(libasan|libc\.|libcuda|libcudart|/usr/|\.\./sysdeps|asan_|sanitizer)", where)
           and not fn.startswith(("__interceptor", "__asan", "__sanitizer"))]
    lines = [f"AddressSanitizer: {what}" + (f", {access.group(1)} of size {access.group(2)}" if access else "")]
    if own:
        lines.append(f"at {own[0]}")
    return lines


# ---------------------------------------------------------------- the case the tools run on
@dataclass
class TrialCase:
    """What the tools run on: the failing case itself or a copy of its first batches."""

    label: str
    input_path: Path
    shape: Shape
    expected: np.ndarray  # (B, N, d) float32


def reduced_copy(target: Target, work: Path, correct: np.ndarray) -> TrialCase | None:
    """The first REDUCED_BATCHES batches of a large case, as an input file of their own."""
    s = target.shape
    if s.B <= REDUCED_BATCHES or s.input_bytes <= REDUCE_ABOVE_BYTES:
        return None
    shape = Shape(REDUCED_BATCHES, s.N, s.d)
    path = work / f"{target.name}-first{REDUCED_BATCHES}.in"
    with open(target.input_path, "rb") as src, open(path, "wb") as dst:
        src.seek(HEADER_BYTES)
        dst.write(header_bytes(shape))
        dst.write(src.read(shape.input_bytes - HEADER_BYTES))
    label = f"{target.name}'s first {REDUCED_BATCHES} batches ({shape.B}x{shape.N}x{shape.d})"
    return TrialCase(label, path, shape, correct[:REDUCED_BATCHES])


def one_batch(case: TrialCase, work: Path, rows: int | None = None) -> TrialCase | None:
    """Batch 0 of the trial case as an input of its own, its Q, K and V cut to their first `rows`
    rows (None: all N); None where that is the trial case itself."""
    s = case.shape
    N = s.N if rows is None else min(rows, s.N)
    if s.B == 1 and N == s.N:
        return case if rows is None else None
    shape = Shape(1, N, s.d)
    path = work / f"batch0-{N}.in"
    with open(case.input_path, "rb") as src, open(path, "wb") as dst:
        dst.write(header_bytes(shape))
        for part in range(3):  # Q, K, V of batch 0, each cut to N rows
            src.seek(HEADER_BYTES + part * s.N * s.d * 4)
            dst.write(src.read(N * s.d * 4))
    cut = f", the first {N} rows of its Q, K and V" if N < s.N else ""
    # racecheck looks at accesses, not values: the cut input's correct output is not needed (nor known)
    return TrialCase(f"batch 0 of {case.label}{cut} ({shape.B}x{shape.N}x{shape.d})", path, shape,
                     case.expected[:1, :N])


def run_once(program: Program, case: TrialCase, out: Path, launcher: Launcher | None, timeout: float):
    """Run the program; its output as an array (None if it wrote none of the right size)."""
    result = programs.run(program, case.input_path, out, launcher, timeout=timeout)
    if result.timed_out or not out.exists() or out.stat().st_size != case.shape.output_bytes:
        return result, None
    return result, np.array(open_output(out, case.shape))


def over(a: np.ndarray, b: np.ndarray, tol: float) -> np.ndarray:
    """Where a and b differ by more than tol (NaN counts)."""
    return ~(np.abs(a.astype(np.float64) - b) <= tol)


# ---------------------------------------------------------------- runs again
class Reruns:
    """The runs of one trial case, the judged run counted where it ran on it: which failed, whether
    any wrote other bytes than the judged run, and how far the reruns differ from the first rerun.
    Each run's output is compared as it comes, so that only the first is kept."""

    def __init__(self, case: TrialCase, tol: float, judged, judged_failed: bool | None):
        self.case, self.tol, self.judged = case, tol, judged
        self.failed = [judged_failed] if judged_failed is not None else []  # per run counted
        self.reruns = 0
        self.first: np.ndarray | None = None
        self.changed = 0  # values of a rerun not bit-identical to the first rerun's (the most)
        self.over = 0  # of them, values that differ by more than the tolerance (the most)
        self.worst = 0.0
        self.unlike_judged = 0  # reruns whose output is not, bit for bit, the judged output
        self.compared_with_judged = 0
        self.no_output = 0  # reruns that crashed, stopped or wrote an output of the wrong size

    @property
    def count(self) -> int:
        return len(self.failed)

    def passes(self, got: np.ndarray | None) -> bool:
        return got is not None and not over(got, self.case.expected, self.tol).any()

    def add(self, got: np.ndarray | None) -> None:
        self.reruns += 1
        self.failed.append(not self.passes(got))
        if got is None:
            self.no_output += 1
            return
        if self.judged is not None and self.judged_counted:
            self.compared_with_judged += 1
            self.unlike_judged += not self.judged.same_batches(got)
        if self.first is None:
            self.first = got.copy()
            return
        with np.errstate(invalid="ignore"):  # inf - inf where both runs wrote inf
            diff = np.abs(got.astype(np.float64) - self.first)
        same = (got == self.first) | (np.isnan(got) & np.isnan(self.first))  # NaN in both: no change
        differ = ~(diff <= self.tol) & ~same  # NaN in one run only counts
        self.changed = max(self.changed, int(np.count_nonzero(~same)))
        if differ.any():
            self.over = max(self.over, int(differ.sum()))
            self.worst = max(self.worst, float(np.nanmax(np.where(np.isnan(diff), np.inf, diff))))
        elif self.changed and not self.over:
            self.worst = max(self.worst, float(np.nanmax(np.where(same, 0.0, diff))))

    @property
    def judged_counted(self) -> bool:
        """The judged run counts among these runs: it ran on this case (its verdict is known here)."""
        return len(self.failed) > self.reruns

    @property
    def intermittent(self) -> bool:
        return any(self.failed) and not all(self.failed)

    @property
    def evidence(self) -> bool:
        """Something a deterministic program would not do: a verdict or an output that changed."""
        return self.intermittent or self.over > 0 or self.unlike_judged > 0 and any(self.failed) or \
            0 < self.no_output < self.reruns

    def findings(self, kind: str) -> list[Finding]:
        n, k, on = self.count, sum(self.failed), self.case.label
        counted = "the judged run and " + plural_runs(self.reruns, "rerun") if self.judged_counted else \
            plural_runs(self.reruns, "rerun")
        words = RACE_WORDS.get(kind, RACE_WORDS["cpu"])
        fields = dict(failed=k, runs=n, on=on, values_over_tol=self.over, max_diff=self.worst,
                      values_changed=self.changed, reruns_unlike_judged=self.unlike_judged)
        found = []
        if self.intermittent:
            found.append(Finding("intermittent", [
                f"intermittent: failed {k} of {n} runs on {on} ({counted}): a result that depends on timing: {words}"],
                fields))
        if self.over:
            why = "" if found else f"; a result that depends on timing is a race ({words})"
            found.append(Finding("race", [
                f"race: the output changes between runs: {self.over} of {self.case.expected.size} values differ by "
                f"more than {self.tol:g} (up to {self.worst:.3g}) on {on}, failed {k} of {n} runs{why}"], fields))
        elif self.unlike_judged == self.compared_with_judged > 0 and not self.changed and not self.intermittent:
            # the reruns agree, bit for bit, and the judged run is the odd one out
            found.append(Finding("intermittent", [
                f"intermittent: the judged run wrote other values than all {self.compared_with_judged} reruns on {on}, "
                "which agree with each other bit for bit (by how much fa cannot tell: it keeps a digest of the "
                f"judged output): a result that changed between runs: {words}"], fields))
        if 0 < self.no_output < self.reruns:
            found.append(Finding("intermittent", [
                f"intermittent: {self.no_output} of {self.reruns} reruns on {on} wrote no output of the right size, "
                "the others did (a crash or an exit that comes and goes)"], fields))
        elif self.changed and not found:
            found.append(Finding("harmless", [
                f"harmless: {self.changed} of {self.case.expected.size} values differ between runs by at most "
                f"{self.worst:.2g} (the order of floating-point atomics or reductions); not the cause of a failure"],
                fields))
        return found

    def agreement(self) -> str:
        """What the runs showed where they all agreed: an observation, never an all-clear."""
        n, k = self.count, sum(self.failed)
        verdict = f"failed {k} of {n} runs" if k else f"passed {n} of {n} runs"
        judged = ", the judged one's included" if self.compared_with_judged and not self.unlike_judged else ""
        if self.first is None:
            return f"{verdict} on {self.case.label}, none with an output of the right size"
        return f"{verdict} on {self.case.label}: the same output in every run, bit for bit{judged} (no sign of a " \
               "race in them)"


def plural_runs(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


# ---------------------------------------------------------------- the steps
class Investigation:
    """The steps for one failing case, in the order a TA would take them."""

    def __init__(self, program: Program, target: Target, verdict: str, signal: str | None, correct: np.ndarray,
                 tol: float, launcher: Launcher | None, say: Callable[[str], None], budget_s: float = BUDGET_S,
                 judged=None):
        self.program, self.target, self.verdict = program, target, verdict
        self.judged = judged  # judge.JudgedOutput of the run that was judged, where it failed
        self.signal, self.tol = signal, tol
        self.correct, self.launcher, self.say = correct, launcher, say
        self.budget = Budget(budget_s)
        self.kind = gpu_kind(program)
        self.findings: list[Finding] = []
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
        if not any(f.is_cause or f.kind == "harmless" for f in self.findings) and self.done:
            self.findings.append(Finding("clean", [f"nothing more found: {'; '.join(self.done)}"]))
        return self.findings

    def steps(self, work: Path) -> None:
        whole = TrialCase(self.target.name, self.target.input_path, self.target.shape, self.correct)
        if self.signal in CRASH_SIGNALS:
            self.host_crash(whole, work)
            return
        case = reduced_copy(self.target, work, self.correct) or whole
        case = self.rerun(case, whole, work)
        if self.kind == "cuda":
            if any(f.kind in ("race", "intermittent") for f in self.findings):
                # a result that depends on timing: racecheck first, on its cut batch, while the budget lasts
                self.racecheck(case, work)
                self.sanitize("memcheck", case, work)
            elif self.sanitize("memcheck", case, work) and self.verdict == "WRONG":
                self.racecheck(case, work)
        elif self.kind == "hip":
            self.findings.append(Finding("missing-tool", [
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
        sanitizer = find_tool("compute-sanitizer")
        if sanitizer is None:
            self.findings.append(Finding("missing-tool", [
                f"compute-sanitizer is not installed: `compute-sanitizer --tool {tool} {self.program.path} INPUT "
                f"OUTPUT` would name {'the first invalid access' if tool == 'memcheck' else 'a shared-memory race'}"]))
            return True
        if not self.step(f"compute-sanitizer --tool {tool} on {case.label}"):
            return True
        log = work / f"{tool}.log"
        extra = ["--racecheck-report", "analysis"] if tool == "racecheck" else []
        argv = self.on_node([sanitizer, "--tool", tool, *extra, "--print-limit", "4", "--log-file", str(log),
                             *self.with_lines().argv, str(case.input_path), str(work / f"{tool}.out")])
        code, output = run_captured(argv, self.budget.left)
        text = log.read_text(errors="replace") if log.exists() else output
        first = first_sanitizer_error(text)
        if code is None and not first:
            self.findings.append(Finding("missing-tool", [f"{tool}: stopped after the time budget with nothing "
                                                          f"reported yet (fa run --why {self.target.name})"]))
            return True
        if not first:
            if code is not None:
                self.done.append(f"{tool} clean on {case.label}")
            return True
        count = sanitizer_count(text) if tool == "memcheck" else None  # racecheck counts only what it shows
        total = f" ({count} errors in all)" if count else ""
        self.findings.append(Finding(tool, [f"{tool} on {case.label}{total}:", *sanitizer_lines(first)],
                                     dict(report=first, count=count, on=case.label)))
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
            if not self.sanitize("racecheck", cut, work) or any(f.kind == "missing-tool" for f in self.findings):
                return

    def on_node(self, argv: list[str]) -> list[str]:
        """A tool's command where the program runs: here, or on a cluster node through srun."""
        return (self.launcher or Launcher()).wrap(argv)

    def with_lines(self) -> Program:
        """The program, rebuilt with -g -lineinfo where fa has its source, so that the tools name
        file:line (the course's line has no -lineinfo); as it is otherwise."""
        if self.program.source is None:
            return self.program
        try:
            return programs.ensure_built(rebuilt(self.program, sanitize=False))
        except Exception:  # the program as it is still tells kernel and offset
            return self.program

    def host_crash(self, case: TrialCase, work: Path) -> None:
        """A debugger's backtrace, then with the source an AddressSanitizer build's report."""
        debugger = next((d for d in (("rocgdb",) if self.kind == "hip" else ()) + ("gdb", "cuda-gdb") if find_tool(d)),
                        None)
        if debugger is None:
            self.findings.append(Finding("missing-tool", [
                f"no debugger here (gdb, cuda-gdb, rocgdb): `gdb -batch -ex run -ex bt --args {self.program.path} "
                "INPUT OUTPUT` would show where it crashed"]))
        elif self.step(f"{debugger}: where it crashes"):
            self.debug(find_tool(debugger), self.program, case, work, "crash")
        if self.program.source is None:
            if not any(f.kind == "crash" and "line" in f.fields for f in self.findings):
                self.findings.append(Finding("missing-tool", [
                    f"with the source, fa rebuilds it with -g and AddressSanitizer to name the line: "
                    f"fa run {self.target.name} --program {programs.source_hint(self.program.path)}"]))
            return
        lines = "-g -lineinfo" if self.program.source.suffix == ".cu" else "-g"
        if not self.step(f"rebuilding {self.program.source.name} with {lines} and AddressSanitizer"):
            return
        try:
            asan = programs.ensure_built(rebuilt(self.program, sanitize=True))
        except Exception as e:  # a compiler or a machine without the sanitizer's library: say so, go on
            self.findings.append(Finding("missing-tool", [f"no AddressSanitizer build here: {e}"]))
        else:
            if not self.step(f"the AddressSanitizer build on {case.label}"):
                return
            code, output = run_captured(self.on_node([*asan.argv, str(case.input_path), str(work / "asan.out")]),
                                        self.budget.left, env=ASAN_ENV)
            report = asan_report(output)
            if report:
                self.findings.append(Finding("asan", report, dict(report=report)))
                return
            said = [l for l in output.splitlines() if l.strip()]
            self.findings.append(Finding("missing-tool", [
                "the AddressSanitizer build reported nothing" + (f": {said[0][:160]}" if said else "")]))
        if debugger and self.step(f"{debugger} on a -g build"):
            try:
                debug = programs.ensure_built(rebuilt(self.program, sanitize=False))
            except Exception as e:
                self.findings.append(Finding("missing-tool", [f"no -g build here: {e}"]))
                return
            self.debug(find_tool(debugger), debug, case, work, "crash", build="the -g build")

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
                self.findings.append(Finding("missing-tool", [
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
    """The same source with -g (and -lineinfo for nvcc), and AddressSanitizer on the host code."""
    cuda = program.source.suffix == ".cu"
    flags = ("-g", "-lineinfo") if cuda else ("-g",)
    if sanitize:
        flags += ("-Xcompiler", "-fsanitize=address,-fno-omit-frame-pointer", "-Xlinker", "-lasan") if cuda else \
            ("-fsanitize=address", "-fno-omit-frame-pointer")
    return programs.from_source(program.source, flags, "asan" if sanitize else "debug")


# ---------------------------------------------------------------- across cases: a size
# Products a program computes in int, by name: shape -> value.
SIZE_PRODUCTS = [
    ("N*N*4 bytes", lambda s: s.N * s.N * 4, "N"),
    ("N*N", lambda s: s.N * s.N, "N"),
    ("B*N*d*4 bytes", lambda s: s.B * s.N * s.d * 4, "B"),
    ("B*N*d", lambda s: s.B * s.N * s.d, "B"),
    ("3*B*N*d*4 bytes (the input)", lambda s: 12 * s.B * s.N * s.d, "B"),
    ("B*N*N*4 bytes", lambda s: s.B * s.N * s.N * 4, "B"),
    ("B*N*N", lambda s: s.B * s.N * s.N, "B"),
]
LIMITS = [(2**31, "2^31"), (2**32, "2^32")]


def binary_size(n: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:g} {unit}"
    return str(n)


def size_finding(shapes_passed: list[Shape], shapes_failed: list[Shape]) -> Finding | None:
    """A usual product that is below 2^31 (or 2^32) on every passing case and at or above it on
    every failing one: the verdict changes where a 32-bit size would overflow."""
    if not shapes_passed or not shapes_failed:
        return None
    for name, product, axis in SIZE_PRODUCTS:
        for limit, limit_name in LIMITS:
            if all(product(s) < limit for s in shapes_passed) and all(product(s) >= limit for s in shapes_failed):
                good = max(shapes_passed, key=product)
                bad = min(shapes_failed, key=product)
                value = product(bad)
                shown = binary_size(value) if "bytes" in name else f"{value:,}"
                span = (f"passes up to {axis}={getattr(good, axis)}, fails from {axis}={getattr(bad, axis)}"
                        if all(getattr(s, axis) < getattr(bad, axis) for s in shapes_passed) else
                        f"passes up to {good.B}x{good.N}x{good.d}, fails from {bad.B}x{bad.N}x{bad.d}")
                return Finding("size", [f"size: {span}: {name} = {shown} passes {limit_name} there: a 32-bit size? "
                                        "(an int holding a size or an index: compute it in size_t)"],
                               dict(product=name, limit=limit_name, passes=str(good), fails=str(bad)))
    return None


# ---------------------------------------------------------------- across cases: a split
def not_multiple(tile: int):
    return (f"N is not a multiple of {tile}", lambda s: s.N % tile != 0)


# Features of a shape that split a run's verdicts: (what, true of the failing cases).
SPLITS = [*(not_multiple(t) for t in (16, 32, 64, 128)),
          ("d = 32", lambda s: s.d == 32), ("d = 64", lambda s: s.d == 64), ("B > 1", lambda s: s.B > 1)]


def listing_of(values) -> str:
    shown = sorted(set(values))
    return ", ".join(map(str, shown[:4])) + (", ..." if len(shown) > 4 else "")


def split_findings(passed: list[Shape], failed: list[Shape]) -> list[Finding]:
    """Features true of every failing case and of no passing one ("fails only where N is not a
    multiple of 32", "only d = 32", "only B > 1"), and an N from which every case fails."""
    if not passed or not failed:
        return []
    found = []
    for what, holds in SPLITS:
        if all(holds(s) for s in failed) and not any(holds(s) for s in passed):
            axis = "N" if what.startswith("N") else what[0]
            found.append(Finding("split", [
                f"split: fails only where {what} (failing {axis}: {listing_of(getattr(s, axis) for s in failed)}; "
                f"passing {axis}: {listing_of(getattr(s, axis) for s in passed)})"], dict(only_where=what)))
            if what.startswith("N is not"):
                break  # the smallest tile that splits says it; the larger ones follow from it
    lowest = min(s.N for s in failed)
    if not found and all(s.N < lowest for s in passed):
        found.append(Finding("split", [
            f"split: fails from N = {lowest} on, passes up to N = {max(s.N for s in passed)} (a buffer sized for a "
            "largest N, shared memory or registers that grow with N?)"], dict(from_N=lowest)))
    return found


SUGGESTED = 2  # cases suggested at most


def suggestions(passed: list[Shape], failed: list[Shape], suite_cases: dict) -> Finding | None:
    """Where every case failed, cases that would split the verdicts: the other d, B = 1, an N that
    is no multiple of 32 (fa gen makes the inputs the suites lack)."""
    if passed or not failed:
        return None
    d = failed[0].d
    everything = "the one case run failed" if len(failed) == 1 else f"all {len(failed)} cases run failed"
    ideas = []
    if all(s.d == d for s in failed):
        other = [c for c in suite_cases.values() if c.shape.d != d]
        if other:
            c = min(other, key=lambda c: c.shape.flops)
            ideas.append(f"fa run {c.name} (d = {c.shape.d}; every case run has d = {d})")
    smallest = min(failed, key=lambda s: s.flops)
    if all(s.B > 1 for s in failed):
        ideas.append(f"fa gen -B 1 -N {smallest.N} -d {smallest.d} -o b1.in, then fa run b1.in (B = 1; every case "
                     "run has B > 1)")
    if all(s.N % 32 == 0 for s in failed):
        ideas.append(f"fa gen -B 2 -N 1000 -d {smallest.d} -o n1000.in, then fa run n1000.in (N = 1000, not a "
                     "multiple of 32)")
    if not ideas:
        return None
    return Finding("suggest", [f"{everything}; to see which inputs fail: " + "; ".join(ideas[:SUGGESTED])],
                   dict(suggested=ideas))


def across_cases(passed: list[Shape], failed: list[Shape], suite_cases: dict, suggest: bool = True) -> list[Finding]:
    """What the verdicts of one run say together: a 32-bit size, a split, or (with suggest, where
    neither shows) cases to run."""
    size = size_finding(passed, failed)
    splits = [f for f in split_findings(passed, failed) if not (size and "from_N" in f.fields)]  # size says more
    found = ([size] if size else []) + splits
    hint = suggestions(passed, failed, suite_cases) if suggest and not found else None
    return found + ([hint] if hint else [])


def investigate(program: Program, target: Target, verdict: str, signal: str | None, tol: float,
                launcher: Launcher | None, say: Callable[[str], None], budget_s: float = BUDGET_S,
                output_dir: Path | None = None, judged=None) -> list[Finding]:
    """Every step that applies to this case, within budget_s seconds; judged: the judged output's
    judge.JudgedOutput, where it failed."""
    correct = expected.output_of(target)
    with locations.scratch("why", output_dir) as tmp:
        inquiry = Investigation(program, target, verdict, signal, correct, tol, launcher, say, budget_s, judged)
        return inquiry.run(Path(tmp))


# ---------------------------------------------------------------- a run's failures
def smallest_failure(results: list) -> object | None:
    """The failing case (WRONG or ERROR) with the least work: where the tools are fastest."""
    failed = [r for r in results if r.verdict in ("WRONG", "ERROR")]
    return min(failed, key=lambda r: (r.target.shape.flops, r.target.shape.input_bytes), default=None)


def explain(results: list, options, say: Callable[[str], None], budget_s: float = BUDGET_S,
            chosen: object | None = None) -> list[Finding]:
    """Investigate the smallest failing case (or `chosen`, whatever its verdict) and add what was
    found to its diagnosis; return what the verdicts say across all cases (across_cases)."""
    passed = [r.target.shape for r in results if r.verdict == "PASS"]
    failed = [r.target.shape for r in results if r.verdict in ("WRONG", "ERROR")]
    wrong = [r.target.shape for r in results if r.verdict == "WRONG"]
    case = chosen or smallest_failure(results)
    findings = []
    if case is not None and budget_s > 0 and case.verdict != "TLE":
        findings = investigate(case.program, case.target, case.verdict, signal_name(case.run.returncode),
                               options.tol, options.launcher, say, budget_s, options.output_dir, case.judged)
        if case.diagnosis is None:
            case.diagnosis = Diagnosis([], {})
        for f in findings:
            case.diagnosis.lines += f.lines
        case.diagnosis.fields["causes"] = [dict(kind=f.kind, lines=f.lines, **f.fields) for f in findings]
    # cases to run are suggested only where every failure is a wrong answer and nothing was named:
    # a mistake, a race or a crash says more
    named = any(f.is_cause for f in findings) or any(r.diagnosis and r.diagnosis.fields.get("looks_like")
                                                     for r in results)
    return across_cases(passed, failed, suite.cases("c"), suggest=len(wrong) == len(failed) and not named)
