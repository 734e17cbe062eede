#!/usr/bin/env python3
"""Error budget of the tensor-core kernel: which products need compensation, measured.

Builds fa-cuda with 1, 2 or 3 terms per product (FA_TC_QK_TERMS, FA_TC_PV_TERMS; see
src_cuda/split3xfp16.cuh), runs each on the shapes and value distributions below, and
prints the max abs error against the float64 reference (every row for the smaller inputs,
1024 seeded rows per batch for the larger). Needs an NVIDIA GPU (sm_80 or later) and nvcc.
With --docs the table is also written to docs/kernels.md.
    python3 scripts/error_budget.py [--docs]
"""
import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
import kernel_docs  # noqa: E402
from fa_cli.cases import generate  # noqa: E402
from fa_cli.cases.format import AttentionInput, Shape, open_output  # noqa: E402
from fa_cli.judge import verify  # noqa: E402

VARIANTS = [(1, 1), (3, 1), (3, 2), (1, 3), (3, 3)]  # (QK terms, PV terms); 3, 3 is the product
INPUTS = [(Shape(64, 1024, 32), "uniform"), (Shape(16, 1024, 64), "uniform"), (Shape(8, 4096, 64), "uniform"),
          (Shape(16, 1024, 64), "extreme"), (Shape(4, 32768, 32), "uniform")]


def main() -> None:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--docs", action="store_true", help="also write the table to docs/kernels.md")
    docs = args.parse_args().docs
    work = Path(tempfile.mkdtemp(prefix="fa-budget-"))
    binaries = {}
    for qk, pv in VARIANTS:
        out = work / f"qk{qk}-pv{pv}"
        subprocess.run(["make", "-s", "-B", "-C", str(ROOT), "cuda", f"BIN={out}",
                        f"NVCCFLAGS=-O3 -std=c++17 -DFA_TC_QK_TERMS={qk} -DFA_TC_PV_TERMS={pv}"], check=True)
        binaries[(qk, pv)] = out / "fa-cuda"
    title = "max abs error against float64 (terms per product: 1 = plain fp16, 2 = a_hi (b_hi + b_lo), 3 = 3xFP16)"
    header = "B, N, d, values".ljust(26) + "".join(f"QK {qk} PV {pv}".rjust(14) for qk, pv in VARIANTS)
    print(title)
    print(header)
    lines = [header]
    for shape, dist in INPUTS:
        inp = work / f"{shape.B}-{shape.N}-{shape.d}-{dist}.in"
        generate.write_input(inp, shape, 11, dist)
        rows = verify.RowCheck(sample=1024) if shape.B * shape.N * shape.N * shape.d > verify.FULL_CHECK_LIMIT \
            else verify.EVERY_ROW
        cells = []
        for key in VARIANTS:
            out = work / "o.out"
            subprocess.run([str(binaries[key]), str(inp), str(out)], check=True,
                           env={**os.environ, "FA_KERNEL": "tensorcore", "FA_TC_SPLIT": "prepass"})
            result = verify.against_reference(AttentionInput(inp), open_output(out, shape), 1e-4, rows)
            cells.append(f"{result.max_err:.2e}".rjust(14))
        lines.append(f"{shape.B}, {shape.N}, {shape.d}, {dist}".ljust(26) + "".join(cells))
        print(lines[-1], flush=True)
    if docs:
        kernel_docs.write_section("error-budget", f"{title}; the kernel is QK 3 PV 3.\n\n```\n"
                                  + "\n".join(lines) + "\n```", kernel_docs.nvidia_device())


if __name__ == "__main__":
    main()
