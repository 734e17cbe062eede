#!/usr/bin/env python3
"""fa run with the main thread's wall time split by step: where a suite run's time goes over the
program's own runs (docs/commands.md, "How long a re-run takes").

    python3 scripts/trace_run.py run --all --suite c --program hw4.cu

takes fa run's arguments and prints, after fa's own output, on stderr: the whole time, fa's
imports, each step's total and count (program runs, checks, draws and the waits for them, the
expected outputs, the race check, the floor, ...), and each input's drawing time.
"""
from __future__ import annotations

import atexit
import functools
import sys
import time
from pathlib import Path

START = time.perf_counter()
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fa_cli.cases import suite  # noqa: E402
from fa_cli.commands import group, run as run_command  # noqa: E402
from fa_cli.judge import expected, investigation, race_check, verdict, verify  # noqa: E402
from fa_cli.measure import floor, judge_column  # noqa: E402

IMPORTS_S = time.perf_counter() - START
SPENT: dict[str, list[float]] = {}  # step -> [calls, seconds]
DRAWS: list[str] = []  # "c11 0.261": each input's drawing time, in order

STEPS = [  # (module or class, function, what it is)
    (verdict, "run", "program runs"),
    (verdict, "judge", "judged cases (run + check)"),
    (verify, "against_expected", "checks against the expected output"),
    (verdict.CaseInputs, "target", "inputs: taken (drawn, or waited for)"),
    (verdict.CaseInputs, "settle", "inputs: waits for the draw ahead"),
    (verdict.CaseInputs, "__enter__", "inputs: set up"),
    (verdict.CaseInputs, "__exit__", "inputs: scratch removed"),
    (expected, "ensure", "expected outputs computed"),
    (run_command, "runnable", "the program built or checked"),
    (run_command, "outlook_of", "the outlook (the reference timed)"),
    (run_command, "show_results", "the table and its notes"),
    (judge_column, "for_results", "the judge GPU's estimate"),
    (floor, "measure", "the start-up floor"),
    (race_check, "check", "the race check of a passing build"),
    (investigation, "explain", "the search for a cause, the race check included"),
]


def timed(function, what: str):
    @functools.wraps(function)
    def step(*args, **kwargs):
        begun = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            entry = SPENT.setdefault(what, [0, 0.0])
            entry[0] += 1
            entry[1] += time.perf_counter() - begun
    return step


def timed_draw(write_case):
    @functools.wraps(write_case)
    def draw(case, *args, **kwargs):
        begun = time.perf_counter()
        try:
            return write_case(case, *args, **kwargs)
        finally:
            DRAWS.append(f"{case.name} {time.perf_counter() - begun:.3f}")
    return draw


def report() -> None:
    print(f"\ntrace: {time.perf_counter() - START:.2f} s in all; imports {IMPORTS_S:.2f} s", file=sys.stderr)
    for what, (calls, seconds) in sorted(SPENT.items(), key=lambda item: -item[1][1]):
        print(f"  {seconds:8.3f} s {calls:5d}x  {what}", file=sys.stderr)
    if DRAWS:
        print("  draws (s, any thread): " + ", ".join(DRAWS), file=sys.stderr)


def main() -> None:
    for owner, name, what in STEPS:
        setattr(owner, name, timed(getattr(owner, name), what))
    suite.write_case = timed_draw(suite.write_case)
    atexit.register(report)
    sys.argv = ["fa", *sys.argv[1:]]
    group.main()


if __name__ == "__main__":
    main()
