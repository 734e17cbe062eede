"""Every row of the kernel registry, by name, against the float64 reference (GPU): each FA_KERNEL
value a program lists (the ladder's rungs included), on inputs that cut its tiles (N inside one
tile and over several, none a multiple of the tile), three batches, both d. The row that ran is read
from the program's timing line, so a row another one shadows is not taken for it. A planted row
that leaves rows unwritten fails the same check."""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from helpers import build, hip_port_with_a_kernel
from fa_cli.cases import generate
from fa_cli.cases.format import AttentionInput, Shape, open_output
from fa_cli.judge import reference
from fa_cli.programs import registry

TOL = 1e-4
BATCHES = 3
# The programs nvcc builds, each with its own registry: fa-cuda, the HIP port, and the HIP port
# with the AMD simt tiles (the tiles fa-hip runs on CDNA).
TARGETS = ["cuda", "hip-cuda", "hip-cuda-amd-tiles"]


def tile_size(row: registry.KernelRow, d: int) -> int:
    """The larger of the row's query and key tile at d (128, a block of the ladder's first steps,
    where the row lists no tiles)."""
    tiles = row.tiles.get(d, {})
    rows = tiles.get("Br", tiles.get("TM", 1) * tiles.get("R", 0))
    keys = tiles.get("Bc", tiles.get("TN", 1) * tiles.get("C", 0))
    return max(rows, keys) or 128


def lengths(row: registry.KernelRow, d: int) -> list[int]:
    """N of 1 and inside one tile, over two with a partial last one, over five, and 300 (past the
    256 below which the fused tensor-core rows shadow theirs), kept to the N the row takes."""
    t = tile_size(row, d)
    wanted = sorted({1, t // 2 + 3, 2 * t + 5, 5 * t + 7, 300})
    most = re.search(r"N <= (\d+)", row.takes)
    return [n for n in wanted if not most or n <= int(most.group(1))]


def run_row(program: Path, row: registry.KernelRow, shape: Shape, folder: Path) -> tuple[str, float]:
    """The row asked by name (with its rung's settings) on one input: the row that ran (the timing
    line's impl=) and the largest error against float64 attention over every batch."""
    inp, out = folder / f"{shape.B}_{shape.N}_{shape.d}.in", folder / f"{row.name}.out"
    generate.write_input(inp, shape, seed=shape.N, dist="uniform")
    env = {**os.environ, "FA_KERNEL": row.name, "FA_TIMING": "1", **(row.rung.env if row.rung else {})}
    proc = subprocess.run([str(program), str(inp), str(out)], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, f"{row.name} {shape}: {proc.stderr.strip()}"
    ran = re.search(r"impl=(\S+)", proc.stderr).group(1).removesuffix("+tiled")
    if ran != row.name:
        return ran, 0.0
    data, got = AttentionInput(inp), open_output(out, shape)
    worst = 0.0
    for b in range(shape.B):
        err = np.abs(got[b].astype(np.float64) - reference.attention(*data.qkv(b))[0])
        worst = max(worst, float(np.nan_to_num(err, nan=np.inf).max()))
    return ran, worst


def row_problems(program: Path, row: registry.KernelRow, folder: Path) -> list[str]:
    """What is wrong with one row: an error over TOL at some input; at some d, no input at which
    it ran, or none over several tiles where it takes such an N."""
    problems = []
    for d in (32, 64):
        ran_at = []
        for n in lengths(row, d):
            ran, err = run_row(program, row, Shape(BATCHES, n, d), folder)
            if ran == row.name:
                ran_at.append(n)
                if err > TOL:
                    problems.append(f"{row.name}: max error {err:.3g} at B={BATCHES} N={n} d={d}")
        several = [n for n in lengths(row, d) if n > tile_size(row, d)]
        if not ran_at or (several and max(ran_at) <= tile_size(row, d)):
            problems.append(f"{row.name}: asked by name at d={d}, it ran at N = {ran_at} of {lengths(row, d)}")
    return problems


@pytest.mark.gpu
@pytest.mark.parametrize("target", TARGETS)
def test_every_row_by_name(target, tmp_path):
    program = build(target)
    rows = registry.kernels_of(program)
    assert len(rows) >= 8 and sum(r.name.startswith("ladder-") for r in rows) == 5
    problems = [p for row in rows for p in row_problems(program, row, tmp_path)]
    assert problems == []


# A row that forgets its block's size in the row index: the naive step's kernel (a thread per
# row, 128 rows a block) launched with 64 threads. Rows 64..127 of every 128 are never written.
PLANTED_FILE = '''#pragma once
#include "fp32_launches.h"
namespace fa {
struct SkipsRows : LadderNaive<> {
  template <int D>
  static void launch_d(KernelState& state, const Chunk& c) {
    AttentionParams p = params_for(c, state.shape.N, 128);
    ladder::naive<D, 128><<<blocks_for(p, c), 64, 0, c.stream>>>(p);
    FA_CHECK_LAUNCH("skips rows");
  }
};
}  // namespace fa
'''
PLANTED_ROW = '        fp32_row<SkipsRows>("skips-rows", "when asked", only_asked),\n'


@pytest.mark.gpu
def test_a_row_that_skips_rows_fails(tmp_path):
    program = hip_port_with_a_kernel(tmp_path, "skips_rows.h", PLANTED_FILE, PLANTED_ROW,
                                     'fp32_row<LadderSmemTiles<16, true>>("ladder-5"')
    planted = [r for r in registry.kernels_of(program) if r.name == "skips-rows"]
    assert len(planted) == 1
    problems = row_problems(program, planted[0], tmp_path)
    assert problems and all(p.startswith("skips-rows: max error") for p in problems), problems
