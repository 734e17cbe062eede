#!/usr/bin/env python3
"""Where a kernel's time goes, from Nsight Compute: occupancy, tensor pipe, issue and stalls.

Profiles the first launch of KERNEL (a regex; default the tensor-core kernel) in PROGRAM on each
INPUT with ncu's full set, and prints per input: registers, theoretical and achieved occupancy,
the tensor pipe's and the issue slots' activity, and the top stall reasons in cycles per issued
instruction. With --docs the table is also written to docs/kernels.md. Needs ncu and a GPU.
    python3 scripts/kernel_limiters.py INPUT... [--program bin/fa-cuda] [--kernel attention_tensorcore] [--docs]
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
import kernel_docs  # noqa: E402
from fa_cli.cases.format import AttentionInput  # noqa: E402
from fa_cli.measure.profile import csv_rows, number  # noqa: E402

# figure -> ncu metrics that report it, the first one present is taken (names vary by GPU)
FIGURES = {
    "registers": ["launch__registers_per_thread"],
    "theoretical occupancy %": ["sm__maximum_warps_per_active_cycle_pct"],
    "achieved occupancy %": ["sm__warps_active.avg.pct_of_peak_sustained_active"],
    "tensor pipe active %": ["sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
                             "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
                             "sm__inst_executed_pipe_tensor_op_hmma.avg.pct_of_peak_sustained_active"],
    "issue active %": ["sm__inst_issued.avg.pct_of_peak_sustained_active",
                       "smsp__issue_active.avg.pct_of_peak_sustained_active",
                       "sm__instruction_throughput.avg.pct_of_peak_sustained_active"],
}
STALL = re.compile(r"smsp__average_warps_issue_stalled_(\w+)_per_issue_active\.ratio")
USED: dict[str, str] = {}  # figure -> the metric that gave it, for the notes under the table
NOT_STALLS = {"selected"}  # a warp issuing is counted as "selected": one cycle per issue, always
TOP_STALLS = 4


def ncu() -> str:
    for candidate in (shutil.which("ncu"), "/usr/local/cuda/bin/ncu"):
        if candidate and Path(candidate).exists():
            return candidate
    sys.exit("kernel_limiters: ncu not found")


def limiters(program: Path, inp: Path, kernel: str, keep: Path | None = None) -> dict[str, str]:
    with tempfile.TemporaryDirectory(prefix="fa-limiters-") as work:
        log = Path(work) / "ncu.csv"
        cmd = [ncu(), "--csv", "--page", "raw", "--print-units", "base", "--set", "full", "--clock-control", "none",
               "--kernel-name", f"regex:{kernel}", "--launch-count", "1", "--log-file", str(log),
               str(program), str(inp), str(Path(work) / "o.out")]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=os.environ)
        if proc.returncode or not log.exists():
            sys.exit(f"kernel_limiters: ncu failed on {inp}: {(proc.stderr or proc.stdout).strip()[-400:]}")
        rows = csv_rows(log.read_text())
        if keep:
            shutil.copy(log, keep / f"ncu-{Path(inp).stem}.csv")
    if len(rows) < 3:
        sys.exit(f"kernel_limiters: no launch of {kernel!r} in {program} on {inp}")
    header, values = rows[0], rows[2]
    col = {name: i for i, name in enumerate(header)}
    name = values[col["Kernel Name"]] if "Kernel Name" in col else kernel
    found = {"kernel": re.sub(r"\(.*", "", name).removeprefix("void ")}
    for figure, metrics in FIGURES.items():
        present = [m for m in metrics if m in col and number(values[col[m]]) is not None]
        found[figure] = f"{number(values[col[present[0]]]):.3g}" if present else "-"
        if present:
            USED.setdefault(figure, present[0])
    stalls = sorted(((number(values[i]) or 0.0, STALL.match(name).group(1)) for name, i in col.items()
                     if STALL.match(name) and STALL.match(name).group(1) not in NOT_STALLS
                     and not name.endswith("_not_issued_per_issue_active.ratio")),
                    reverse=True)
    found["top stalls (cycles per issue)"] = ", ".join(f"{reason} {v:.2f}" for v, reason in stalls[:TOP_STALLS])
    return found


def main() -> None:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("inputs", nargs="+", type=Path, metavar="INPUT")
    args.add_argument("--program", type=Path, default=ROOT / "bin" / "fa-cuda")
    args.add_argument("--kernel", default="attention_tensorcore")
    args.add_argument("--docs", action="store_true", help="also write the table to docs/kernels.md")
    args.add_argument("--keep", type=Path, metavar="DIR", help="keep ncu's raw CSV of each input here")
    a = args.parse_args()
    columns = ["input", "kernel", *FIGURES, "top stalls (cycles per issue)"]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for inp in a.inputs:
        s = AttentionInput(inp).shape
        row = {"input": f"{s.B} x {s.N} x {s.d}", **limiters(a.program, inp, a.kernel, a.keep)}
        lines.append("| " + " | ".join(row[c] for c in columns) + " |")
        print(lines[-1], flush=True)
    if a.docs:
        text = (f"ncu `--set full`, first launch of `{a.kernel}` in {a.program.name}, clocks as the program runs "
                "them. Stall reasons: ncu's names (wait = fixed-latency dependency, math_pipe_throttle = the pipe "
                "is busy, long_scoreboard = global memory, short_scoreboard = shared memory or MUFU).\n\n")
        used = "; ".join(f"{figure}: `{metric}`" for figure, metric in USED.items())
        kernel_docs.write_section("limiters", text + "\n".join(lines) + f"\n\nMetrics: {used}.",
                                  kernel_docs.nvidia_device())


if __name__ == "__main__":
    main()
