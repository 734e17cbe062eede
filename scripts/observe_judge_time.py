#!/usr/bin/env python3
"""What fa's estimate of the judge's time is fitted on: students' programs run here, per case.

    python3 scripts/observe_judge_time.py LABEL=PATH/hw4.cu:c01,c02 [...] [--repeat 3] -o obs.json
    python3 scripts/observe_judge_time.py LABEL=PATH/hw4.cu:all ...   (the 30 course shapes)

Each program is built as fa run builds a student's hw4.cu (its Makefile's rule or the course's
line, under the GTX 1080's rules, whose launch log times every kernel), each case's input made
by fa's generator, and the program run once to warm up and then --repeat times. Written per
case: the median wall time, the launch log and CPU times (user, kernel) of the median run, this
GPU's SM limits; once, the start-up floor and copy rates here (fa_cli/measure/floor.py); and
each program's kernels' sm_61 registers where CUDA 12's ptxas is installed (FA_PTXAS_SM61 or
its pip package). scripts/fit_judge_time.py fits the model on this file and the published GTX
1080 times. Needs nvcc and an NVIDIA GPU.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fa_cli.cases import suite  # noqa: E402
from fa_cli.measure import floor, gtx1080_report  # noqa: E402
from fa_cli.programs import devices, programs, timing  # noqa: E402

ALL = [f"c{i:02d}" for i in range(1, 31)]


def observe_case(prog: programs.Program, case: str, repeat: int, timeout: float) -> dict:
    c = suite.case(case)
    inp = suite.ensure_input(c)
    with tempfile.TemporaryDirectory() as work:
        out = Path(work) / "out"
        programs.run(prog, inp, out, timeout=timeout)  # warm: page cache, driver, JIT of nothing
        runs = [programs.run(prog, inp, out, timeout=timeout) for _ in range(repeat)]
    ok = [r for r in runs if r.returncode == 0 and not r.timed_out]
    if not ok:
        return {"case": case, "error": runs[-1].error}
    median = sorted(ok, key=lambda r: r.wall_s)[len(ok) // 2]
    limits = timing.gpu_limits(median.stderr)
    return {"case": case, "shape": [c.shape.B, c.shape.N, c.shape.d], "walls": [r.wall_s for r in ok],
            "wall_s": statistics.median(r.wall_s for r in ok),
            "cpu_user_s": median.cpu_user_s, "cpu_system_s": median.cpu_system_s,
            "launches": [dataclasses.asdict(l) for l in timing.launches(median.stderr)],
            "gpu": dataclasses.asdict(limits) if limits else None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("programs", nargs="+", help="LABEL=SOURCE:CASES (CASES: c01,c02 or all)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("-o", "--output", type=Path, required=True)
    args = parser.parse_args()
    found = {"device": devices.describe_first(), "floor": dataclasses.asdict(floor.measure()), "programs": {}}
    print(f"floor: {found['floor']}", flush=True)
    for spec in args.programs:
        label, _, rest = spec.partition("=")
        source, _, cases = rest.rpartition(":")
        prog = programs.ensure_built(programs.from_source(Path(source)))
        if registers := gtx1080_report.registers(prog):  # sm_61's, where CUDA 12's ptxas is installed
            found.setdefault("sm61_registers", {})[label] = registers
        names = ALL if cases == "all" else cases.split(",")
        found["programs"][label] = [observe_case(prog, name, args.repeat, args.timeout) for name in names]
        for row in found["programs"][label]:
            kernel_ms = sum(l["ms"] for l in row.get("launches", []))
            print(f"{label} {row['case']}: {row.get('wall_s', row.get('error'))} s, kernels {kernel_ms:.1f} ms",
                  flush=True)
        args.output.write_text(json.dumps(found, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
