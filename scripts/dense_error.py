#!/usr/bin/env python3
"""Max abs error of an output against float64 attention over EVERY row, on an NVIDIA GPU.

`fa verify` checks every row on the CPU only up to a size limit and samples rows beyond it;
the error tail of a kernel at N = 32768 (a few values in millions) needs all of them. This
computes the float64 reference with torch on the GPU, a block of query rows at a time, and
prints the max abs error, where it is, and how many values exceed each threshold, for each
INPUT OUTPUT pair, or for each suite case that --program is run on (--cases). With --docs the
lines are also written to docs/kernels.md.
    python3 scripts/dense_error.py INPUT OUTPUT [INPUT OUTPUT ...] [--block-rows 4096] [--docs]
    python3 scripts/dense_error.py --cases t27 t28 --program bin/fa-cuda [--docs]
"""
import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import kernel_docs  # noqa: E402
from fa_cli.cases import suite  # noqa: E402
from fa_cli.cases.format import AttentionInput, open_output  # noqa: E402

THRESHOLDS = (5e-5, 1e-4, 5e-3)


def main() -> None:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("files", nargs="*", metavar="INPUT OUTPUT")
    args.add_argument("--cases", nargs="+", default=[], help="suite cases (generated where missing) to run --program on")
    args.add_argument("--program", help="the program whose outputs of --cases are checked")
    args.add_argument("--block-rows", type=int, default=4096)
    args.add_argument("--docs", action="store_true", help="also write the lines to docs/kernels.md")
    a = args.parse_args()
    if len(a.files) % 2 or not (a.files or a.cases) or bool(a.cases) != bool(a.program):
        args.error("give INPUT OUTPUT pairs, or --cases with --program")
    lines = []
    with tempfile.TemporaryDirectory(prefix="fa-dense-") as work:
        pairs = list(zip(a.files[::2], a.files[1::2]))
        for name in a.cases:
            inp, out = suite.ensure_input(suite.case(name)), Path(work) / f"{name}.out"
            subprocess.run([a.program, str(inp), str(out)], check=True)
            pairs.append((str(inp), str(out)))
        for inp, out in pairs:
            lines.append(f"{Path(inp).name}: {dense_error(inp, out, a.block_rows)}")
            print(lines[-1], flush=True)
    if a.docs:
        kernel_docs.write_section("dense-error", "Max abs error against float64 over every row:\n\n"
                                  + "\n".join(f"- {line}" for line in lines), kernel_docs.nvidia_device())


def dense_error(input_path: str, output_path: str, block_rows: int) -> str:
    """One line: the max abs error over every value, where it is, and counts past THRESHOLDS."""
    import torch

    inp = AttentionInput(input_path)
    shape = inp.shape
    out = open_output(output_path, shape)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    worst, where = 0.0, None
    over = dict.fromkeys(THRESHOLDS, 0)
    rows = min(shape.N, block_rows)
    group = max(1, (1 << 27) // (rows * shape.N))  # batches per step: S blocks of ~1 GB in float64
    for b0 in range(0, shape.B, group):
        b1 = min(shape.B, b0 + group)
        q, k, v = (torch.from_numpy(np.array(x)).to(dev, torch.float64) for x in inp.qkv(b0, b1))
        got = torch.from_numpy(np.array(out[b0:b1])).to(dev, torch.float64)
        for r0 in range(0, shape.N, rows):
            s = q[:, r0:r0 + rows] @ k.transpose(1, 2) / np.sqrt(shape.d)
            ref = torch.softmax(s, dim=2) @ v
            err = (got[:, r0:r0 + rows] - ref).abs()
            err = torch.where(torch.isnan(err), torch.inf, err)  # a NaN output is an infinite error
            m = err.max().item()
            for t in THRESHOLDS:
                over[t] += int((err > t).sum().item())
            if m > worst:
                i = int(err.argmax().item())
                bb, rest = divmod(i, err.shape[1] * shape.d)
                worst, where = m, (b0 + bb, r0 + rest // shape.d, rest % shape.d)
    counts = " ".join(f">{t:g}: {n}" for t, n in over.items())
    return (f"{shape}: max abs error {worst:.3e} at (b, row, col) = {where}; values {counts} "
            f"of {shape.B * shape.N * shape.d}")


if __name__ == "__main__":
    main()
