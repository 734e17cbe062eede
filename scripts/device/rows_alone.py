"""Here, after class_and_alone.sh: each student's row of the class table against the row that fa run
of the same program alone gives (alone.sh's records, words and exit status), column by column: the
cases passed, each case's verdict, the cause and the warnings (times differ run to run: each case's
is shown where its verdict differs). A row that differs only in what the tools report differently
from run to run (memcheck's error count and first thread, racecheck's hazard count, an address, the
values a race changed, a stopped run's hundredths) is counted apart, the figures shown; so is a
verdict that flipped between PASS and TLE where the passing run came within NEAR_LIMIT of its limit.

Usage: python3 scripts/device/rows_alone.py CLASS_FOLDER ALONE_FOLDER"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from fa_cli.classroom import table
from fa_cli.report import records

COMPARED = ("passed", "cause", "warnings")
NEAR_LIMIT = 0.10  # a time this close to its limit (either side) may fall on either side from run to run
RUN_TO_RUN = (  # what a tool or a race reports differently between two runs of one build
    (r"\(\d+ errors in all\)", "(N errors in all)"), (r"\(\d+ in all\)", "(N in all)"),
    (r"\[\d+ hazards\]", "[N hazards]"), (r"by thread \(\d+,\d+,\d+\) in block \(\d+,\d+,\d+\)", "by thread T in block K"),
    (r"\b(Access to|Address) 0x[0-9a-f]+", r"\1 ADDRESS"), (r"after \d+\.\d+ s", "after T s"),
)
RACED = (  # a race's figures: as many wrong values as the run's schedule made (only where a race is said)
    (r"\d+ of \d+ values checked \([\d.]+%\)", "N values checked"),
    (r"\d+ of \d+ values differ by more than ([\d.e-]+) \(up to [^)]*\)", r"N of M values differ by more than \1 (up to X)"),
)


def without_run_to_run(text: str) -> str:
    raced = "changes between runs" in text
    for pattern, placeholder in RUN_TO_RUN + (RACED if raced else ()):
        text = re.sub(pattern, placeholder, text)
    return text


def near_limit(in_class: str, alone: str, limit: float | None) -> bool:
    """A verdict that flipped between PASS and TLE where the passing run came within NEAR_LIMIT of
    the limit (a stopped run's time is the limit's, whatever the program would have taken)."""
    verdicts = {in_class.split()[0], alone.split()[0]}
    passed = next((v for v in (in_class, alone) if v.split()[0] == "PASS"), "")
    return (limit is not None and verdicts == {"PASS", "TLE"} and len(passed.split()) == 2
            and float(passed.split()[1]) >= (1 - NEAR_LIMIT) * limit)


def alone_record(folder: Path, student: str, class_record: dict) -> dict:
    """fa run's results for one student, as a class record holds them."""
    code, seconds = (folder / f"{student}.rc").read_text().split()[:2]  # then the GPU, where said
    return dict(class_record, runs=records.load(folder / f"{student}.json"), exit_code=int(code),
                words=(folder / f"{student}.words").read_text(errors="replace"),
                errors=(folder / f"{student}.errors").read_text(errors="replace"), seconds=float(seconds))


def differences(in_class: dict, alone: dict, limits: dict[str, float]) -> tuple[list[str], list[str]]:
    """What differs between two rows: (the differences, those of them that runs of one build differ
    by too: the tools' run-to-run figures, and verdicts of a time near its limit). The compared
    columns, then each case whose verdict differs; "passed" follows the cases'."""
    said, run_to_run = [], []
    for column in COMPARED:
        ours, theirs = in_class.get(column), alone.get(column)
        if ours != theirs:
            line = f"{column}: class {ours!r} / alone {theirs!r}"
            said.append(line)
            if column != "passed" and without_run_to_run(str(ours)) == without_run_to_run(str(theirs)):
                run_to_run.append(line)
    cases = [c for c in sorted(set(in_class) | set(alone)) if c[:1] == "c" and c[1:].isdigit()]
    flipped = [c for c in cases if str(in_class.get(c)).split()[0] != str(alone.get(c)).split()[0]]
    for case in flipped:
        line = f"{case}: class {in_class.get(case)} / alone {alone.get(case)}{spread(in_class, alone, case)}"
        said.append(line)
        if near_limit(str(in_class.get(case)), str(alone.get(case)), limits.get(case)):
            run_to_run.append(line)
    near = all(near_limit(str(in_class.get(c)), str(alone.get(c)), limits.get(c)) for c in flipped)
    for line in said:  # a passed count, or a cause of a time limit, that moved with a verdict near its limit
        moved = line.startswith("passed:") or (line.startswith("cause:") and "time limit" in line)
        if moved and flipped and near and line not in run_to_run:
            run_to_run.append(line)
    return said, run_to_run


def spread(in_class: dict, alone: dict, flipped: str) -> str:
    """Where a case's verdict flipped on a time: how far the same program's other cases' times lie
    apart between the same two runs (the largest ratio, with its case), for the reader to weigh."""
    def seconds(row: dict, case: str) -> float | None:
        parts = str(row.get(case)).split()
        return float(parts[1]) if len(parts) == 2 and parts[0] == "PASS" else None
    ratios = [(max(a, b) / min(a, b), c, a, b) for c in in_class if c[:1] == "c" and c[1:].isdigit() and c != flipped
              and (a := seconds(in_class, c)) and (b := seconds(alone, c))]
    if not ratios:
        return ""
    ratio, case, a, b = max(ratios)
    return f" (its other cases' times between the two runs: up to x{ratio:.2f}, {case} {a:.3f} / {b:.3f})"


def main(class_folder: Path, alone_folder: Path) -> int:
    same = tools_only = 0
    students = sorted(p.stem for p in alone_folder.glob("*.rc"))
    for student in students:
        kept = next((class_folder / "records").glob(f"{student}.*.json"))
        in_class = json.loads(kept.read_text())
        alone = alone_record(alone_folder, student, in_class)
        limits = {r["input"]: r.get("time_limit") for r in in_class.get("runs") or []}
        said, run_to_run = differences(table.row_of(in_class), table.row_of(alone), limits)
        same += not said
        tools_only += bool(said) and len(run_to_run) == len(said)
        verdict = ("the same row" if not said else "differs only as runs of one build do"
                   if len(run_to_run) == len(said) else "differs")
        print(f"{student}: {verdict} (alone {alone['seconds']:.0f} s)")
        for line in said:
            print(f"  {'(run to run) ' if line in run_to_run else ''}{line}")
    print(f"{same} of {len(students)} rows the same; {tools_only} more differ only as runs of one build do "
          f"(the tools' run-to-run figures, a verdict within {NEAR_LIMIT:.0%} of its limit)")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
