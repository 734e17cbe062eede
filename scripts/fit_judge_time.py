#!/usr/bin/env python3
"""Fit and check fa's estimate of the judge's GTX 1080 time.

    python3 scripts/fit_judge_time.py OBSERVED.json [--published data/judge_time/published.csv]
        [--sources DIR] [--write]

OBSERVED.json comes from scripts/observe_judge_time.py (students' programs run here, per case).
data/judge_time/published.csv holds the published GTX 1080 times of those programs, each with
where it was printed: `fit` rows calibrate, `check` rows (programs the fit never sees) test.

Prints, for the model and for a baseline that knows only each case's shape: the parameters
fitted on every fit row, and with each program left out in turn (every parameter refitted)
the median and 90th percentile of |log(estimate / published)|, the share of published times
inside their range and the widest range; then the same for the check rows under the full fit.
Versions of one student's program count as one program. The GTX 1080's blocks an SM are counted
with each kernel's sm_61 registers where known: OBSERVED.json's sm61_registers (the observation
script keeps them where CUDA 12's ptxas is installed), or --sources DIR, whose DIR/LABEL/hw4.cu
are the observed programs' sources (their sm_61 reports made here). --write saves the fit and
its check into fa_cli/measure/judge_time_gtx1080.json, which fa run reads.
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from fa_cli.cases.format import Shape  # noqa: E402
from fa_cli.measure import gtx1080_report, judge_time  # noqa: E402
from fa_cli.measure.floor import Floor  # noqa: E402
from fa_cli.programs.timing import Launch, SmLimits  # noqa: E402

ALL = [f"c{i:02d}" for i in range(1, 31)]


def family(label: str) -> str:
    """One student's versions are one program: dasbd72-v3 and dasbd72-v7 are left out together."""
    return label.rsplit("-v", 1)[0]


def observed_parts(observed: dict, label: str, case: str, shape_only: bool) -> judge_time.Parts | None:
    floor = Floor(**observed["floor"])
    row = next((r for r in observed["programs"].get(label, []) if r["case"] == case and "wall_s" in r), None)
    if row is None:
        return None
    if shape_only:
        return judge_time.shape_only(Shape(*row["shape"]))
    launches = [Launch(**{**l, "grid": tuple(l["grid"]), "block": tuple(l["block"])}) for l in row["launches"]]
    registers = observed.get("sm61_registers", {}).get(label)
    return judge_time.parts(Shape(*row["shape"]), row["wall_s"], launches, SmLimits(**row["gpu"]), floor,
                            judge_registers=registers)


def points(observed: dict, rows: list[dict], shape_only: bool):
    names, found, published, missing = [], [], [], []
    for row in rows:
        cases = ALL if row["case"] == "all" else [row["case"]]
        parts = [observed_parts(observed, row["program"], c, shape_only) for c in cases]
        if any(p is None for p in parts):
            missing.append(f"{row['program']} {row['case']}")
            continue
        names.append(family(row["program"]))
        found.append(parts)
        published.append(float(row["seconds"]))
    return names, found, published, missing


def summary(check: judge_time.Check) -> dict:
    return {"points": check.points, "median_x": round(math.exp(check.median_abs_log), 3),
            "p90_x": round(math.exp(check.p90_abs_log), 3), "covered": round(check.covered, 3),
            "widest_x": round(math.exp(check.widest), 3),
            "by_program_x": {name: round(math.exp(e), 3) for name, e in check.by_program.items()}}


def evaluate(observed: dict, rows: list[dict], shape_only: bool) -> dict:
    fit_rows = [r for r in rows if r["set"] == "fit"]
    check_rows = [r for r in rows if r["set"] == "check"]
    names, pts, pub, missing = points(observed, fit_rows, shape_only)
    params = judge_time.fit(pts, pub, names)
    q = judge_time.half_width(judge_time.log_errors(pts, pub, params))
    result = {"params": params.__dict__, "half_width_x": round(math.exp(q), 3),
              "left_out": summary(judge_time.leave_one_program_out(names, pts, pub)), "missing": missing}
    _, cpts, cpub, cmissing = points(observed, check_rows, shape_only)
    if cpts:
        e = np.abs(judge_time.log_errors(cpts, cpub, params))
        result["check"] = {"points": len(e), "median_x": round(float(np.exp(np.median(e))), 3),
                           "p90_x": round(float(np.exp(np.quantile(e, 0.9))), 3),
                           "covered": round(float(np.mean(e <= q)), 3), "missing": cmissing}
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("observed", type=Path)
    parser.add_argument("--published", type=Path, default=ROOT / "data" / "judge_time" / "published.csv")
    parser.add_argument("--sources", type=Path, help="DIR/LABEL/hw4.cu: the observed programs' sources")
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    observed = json.loads(args.observed.read_text())
    if args.sources:
        observed["sm61_registers"] = {label: gtx1080_report.report_for(args.sources / label / "hw4.cu")[1]
                                      for label in observed["programs"] if (args.sources / label / "hw4.cu").is_file()}
    rows = list(csv.DictReader(args.published.open()))
    found = {"model": evaluate(observed, rows, False), "shape_only": evaluate(observed, rows, True),
             "fitted_on": observed.get("device"), "floor_here": observed["floor"]}
    print(json.dumps(found, indent=1))
    if args.write:
        (ROOT / "fa_cli" / "measure" / "judge_time_gtx1080.json").write_text(json.dumps(found, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
