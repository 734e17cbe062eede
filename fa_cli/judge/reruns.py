"""A failing case run again: on a copy of its first batches where it is large, each run checked
against the correct output, the judged one and the others: intermittent, a race, or harmless."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..cases.format import HEADER_BYTES, Shape, header_bytes, open_output
from ..cases.suite import Target
from ..programs import programs
from ..programs.programs import Launcher, Program
from .findings import Finding, Kind

MAX_RUNS = 6  # runs of the trial case, the judged one counted, while every run agrees (a race shows in
# the first few: 3 reruns more after the first sign; 9 agreeing reruns took 23 s of 60 beside 5 other judges)
RERUN_SHARE = 0.25  # of the budget the reruns may take while they agree (the sanitizers and probes need the rest)
RERUNS_AFTER_EVIDENCE = 3  # reruns made before stopping at the first sign of a race
REDUCED_BATCHES = 2  # batches of a large case's copy the tools run on
RACECHECK_ROWS = 512  # rows of Q, K and V in racecheck's first, cut input
REDUCE_ABOVE_BYTES = 16 << 20  # inputs larger than this are tried on such a copy first
# What a result that depends on timing comes from, in the words of the program's kind.
RACE_WORDS = {
    "cpu": "threads sharing a variable without a lock or a reduction, or a value read before it is written",
    "cuda": "a missing __syncthreads, threads writing one place, or memory read before it is written",
    "hip": "a missing __syncthreads, threads writing one place, or memory read before it is written",
}


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
    return TrialCase(label, path, shape, None if correct is None else correct[:REDUCED_BATCHES])


def one_batch(case: TrialCase, work: Path, rows: int | None = None, batch: int = 0) -> TrialCase | None:
    """A batch of the trial case (batch 0 unless said) as an input of its own, its Q, K and V cut
    to their first `rows` rows (None: all N); None where that is the trial case itself."""
    s = case.shape
    N = s.N if rows is None else min(rows, s.N)
    if s.B == 1 and N == s.N:
        return case if rows is None else None
    shape = Shape(1, N, s.d)
    path = work / f"batch{batch}-{N}.in"
    with open(case.input_path, "rb") as src, open(path, "wb") as dst:
        dst.write(header_bytes(shape))
        for part in range(3):  # Q, K, V of the batch, each cut to N rows
            src.seek(HEADER_BYTES + (3 * batch + part) * s.N * s.d * 4)
            dst.write(src.read(N * s.d * 4))
    cut = f", the first {N} rows of its Q, K and V" if N < s.N else ""
    # racecheck looks at accesses, not values: the cut input's correct output is not needed (nor known)
    return TrialCase(f"batch {batch} of {case.label}{cut} ({shape.B}x{shape.N}x{shape.d})", path, shape,
                     None if case.expected is None else case.expected[batch:batch + 1, :N])


def run_once(program: Program, case: TrialCase, out: Path, launcher: Launcher | None, timeout: float):
    """Run the program; its output as an array (None if it wrote none of the right size)."""
    result = programs.run(program, case.input_path, out, launcher, timeout=timeout, timed=False)
    if result.timed_out or not out.exists() or out.stat().st_size != case.shape.output_bytes:
        return result, None
    return result, np.array(open_output(out, case.shape))


SCALED_FIT = 1e-3  # a wrong row is the right one times a factor where the rest misses by under this (relative)


def row_factors(got: np.ndarray, correct: np.ndarray, wrong: np.ndarray) -> np.ndarray | None:
    """Where every wrong row is the right row times a factor of its own (not 1, not 0): the factors;
    None otherwise (a row of zeros is not one: nothing was written there)."""
    rows = wrong.any(axis=2)
    g, c = got[rows].astype(np.float64), correct[rows].astype(np.float64)
    if not g.size or not np.isfinite(g).all():
        return None
    factor = (g * c).sum(axis=1) / np.maximum((c * c).sum(axis=1), 1e-300)
    miss = np.abs(g - factor[:, None] * c).max(axis=1) / np.maximum(np.abs(c).max(axis=1), 1e-30)
    if (miss > SCALED_FIT).any() or (np.abs(factor - 1) < SCALED_FIT).any() or (np.abs(factor) < SCALED_FIT).any():
        return None
    return factor


def over(a: np.ndarray, b: np.ndarray, tol: float) -> np.ndarray:
    """Where a and b differ by more than tol (NaN counts, a signalling one without numpy's warning)."""
    with np.errstate(invalid="ignore"):
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
        self.batches_differ = np.zeros(case.shape.B, dtype=bool)  # batches with a value over tol between runs
        self.wrong_outputs = 0  # reruns with an output that fails
        self.rows_scaled = 0  # of them, those whose every wrong row is the right row times a factor of its own

    @property
    def count(self) -> int:
        return len(self.failed)

    def passes(self, got: np.ndarray | None, returncode: int = 0) -> bool:
        """A run passes where its output does and it ends with status 0."""
        return not returncode and got is not None and not over(got, self.case.expected, self.tol).any()

    def add(self, got: np.ndarray | None, returncode: int = 0) -> None:
        """One run more: it fails where its output does, or where it ends with an exit status of its
        own (a run whose output is right and whose status is not fails every time, not now and then)."""
        self.reruns += 1
        self.failed.append(not self.passes(got, returncode))
        if got is None:
            self.no_output += 1
            return
        if self.failed[-1]:
            self.wrong_outputs += 1
            wrong = over(got, self.case.expected, self.tol)
            self.rows_scaled += row_factors(got, self.case.expected, wrong) is not None
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
            self.batches_differ |= differ.reshape(len(differ), -1).any(axis=1)
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
                      values_changed=self.changed, reruns_unlike_judged=self.unlike_judged,
                      batches_differ=[int(b) for b in np.flatnonzero(self.batches_differ)])
        found = []
        if self.intermittent:
            found.append(Finding(Kind.INTERMITTENT, [
                f"intermittent: failed {k} of {n} runs on {on} ({counted}): a result that depends on timing: {words}"],
                fields))
        last_only = len(self.batches_differ) > 1 and self.batches_differ[-1] and not self.batches_differ[:-1].any()
        if self.over and last_only:  # a race, or what lies past a buffer's end: the runs cannot tell which
            found.append(Finding(Kind.RACE, [
                f"the output changes between runs in its last batch only: {self.over} of {self.case.expected.size} "
                f"values differ by more than {self.tol:g} (up to {self.worst:.3g}) on {on}, no value of the batches "
                f"before it by more than {self.tol:g}, failed {k} of {n} runs: a race in the last batch's blocks, or "
                "memory past the end of a buffer read there (past the input, or a host buffer one batch short), "
                "whose contents change from run to run"], fields))
        elif self.over:
            why = "" if found else f"; a result that depends on timing is a race ({words})"
            if self.rows_scaled == self.wrong_outputs >= 2:
                why += SCALED_RACE
            found.append(Finding(Kind.RACE, [
                f"race: the output changes between runs: {self.over} of {self.case.expected.size} values differ by "
                f"more than {self.tol:g} (up to {self.worst:.3g}) on {on}, failed {k} of {n} runs{why}"], fields))
        elif self.unlike_judged == self.compared_with_judged > 0 and not self.changed and not self.intermittent:
            # the reruns agree, bit for bit, and the judged run is the odd one out
            found.append(Finding(Kind.INTERMITTENT, [
                f"intermittent: the judged run wrote other values than all {self.compared_with_judged} reruns on {on}, "
                "which agree with each other bit for bit (by how much fa cannot tell: it keeps a digest of the "
                f"judged output): a result that changed between runs: {words}"], fields))
        if 0 < self.no_output < self.reruns:
            found.append(Finding(Kind.INTERMITTENT, [
                f"intermittent: {self.no_output} of {self.reruns} reruns on {on} wrote no output of the right size, "
                "the others did (a crash or an exit that comes and goes)"], fields))
        elif self.changed and not found:
            found.append(Finding(Kind.HARMLESS, [
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


SCALED_RACE = ("; in every failing rerun each wrong row is the right row times a factor of its own, the factors "
               "changing from run to run: the right weights over a sum that lost some of its parts, or the reverse (a "
               "row's sum l, or its output, added to by several blocks or threads with a plain += where an atomicAdd "
               "belongs, or read before every part was added)")


def plural_runs(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"
