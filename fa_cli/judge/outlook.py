"""What a run of several cases will take, said before it starts and counted while it goes: the
program's runs (each stopped at its case's limit) and the expected outputs computed once (timed
by expected.seconds_each). The time left is of what remains: every remaining case's expected
output, and its run at the rate the cases done so far ran at (seconds per FLOP), capped by its
limit. The course's limits are its GPUs': a program that runs on the CPU is told so first."""
from __future__ import annotations

from ..cases import suite
from ..programs.programs import Program
from . import expected
from .tool_logs import gpu_kind

# A case's run before any has been timed: a GPU program's start-up and file I/O.
FIRST_GUESS_S = 0.5


class Outlook:
    def __init__(self, names: list[str], needs: list[expected.Need], program: Program):
        self.cases = {n: suite.case(n) for n in names if suite.is_case_name(n)}
        self.names = list(names)
        self.program = program
        big = sum(n.shape.flops for n in needs) > expected.ANNOUNCE_FLOPS
        each = expected.seconds_each(expected.backend(), needs) if big else [0.0] * len(needs)
        self.reference = {n.input_path.name: s for n, s in zip(needs, each)}  # by input file name
        self.flops_done = self.seconds_done = 0.0
        self.left_names = list(names)

    def judged(self, name: str, wall_s: float, stopped_at_limit: bool) -> None:
        """A case done: its run teaches the rate (a run stopped at its limit teaches nothing)."""
        if name in self.left_names:
            self.left_names.remove(name)
        case = self.cases.get(name)
        if case is not None and not stopped_at_limit:
            self.flops_done += case.shape.flops
            self.seconds_done += wall_s
        self.reference.pop(f"{name}.in", None)

    def run_estimate(self, case: suite.Case) -> float:
        if self.flops_done > 0:
            guess = self.seconds_done / self.flops_done * case.shape.flops
        else:
            guess = FIRST_GUESS_S
        return min(guess, case.time_limit) if case.time_limit else guess

    def seconds_left(self) -> float | None:
        """None where an input file's cost is not known yet (no case done): the caller's share of
        the steps says it instead."""
        if self.flops_done == 0 and any(n not in self.cases for n in self.left_names):
            return None
        runs = sum(self.run_estimate(self.cases[n]) if n in self.cases else FIRST_GUESS_S for n in self.left_names)
        return runs + sum(self.reference.values())

    def reference_seconds(self) -> float:
        return sum(self.reference.values())

    def up_front(self) -> str | None:
        """For a program that runs on the CPU and suite cases with limits: that the limits are the
        course GPUs', and what the whole run may take."""
        limited = [c for c in self.cases.values() if c.time_limit]
        if gpu_kind(self.program) != "cpu" or len(limited) < 2:
            return None
        most = sum(c.time_limit for c in limited)
        lo, hi = min(c.time_limit for c in limited), max(c.time_limit for c in limited)
        span = f"{lo:g} s a case" if lo == hi else f"{lo:g} to {hi:g} s a case"
        reference = self.reference_seconds()
        computing = f" and about {reference:.0f} s computing their expected outputs once" if reference >= 1 else ""
        return (f"the time limits ({span}) are the course GPUs' (a GTX 1080, an MI210); {self.program.name} runs on "
                f"the CPU, where the large cases reach them (TLE there says so, not that the code is wrong). This "
                f"run: up to {most:.0f} s of runs (each stopped at its limit){computing}.")
