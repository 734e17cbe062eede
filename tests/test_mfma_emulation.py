"""The NVIDIA emulation of the MFMA kernel's AMD primitives (src_hip/mfma_on_cuda.h), judged
against AMD's own layout tables rather than our reading of them: tests/data/mfma-f32-32x32x2f32-
cdna1.txt and -cdna2.txt, printed by ROCm/amd_matrix_instruction_calculator (their first lines
say how). On the GPU, tests/data/mfma_harness.cu runs the emulated v_mfma_f32_32x32x2f32 on
one-hot and indexed operands, four wavefronts to a block, and the 64-lane shuffle for every
xor mask up to 32 (on NVIDIA a wavefront is two warps: the xor-32 step crosses them)."""
import re
import shutil
import subprocess

import numpy as np
import pytest

from helpers import DATA, ROOT

TABLES = {arch: DATA / f"mfma-f32-32x32x2f32-{arch}.txt" for arch in ("cdna1", "cdna2")}
ENTRY = re.compile(r"^([ABCD])\[(\d+)\]\[(\d+)\]$")


def read_tables(path):
    """{'A': {(lane, register): (row, col)}, 'B': ..., 'C': ..., 'D': ...} from the calculator's
    --matrix-layout --csv output, one section per matrix."""
    tables = {}
    for line in path.read_text().splitlines():
        if line.startswith("#") or line.startswith("Architecture:") or line.startswith("Instruction:"):
            continue
        if line.startswith("lane,"):
            registers = [int(v[1:]) for v in line.split(",")[1:]]
            continue
        lane, *cells = line.split(",")
        for register, cell in zip(registers, cells):
            matrix, row, col = ENTRY.match(cell).groups()
            tables.setdefault(matrix, {})[(int(lane), register)] = (int(row), int(col))
    return tables


SHAPES = {"A": (32, 2), "B": (2, 32), "C": (32, 32), "D": (32, 32)}


@pytest.mark.parametrize("arch", TABLES)
def test_tables_cover_each_matrix_once(arch):
    """Every element of A (32 x 2), B (2 x 32), C and D (32 x 32) sits in exactly one lane and
    register of the 64 lanes; C and D share their layout (the emulation returns D where C was)."""
    tables = read_tables(TABLES[arch])
    assert sorted(tables) == ["A", "B", "C", "D"]
    for matrix, (rows, cols) in SHAPES.items():
        table = tables[matrix]
        assert {lane for lane, _ in table} == set(range(64))
        assert sorted(table.values()) == [(i, j) for i in range(rows) for j in range(cols)], matrix
    assert tables["C"] == tables["D"]


def test_gfx908_and_gfx90a_share_the_layout():
    """The kernel is one source for MI100 (CDNA1) and MI210 (CDNA2): their tables agree."""
    assert read_tables(TABLES["cdna1"]) == read_tables(TABLES["cdna2"])


# ----------------------------------------------------------------------------- on the GPU


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    if not shutil.which("nvcc"):
        pytest.skip("needs nvcc")
    exe = tmp_path_factory.mktemp("harness") / "mfma_harness"
    subprocess.run(["nvcc", "-O2", "-std=c++17", "-arch=native", "-o", str(exe), str(DATA / "mfma_harness.cu")],
                   check=True, cwd=ROOT)
    return exe


def run_harness(exe, tmp_path, mode, data):
    inp, out = tmp_path / f"{mode}.in", tmp_path / f"{mode}.out"
    np.asarray(data, "<f4").tofile(inp)
    subprocess.run([str(exe), mode, str(inp), str(out)], check=True)
    return np.fromfile(out, "<f4")


def as_registers(matrix, table, registers):
    """A matrix laid out into (64, registers) per the table."""
    regs = np.zeros((64, registers))
    for (lane, reg), (i, j) in table.items():
        regs[lane, reg] = matrix[i, j]
    return regs


def as_matrix(regs, table, shape):
    m = np.zeros(shape)
    for (lane, reg), (i, j) in table.items():
        m[i, j] = regs[lane, reg]
    return m


@pytest.mark.gpu
def test_mfma_32x32x2f32_follows_amds_layout(harness, tmp_path):
    """D = C + A B with A and B taken from the lanes, and D handed back in the lanes, exactly
    where the calculator's tables put them. Cases, one wavefront each: lane L's A operand
    one-hot (1 at lane L, 0 elsewhere) against indexed B operands (lane + 1), so D's one nonzero
    row names L's element of A and its values name B's lanes; the same with A and B swapped;
    C alone (A = B = 0), indexed; and random A, B, C against float64."""
    t = read_tables(TABLES["cdna2"])
    lane_index = np.arange(64, dtype=np.float64) + 1
    cases = []  # (a[64], b[64], c[64, 16], expected d[64, 16])

    def expect(a, b, c):
        A = as_matrix(a[:, None], t["A"], SHAPES["A"])
        B = as_matrix(b[:, None], t["B"], SHAPES["B"])
        C = as_matrix(c, t["C"], SHAPES["C"])
        return as_registers(C + A @ B, t["D"], 16)

    zeros16 = np.zeros((64, 16))
    for L in range(64):
        onehot = np.eye(64)[L]
        cases.append((onehot, lane_index, zeros16))
        cases.append((lane_index, onehot, zeros16))
    cases.append((np.zeros(64), np.zeros(64), np.arange(64 * 16, dtype=np.float64).reshape(64, 16) + 1))
    rng = np.random.default_rng(36)
    for _ in range(8):
        cases.append((rng.uniform(-2, 2, 64), rng.uniform(-2, 2, 64), rng.uniform(-2, 2, (64, 16))))
    cases = [(a, b, c, expect(a, b, c)) for a, b, c in cases]
    data = np.concatenate([np.concatenate([a, b, c.ravel()]) for a, b, c, _ in cases])
    got = run_harness(harness, tmp_path, "mfma", data).reshape(len(cases), 64, 16)
    # The exact cases: every product is of an integer and 0 or 1, every sum exact in fp32.
    exact = len(cases) - 8
    for n in range(exact):
        assert np.array_equal(got[n], cases[n][3]), f"case {n}: lanes/registers differ"
    for n in range(exact, len(cases)):
        np.testing.assert_allclose(got[n], cases[n][3], rtol=0, atol=1e-5)


@pytest.mark.gpu
def test_wave64_shuffle_crosses_both_warps(harness, tmp_path):
    """fa_wave64_shfl_xor over all 64 lanes for masks 1..32: lane l gets lane l ^ mask's value,
    in each of the block's four wavefronts (each with values of its own)."""
    cases = 9  # three blocks, the last one part-filled
    values = np.arange(cases * 64, dtype=np.float64) * 1.5 + 0.25
    got = run_harness(harness, tmp_path, "shfl", values).reshape(cases, 6, 64)
    lanes = np.arange(64)
    for c in range(cases):
        for m, mask in enumerate((1, 2, 4, 8, 16, 32)):
            assert np.array_equal(got[c, m], values[c * 64 + (lanes ^ mask)]), (c, mask)
