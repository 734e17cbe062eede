"""The class table: one row per student and platform, from the records judging.py keeps: the
build, each case's verdict and time, what passed, the judge's GPU's estimate, the cause fa named,
the hazards fa run warned of in a passing build, whether it ran confined. Written as CSV and JSON, shown on the terminal."""
from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

from rich.table import Table

from ..files import atomic_file
from ..judge import race_check
from ..judge.diagnose import signal_name
from ..judge.findings import CAUSES
from ..report.tables import plural

COLUMNS = ("student", "platform", "build", "passed", "time_s", "judge_gpu_s", "cause", "warnings", "sandboxed")
CAUSE_CHARS = 400  # the cause column's length: the cause named, then where the values are wrong
WARNING = (race_check.PASSING, race_check.FAILING)  # how fa run starts a build's hazard (what the sanitizers saw)


def row_of(record: dict) -> dict:
    """A record as the table's row: its fixed columns, then each case's verdict and time."""
    runs = record.get("runs") or []
    row = dict(student=record["student"], platform=record["platform"],
               build=f"error: {record['build_error']}" if record.get("build_error") is not None else
               f"ok; {record['build_note']}" if record.get("build_note") else "ok",
               sandboxed="yes" if record.get("sandboxed") else "NO")
    row["passed"] = f"{sum(r.get('verdict') == 'PASS' for r in runs)}/{len(record['cases'])}" if runs else "-"
    row["time_s"] = round(sum(r.get("wall_s") or 0 for r in runs), 3) if runs else None
    estimates = [r["judge_gpu_s"]["mid"] for r in runs if r.get("judge_gpu_s")]
    row["judge_gpu_s"] = round(sum(estimates), 3) if estimates and len(estimates) == len(runs) else None
    row["cause"] = cause_of(record)
    row["warnings"] = " ".join(l.strip() for l in (record.get("words") or "").splitlines()
                               if l.strip().startswith(WARNING))[:300]
    for r in runs:
        row[r["input"]] = f"{r.get('verdict')} {r['wall_s']:.3f}" if r.get("wall_s") is not None else r.get("verdict")
    return row


def cause_of(record: dict) -> str:
    """What fa said of it in one line: its build error, why it was not run, or a failing case's
    diagnosis: the cause fa named first (the case where it named one), then the case's first line
    (where the values are wrong, the error); a terminal shows the start of the column."""
    if record.get("build_error") is not None:
        return "does not build (the build column)"
    runs = record.get("runs") or []
    if not runs:  # fa run stopped before any case: its own line says why (no GPU here, say)
        said = [l.removeprefix("fa: error: ") for l in record.get("errors", "").splitlines() if l.strip()]
        code = record.get("exit_code")
        killed = signal_name(code) if isinstance(code, int) and code < 0 else None
        return "not run: " + (_briefly(said[-1]) if said else f"fa run was killed by {killed}" if killed else
                              f"fa run ended with exit status {code}")
    failed = [r for r in runs if r.get("verdict") != "PASS"]
    for r in sorted(failed, key=lambda r: not named_cause(r)):  # a case with a cause named first
        text = r.get("diagnosis_text") or [r.get("error") or r.get("verdict")]
        text = text if isinstance(text, list) else [text]
        named = named_cause(r)
        said = [named, text[0]] if named and named not in text[0] else text
        return f"{r['input']}: " + "; ".join(said)[:CAUSE_CHARS]
    return ""


def named_cause(run: dict) -> str:
    """The first cause fa's investigation named for a case (a mechanism measured, a race, a crash,
    a sanitizer's report), in one line; "" where it named none."""
    causes = (run.get("diagnosis") or {}).get("causes") or []
    return next((" ".join(c["lines"]) for c in causes if c.get("kind") in CAUSES and c.get("lines")), "")



def _briefly(line: str) -> str:
    """fa run's line for a row: its "hw4.cu builds (PATH); " said by the build column already, and
    the class folder's paths to a source as the source's name."""
    line = re.sub(r"^\S+ builds \([^)]*\); ", "", line)
    return re.sub(r"(?<!\S)/\S*/(hw4\.(?:cu|hip|cpp))\b", r"\1", line)

def rows_of(records: list[dict]) -> tuple[list[str], list[dict]]:
    rows = [row_of(r) for r in records]
    cases = list(dict.fromkeys(c for r in records for c in r["cases"]))
    return [*COLUMNS, *cases], rows


def write(folder: Path, records: list[dict]) -> tuple[Path, Path]:
    """CLASS/class.csv and CLASS/class.json, each whole or not at all."""
    header, rows = rows_of(records)
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=header, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    paths = folder / "class.csv", folder / "class.json"
    with atomic_file(paths[0]) as f:
        f.write(text.getvalue().encode())
    write_json(paths[1], {"columns": header, "rows": rows})
    return paths


def write_json(path: Path, content: dict) -> None:
    with atomic_file(path) as f:
        f.write(json.dumps(content, indent=1).encode())


def terminal_table(records: list[dict]) -> Table:
    """The table for a terminal: the fixed columns, and the cases that did not pass in one column
    (a suite's 30 case columns do not fit a terminal; the files keep them all)."""
    _, rows = rows_of(records)
    shown = [c for c in COLUMNS if c != "judge_gpu_s" or any(r.get(c) is not None for r in rows)]
    table = Table(title="fa class", title_justify="left")
    for column in (*shown, NOT_PASSED):
        table.add_column(column, overflow="fold", max_width=SHOWN_WIDTH if column in ("build", "cause") else None)
    for record, row in zip(records, rows):
        cells = ["" if row.get(c) is None else _shown(str(row.get(c))) for c in shown]
        table.add_row(*cells, _shown(not_passed(record)))
    return table


NOT_PASSED = "not passed"


def not_passed(record: dict) -> str:
    """The cases that did not pass, each with its verdict (c07 FAIL), then those not run where some
    were (a run stopped part way); empty only where every case passed, or none ran (the cause says why)."""
    runs = record.get("runs") or []
    said = [f"{r['input']} {r.get('verdict')}" for r in runs if r.get("verdict") != "PASS"]
    ran = {r["input"] for r in runs}
    unrun = [c for c in record.get("cases", []) if c not in ran]
    return " ".join(said + ([f"not run: {' '.join(unrun)}"] if runs and unrun else []))


SHOWN_WIDTH = 48  # the build and cause columns on the terminal: their start (the files hold them whole)


def _shown(text: str) -> str:
    return text if len(text) <= 2 * SHOWN_WIDTH else text[: 2 * SHOWN_WIDTH - 1] + "…"


def summary(records: list[dict], csv_path: Path) -> str:
    passing = sum(1 for r in records if r.get("runs") and all(x.get("verdict") == "PASS" for x in r["runs"])
                  and len(r["runs"]) == len(r["cases"]))
    broken = sum(1 for r in records if r.get("build_error") is not None)
    unrun = sum(1 for r in records if r.get("build_error") is None and not r.get("runs"))
    failing = len(records) - passing - broken - unrun
    students = len({r["student"] for r in records})
    return (f"{plural(students, 'student')}, {plural(len(records), 'program')}: {passing} pass every case, "
            f"{failing} do not, {broken} do not build, {unrun} not run; the table: {csv_path}")
