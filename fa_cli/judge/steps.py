"""One step of an investigation, and what the steps share.

Every way fa looks for a cause is a Step (investigation.py puts them in one ordered table): the
catalogue's lead, the runs again, the sanitizers, the debugger, the probes, the race check of a
passing build, the MI210 source hints. A step asks one question (applies: from what earlier steps
found), answers it in Findings whose every sentence states what was observed, and leaves what later
steps may use in the Context: its findings, the facts measured (Facts), the case the tools run on.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from ..cases.format import Shape, open_output
from ..programs import programs
from ..programs.programs import Launcher, Program
from .findings import Finding, Kind
from .reruns import run_once
from .tool_logs import Budget

RUN_TIMEOUT_S = 30.0  # one probe run at most (a probe input is small: seconds even for a slow program)


@dataclass
class Facts:
    """What the probes measured, for the steps after them."""

    out: np.ndarray | None = None  # the program's output on the probe input (B, N, d)
    true: np.ndarray | None = None  # the float64 output it should be
    raw: np.ndarray | None = None  # an output of the wrong size, its float32 values
    W: np.ndarray | None = None  # the weights read with one-hot V (B, N, N)
    P: np.ndarray | None = None  # the true weights softmax(Q K^T / sqrt(d))
    linear: bool = False  # the output is W V
    columns_mixed: bool = False  # a column of V with no 1 gave something: not W V
    probe_right: bool = False  # the probe input is judged right
    probe_fails: bool = False
    wrong_batches: np.ndarray | None = None
    dead_keys: np.ndarray | None = None
    query_side: bool = False  # ScoreInputs read K right, or rows whose scores differ where their Q was alike
    named: bool = False  # a mechanism is named: the later readings stand aside
    lanes_named: bool = False  # named by the 32-lane build alone: the linear map still reads the 64-lane one
    stop: bool = False  # nothing more to measure on probe inputs (no output, or one that changes)
    no_output: bool = False  # the probe input's runs wrote no output of the right size
    changes: bool = False  # two runs on the probe input differ: only hw4.hip's 32-lane build still tells


@dataclass
class Context:
    """What every step of one investigation shares: the program, how it runs, the time left, the
    case and what was found so far."""

    program: Program
    launcher: Launcher | None
    work: Path
    budget: Budget
    say: Callable[[str], None]
    tol: float
    probe: object | None  # probes.step.ProbeInput: the case's own Q and K at the probe's size, made when needed
    case_label: str  # the failing case, as fa names it
    case_path: Path | None = None  # its input file and shape: a probe of another size is cut from it
    case_shape: Shape | None = None
    kind: str = "cpu"  # cpu, cuda or hip: what the program runs its kernels on
    facts: Facts = field(default_factory=Facts)
    runs: int = 0
    raw: np.ndarray | None = None  # the last probe run's output, where it had the wrong size (float32 values)
    error: str | None = None  # the last probe run's own complaint (RunResult.error), where it failed
    guard: int = 0  # batches of drawn values written after each probe input's own, their output left out: a
    # program that reads past its input then reads them, not memory its own blocks are writing
    # the case looked into, and what its steps found
    target: object | None = None  # cases.suite.Target of the case
    verdict: str = "WRONG"
    signal: str | None = None  # the signal that ended the judged run
    launcher_says: str | None = None  # why the launcher ended the judged run (RunResult.launcher_says)
    run_stderr: str = ""  # what the judged run wrote on stderr (its launch log's lines among it)
    judged: object | None = None  # verdict.JudgedOutput of the judged run, where it failed
    right_before_exit: bool = False  # the judged run's output was whole and right, its exit status its own
    judged_run: bool = True  # False: a drawn input a run step found wrong (no judged run of it to count)
    correct: np.ndarray | None = None  # its expected output
    trial: object | None = None  # reruns.TrialCase: what the tools run on (a copy of the first batches, or all)
    whole: object | None = None  # reruns.TrialCase of the whole case
    hypothesis: list[str] = field(default_factory=list)  # what the catalogue said it looks like
    pattern: dict = field(default_factory=dict)  # where the judged output is wrong (diagnose.where_wrong)
    findings: list[Finding] = field(default_factory=list)
    done: list[str] = field(default_factory=list)  # steps that ran to the end and found nothing
    ended: bool = False  # nothing more can be learnt of this case (no GPU here, a host crash looked into)
    results: list = field(default_factory=list)  # the run's results, for the steps on the whole run

    @property
    def source(self) -> Path | None:
        return self.program.source

    @property
    def found_cause(self) -> bool:
        return any(f.is_cause for f in self.findings)

    def has(self, *kinds: Kind) -> bool:
        return any(f.kind in kinds for f in self.findings)

    def starting(self, what: str) -> bool:
        """Say a part of a step as it starts; False once the budget is spent."""
        if self.budget.left < 1:
            self.say(f"why {self.case_label}: out of time ({self.budget.seconds:g} s) before {what}")
            return False
        self.say(f"why {self.case_label}: {what} ({self.budget.used:.0f} s of {self.budget.seconds:g} s)")
        return True

    def run_trial(self, program: Program, name: str):
        """(the run's result, its output on the trial case, None where it wrote none of the right
        size): the program, or a variant of it (a setting, the device made slower), within
        RUN_TIMEOUT_S and the budget; the output at WORK/NAME."""
        return run_once(program, self.trial, self.work / name, self.launcher, min(RUN_TIMEOUT_S, self.budget.left))

    def on_node(self, argv: list[str]) -> list[str]:
        """A tool's command where the program runs: here, or on a cluster node through srun."""
        return (self.launcher or Launcher()).wrap(argv)

    def run(self, inp, program: Program | None = None) -> np.ndarray | None:
        """The program's output on a probe input (B, N, d) float32, or None where it wrote none of
        the right size, crashed or ran out of time."""
        self.runs += 1
        path, out = self.work / "probe.in", self.work / "probe.out"
        inp.write(path, self.guard)
        written = Shape(inp.shape.B + self.guard, inp.shape.N, inp.shape.d)
        out.unlink(missing_ok=True)
        timeout = min(RUN_TIMEOUT_S, max(1.0, self.budget.left))
        result = programs.run(program or self.program, path, out, self.launcher, timeout=timeout, timed=False)
        self.raw, self.error = None, result.error
        if result.timed_out or result.returncode != 0 or not out.exists():
            return None
        if out.stat().st_size != written.output_bytes:
            size = out.stat().st_size
            if size % 4 == 0 and 0 < size <= 4 * written.output_bytes:  # kept for the layout's search
                self.raw = np.fromfile(out, dtype="<f4")
            return None
        return np.array(open_output(out, written)[:inp.shape.B], dtype=np.float32)


class Step:
    """One question of an investigation: where it applies, and what it observed."""

    name = "step"  # as the progress line says it
    measures = False  # a step that runs the program on probe inputs (probes/): the case's probe is made for it

    def applies(self, ctx: Context) -> bool:
        """Whether the step has something to look at, from what the steps before it found."""
        return True

    def run(self, ctx: Context) -> list[Finding]:
        raise NotImplementedError
