"""Here, after class_and_alone.sh: each student's row of the class table against the row that fa run
of the same program alone gives (alone.sh's records, words and exit status), column by column: the
cases passed, each case's verdict, the cause and the warnings (times differ run to run: each case's
is shown where its verdict differs).

Usage: python3 scripts/device/rows_alone.py CLASS_FOLDER ALONE_FOLDER"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from fa_cli.classroom import table
from fa_cli.report import records

COMPARED = ("passed", "cause", "warnings")


def alone_record(folder: Path, student: str, class_record: dict) -> dict:
    """fa run's results for one student, as a class record holds them."""
    code, seconds = (folder / f"{student}.rc").read_text().split()
    return dict(class_record, runs=records.load(folder / f"{student}.json"), exit_code=int(code),
                words=(folder / f"{student}.words").read_text(errors="replace"),
                errors=(folder / f"{student}.errors").read_text(errors="replace"), seconds=float(seconds))


def differences(in_class: dict, alone: dict) -> list[str]:
    """What differs between two rows: the compared columns, then each case whose verdict differs."""
    said = [f"{column}: class {in_class.get(column)!r} / alone {alone.get(column)!r}"
            for column in COMPARED if in_class.get(column) != alone.get(column)]
    for case in sorted(set(in_class) | set(alone)):
        if case[:1] == "c" and case[1:].isdigit():
            ours, theirs = str(in_class.get(case)), str(alone.get(case))
            if ours.split()[0] != theirs.split()[0]:
                said.append(f"{case}: class {ours} / alone {theirs}")
    return said


def main(class_folder: Path, alone_folder: Path) -> int:
    same = 0
    students = sorted(p.stem for p in alone_folder.glob("*.rc"))
    for student in students:
        kept = next((class_folder / "records").glob(f"{student}.*.json"))
        in_class = json.loads(kept.read_text())
        alone = alone_record(alone_folder, student, in_class)
        said = differences(table.row_of(in_class), table.row_of(alone))
        same += not said
        print(f"{student}: " + ("the same row" if not said else "differs"), f"(alone {alone['seconds']:.0f} s)")
        for line in said:
            print(f"  {line}")
    print(f"{same} of {len(students)} rows the same")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
