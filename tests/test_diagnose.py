"""fa run tells a student why: a deliberately wrong hw4 (tests/data/student_hw4.cpp, built with
g++ -DMISTAKE=...) for every mistake fa knows, judged as a student would run it."""
import json
import subprocess
import sys

import numpy as np
import pytest

from helpers import DATA, build_students, fa, student_program
from fa_cli.cases import generate
from fa_cli.cases.format import AttentionInput, Shape, header_bytes, open_output
from fa_cli.judge import diagnose, mistakes

# The student program's switch -> the mistake fa must name (None: it must name none).
NAMED = {
    "NO_SCALE": "no 1/sqrt(d) scale",
    "ONE_OVER_D": "scaled by 1/d instead of 1/sqrt(d)",
    "NO_MAX": "no row max subtracted",
    "NOT_NORMALIZED": "not normalized",
    "LAST_TILE_SUM": "normalized by the last key tile's sum only, key tiles of 16 or 32",  # N = 100: both end at 96
    "FIRST_TILE_ONLY": "only the first key tile attended, the first 32 keys",
    "GRID_TOO_SMALL": "rows not written, rows from 96 on",
    "PREVIOUS_BATCH": "batch b holds batch b-1's output",
    "TRANSPOSED": "O written transposed (d x N per batch)",
    "QK_SWAPPED": "Q and K swapped (softmax(K Q^T) V)",
    "V_AS_O": "V returned as O",
    "ZEROS": "all zeros",
    "TIMES_SQRT_D": "scores multiplied by sqrt(d) instead of divided",
    "BATCH_ZERO": "every batch computed from batch 0's Q/K/V",
    "FIRST_BATCH_ONLY": "batches after the first not written (zeros)",
    "QUERY_AXIS": "softmax normalized over the queries (each column of S) instead of the keys",
    "DROP_LAST_TILE": "the last key tile dropped where N is not a multiple of the tile, key tiles of 16 or 32",
    "SKIP_LAST_KEY": "the last key skipped",
    "K_TRANSPOSED": "K read as if stored d x N (K[x*N + j] for K[j*d + x])",
    "V_TRANSPOSED": "V read as if stored d x N (V[x*N + j] for V[j*d + x])",
    "TILE_FIRST_ROW": "each query tile's first row written to every row of the tile, query tiles of 16",
    "BATCH_TIMES4": "batch b's output written at batch f * b's place, f = 4",
    "STATE_CARRIED": "the softmax state carried from row i - T into row i (m l o not reset), query tiles of 16",
}
OTHER = ["NONE", "NOISE", "SEGFAULT", "SHORT_OUTPUT"]


@pytest.fixture(scope="module")
def student(tmp_path_factory):
    """Every variant of the student's program, built once."""
    return build_students(tmp_path_factory.mktemp("student"), [*NAMED, *OTHER])


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """A uniform input with a partial last tile (N = 100), and one whose logits pass float32's
    exp range (values of 4.5, beyond the course's 3: only there does a missing row max show)."""
    folder = tmp_path_factory.mktemp("inputs")
    uniform = folder / "uniform.in"
    generate.write_input(uniform, Shape(3, 100, 32), 3)
    large = folder / "large.in"
    rng = np.random.default_rng(1)
    with open(large, "wb") as f:
        f.write(header_bytes(Shape(2, 96, 64)))
        for _ in range(2):
            q, k, v = rng.uniform(-3, 3, size=(3, 96, 64))
            k = 4.5 * np.sign(k)
            q[:48] = 4.5 * np.sign(k[rng.integers(0, 96, size=48)])  # half the rows: one logit of 162
            f.write(np.stack([q, k, v]).astype("<f4").tobytes())
    batches = folder / "batches.in"  # 9 batches: the sampled 4 and 8 hold batches 1 and 2 where b is written at 4b
    generate.write_input(batches, Shape(9, 40, 32), 4)
    return {"uniform": uniform, "large": large, "batches": batches}


def judged(program, inp, *extra):
    proc = fa("run", inp, "--program", program, *extra)
    return proc, proc.stdout


# make test names five, one of each kind (a factor, a labelled tile, rows, layout, operands);
# make test-all every one.
QUICK = {"NO_SCALE", "LAST_TILE_SUM", "GRID_TOO_SMALL", "TRANSPOSED", "QK_SWAPPED"}


@pytest.mark.parametrize("mistake", [m if m in QUICK else pytest.param(m, marks=pytest.mark.slow) for m in NAMED])
def test_fa_run_names_the_mistake(student, inputs, mistake, tmp_path):
    inp = inputs["large" if mistake == "NO_MAX" else "batches" if mistake == "BATCH_TIMES4" else "uniform"]
    results = tmp_path / "run.json"
    proc, out = judged(student[mistake], inp, "-o", results, "--why-budget", "0")  # the name, not the search
    assert proc.returncode == 1 and "WRONG" in out, out + proc.stderr
    named = [l.split("looks like: ", 1)[1].split("; check:")[0] for l in out.splitlines() if "looks like: " in l]
    assert named == [NAMED[mistake]], out
    [record] = json.loads(results.read_text())["records"]
    assert record["diagnosis"]["looks_like"] == [NAMED[mistake]]
    assert record["diagnosis"]["over_tolerance"] > 0 and "pattern" in record["diagnosis"]


def test_every_known_mistake_is_tested():
    assert {name.split(",")[0] for name in NAMED.values()} == {m.name for m in mistakes.MISTAKES}


def test_a_correct_program_passes_with_no_diagnosis(student, inputs):
    for inp in inputs.values():
        proc, out = judged(student["NONE"], inp, "--tol", "1e-4")
        assert proc.returncode == 0 and "PASS" in out and "looks like" not in out, out


def test_a_correct_output_matches_no_mistake(student, inputs, tmp_path):
    out_path = tmp_path / "o"
    for inp in inputs.values():
        subprocess.run([student["NONE"], inp, out_path], check=True)
        data = AttentionInput(inp)
        assert diagnose.looks_like(data, open_output(out_path, data.shape), 5e-3) == []


def test_a_wrong_answer_that_matches_nothing_gets_no_name(student, inputs):
    proc, out = judged(student["NOISE"], inputs["uniform"])
    assert proc.returncode == 1 and "WRONG" in out
    assert "wrong in: every batch; every 7th row (rows 3, 10, 17, ...); every column" in out
    assert "looks like: none of the" in out


def test_wrong_answer_says_where_and_how_much(student, inputs):
    _, out = judged(student["GRID_TOO_SMALL"], inputs["uniform"], "--why-budget", "0")  # where, not why
    assert "384 of 9600 values checked (4.0%) are over 0.005; none is NaN or infinite" in out
    assert "only the last partial tile: rows 96..99" in out and "(wrote 0, expected" in out
    _, out = judged(student["NO_MAX"], inputs["large"], "--why-budget", "0")
    assert "6144 are NaN or infinite" in out and "rows below 48" in out


@pytest.mark.parametrize("D, shape", [(64, Shape(3, 100, 32)), (32, Shape(2, 128, 64))])
def test_a_hard_coded_head_dimension_is_named_from_the_output(tmp_path, D, shape):
    """#define D 64 on a d = 32 input (and 32 on 64): an output of 4*B*N*D bytes, whose first batch
    is what D gives on the input read as D columns."""
    program = student_program(tmp_path, "HARD_D", f"-DD={D}", name=f"hw4_d{D}")
    inp = tmp_path / "x.in"
    generate.write_input(inp, shape, 5)
    proc, out = judged(program, inp, "--why-budget", "0")
    assert proc.returncode == 1 and "ERROR" in out, out
    assert (f"output has {4 * shape.B * shape.N * D} bytes = 4*B*N*{D}, the size for d = {D}, where this input has "
            f"d = {shape.d}: the head dimension taken as {D} (hard-coded?)") in out
    assert f"its first batch's values are what d = {D} gives on this input read as {D} columns" in out
    assert "it stops in batch" not in out  # not a short output


@pytest.mark.parametrize("shape", [Shape(2, 100, 32), Shape(1, 60, 64)])
def test_an_output_written_as_float64_is_named_and_not_taken_for_another_d(tmp_path, shape):
    """Doubles where the format has floats: 8*B*N*d bytes, which at d = 32 is also d = 64's size;
    read as float64 the values are right, so the size is said as doubles, never as a d taken."""
    program = student_program(tmp_path, "AS_DOUBLE", name="hw4_double")
    inp = tmp_path / "x.in"
    generate.write_input(inp, shape, 5)
    proc, out = judged(program, inp, "--why-budget", "0")
    said = " ".join(out.split())
    assert proc.returncode == 1 and "ERROR" in out, out
    assert (f"output has {8 * shape.B * shape.N * shape.d} bytes = 8*B*N*d: its values written as float64 (8 bytes "
            "each) where the format has float32 (4 bytes)") in said, said
    assert "read as float64, its first batch's values are the right ones" in said, said
    assert "head dimension taken" not in said, said


@pytest.mark.parametrize("mistake, words", [  # make test reads one of the two; make test-all both
    pytest.param("ALPHA_AFTER_MAX", "the tiled online softmax's (one key at a time) with its factor step written as "
                 "`alpha = 1 (m updated before alpha is computed, or no rescale)`", marks=pytest.mark.slow),
    ("SUM_NOT_RESCALED", "the tiled online softmax's (one key at a time) with its sum step written as `l = l + sum(p) "
                         "(l not rescaled)`"),
])
def test_an_online_softmax_key_by_key_is_read_one_key_at_a_time(tmp_path, mistake, words):
    """A program whose online softmax takes one key at a time (BC = 1): its alpha taken after the
    max is updated, or its l not rescaled, named from the weights as for a tile of keys."""
    program = student_program(tmp_path, mistake, "-DBC=1")
    inp = tmp_path / "x.in"
    generate.write_input(inp, Shape(2, 128, 32), 5)
    proc, out = judged(program, inp)
    said = " ".join(out.split())
    assert proc.returncode == 1 and words in said, said


def test_where_to_look_in_the_source(tmp_path, inputs):
    """With the source, a named mistake points at the lines that write it."""
    source = tmp_path / "hw4.cpp"
    source.write_text("#define MISTAKE NO_SCALE\n" + (DATA / "student_hw4.cpp").read_text())
    proc, out = judged(source, inputs["uniform"], "--why-budget", "0")
    line = next(l for l in out.splitlines() if "looks like: no 1/sqrt(d) scale" in l)
    number = next(i for i, l in enumerate(source.read_text().splitlines(), 1) if "float scale = 1.0f / std::sqrt" in l)
    assert f"lines to look at in hw4.cpp: {number} `float scale = 1.0f / std::sqrt((float)d);`" in line, out


def test_crash_is_named_by_its_signal(student, inputs):
    proc, out = judged(student["SEGFAULT"], inputs["uniform"])
    assert proc.returncode == 1 and "ERROR: killed by SIGSEGV (Segmentation fault)" in out


def test_short_output_says_how_far_it_got(student, inputs):
    _, out = judged(student["SHORT_OUTPUT"], inputs["uniform"])
    assert "ERROR: output has 19600 of the 38400 bytes expected" in out
    assert "it stops in batch 1, row 53" in out and "fa-run-" not in out


def test_time_limit_says_limit_and_time(tmp_path, inputs):
    slow = tmp_path / "slow"
    slow.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(30)\n")
    slow.chmod(0o755)
    proc, out = judged(slow, inputs["uniform"], "--time-limit", "0.5")
    assert proc.returncode == 1 and "TLE: stopped at its 0.5 s time limit after" in out


def test_stderr_of_a_failed_program_is_shown(tmp_path, inputs):
    failing = tmp_path / "failing"
    failing.write_text(f"#!{sys.executable}\nimport sys\nprint('cudaMalloc failed: out of memory', file=sys.stderr)\n"
                       "sys.exit(3)\n")
    failing.chmod(0o755)
    _, out = judged(failing, inputs["uniform"])
    assert "ERROR: exit code 3" in out and "stderr: cudaMalloc failed: out of memory" in out


def test_verify_diagnoses_too(student, inputs, tmp_path):
    out_path = tmp_path / "o"
    subprocess.run([student["QK_SWAPPED"], inputs["uniform"], out_path], check=True)
    proc = fa("verify", out_path, "--input", inputs["uniform"])
    assert proc.returncode == 1 and proc.stdout.startswith("FAIL")
    assert "looks like: Q and K swapped (softmax(K Q^T) V)" in proc.stdout and "wrote " in proc.stdout
    assert "transposed" in fa("verify", "--help").stdout  # the help lists what fa recognises


@pytest.mark.parametrize("bad,checked,N,expected", [
    ([0, 1, 2], [0, 1, 2], 3, "every row"),
    ([96, 97, 98, 99], list(range(100)), 100, "only the last partial tile: rows 96..99"),
    ([50, 60, 99], [0, 10, 50, 60, 99], 100, "rows from 50 on (rows were sampled: about)"),
    ([0, 1], list(range(10)), 10, "rows below 2"),
    ([1, 5, 9], list(range(12)), 12, "every 4th row (rows 1, 5, 9, ...)"),
    ([2, 7], list(range(10)), 10, "every 5th row (rows 2, 7, 12, ...)"),
    ([3, 4, 8], list(range(10)), 10, "rows 3, 4, 8"),
    ([5], list(range(10)), 10, "row 5 only"),
    ([0, 2, 4], list(range(6)), 6, "every 2nd row (rows 0, 2, 4, ...)"),
    ([1, 4], list(range(6)), 6, "every 3rd row (rows 1, 4, 7, ...)"),
    (list(range(0, 128, 7)) + list(range(1, 128, 11)), list(range(128)), 128, "31 scattered rows (of 128 checked)"),
    ([i for i in range(200) if i % 64 >= 32], list(range(200)), 200, "rows 32..63 of every 64 (rows i with i mod 64"),
    ([i for i in range(256) if i % 32 < 16 and i > 0], list(range(256)), 256, "127 scattered rows"),
    (list(range(40, 60)), list(range(100)), 100, "20 scattered rows"),  # one block: no run of every 64
])
def test_describe_rows(bad, checked, N, expected):
    assert diagnose.describe_rows(np.array(bad), np.array(checked), N).startswith(expected)


def test_a_mistake_about_rows_names_the_row_the_full_check_found(cpu_program, tmp_path):
    """Only the first 64 rows written: the mistake's first row is the location lines' first row,
    from every row checked, not the first of the few rows the mistakes are tried on."""
    program = tmp_path / "first64"
    program.write_text(f"#!{sys.executable}\nimport subprocess, sys, numpy as np\n"
                       f"subprocess.run([{str(cpu_program)!r}, *sys.argv[1:]], check=True)\n"
                       "B, N, d = np.fromfile(sys.argv[1], '<i4', 3)\n"
                       "o = np.fromfile(sys.argv[2], '<f4').reshape(B, N, d)\n"
                       "o[:, 64:] = 0\no.tofile(sys.argv[2])\n")
    program.chmod(0o755)
    proc = fa("run", "t05", "t08", "--program", program, "--why-budget", "0")
    assert proc.returncode == 1
    assert "t05, t08 WRONG (2 cases): " in proc.stdout, proc.stdout  # one paragraph for both
    assert "wrong in: every batch; rows from 64 on; every column" in proc.stdout
    assert "looks like: rows not written, rows from 64 on;" in proc.stdout


def test_describe_batches_and_columns():
    every = np.arange(5)
    assert diagnose.describe_batches(every, every, 5) == "every batch"
    assert diagnose.describe_batches(np.array([3]), every, 5) == "batch 3 only"
    assert diagnose.describe_batches(np.array([0, 1]), every, 5) == "the first 2 batches (0..1)"
    assert diagnose.describe_batches(np.array([3, 4]), every, 5) == "the last 2 batches (3..4)"
    assert diagnose.describe_batches(np.array([1, 3]), every, 5) == "batches 1, 3"
    assert diagnose.describe_columns(np.array([0, 0, 2, 1])) == "columns 2..3"
    assert diagnose.describe_columns(np.array([1, 0, 0, 0])) == "column 0 only"
    assert diagnose.describe_columns(np.ones(4)) == "every column"


def test_signal_names():
    assert diagnose.signal_name(-11) == "SIGSEGV" and diagnose.signal_name(134) == "SIGABRT"
    assert diagnose.signal_name(1) is None and diagnose.signal_name(0) is None


def test_batches_after_the_first_not_written_point_at_the_copy_back_and_the_launch(tmp_path):
    """The lines shown for zeros after batch 0 are what covers every batch's rows: the launch and the
    copy back (a copy of N * d floats is a mistake of that kind), not the input's reading."""
    from fa_cli.judge import diagnose, mistakes
    source = tmp_path / "hw4.cu"
    source.write_text("int main() {\n  in.qkv.resize((size_t)in.B * 3 * in.N * in.d);\n"
                      "  attention<<<grid, 128>>>(d_qkv, d_out, in.B, in.N);\n"
                      "  attention<<<grid, 256>>>(d_qkv, d_out, in.B, in.N);\n"
                      "  CHECK(cudaMemcpy(out.data(), d_out, (size_t)in.N * in.d * sizeof(float), "
                      "cudaMemcpyDeviceToHost));\n}\n")
    mistake = next(m for m in mistakes.MISTAKES if m.name == "batches after the first not written (zeros)")
    assert [n for n, _ in diagnose.source_lines(source, mistake.look)] == [5, 3]  # the copy back first, then one launch


def test_rows_of_blocks_that_span_two_batches_are_said_with_the_block_sizes():
    """A flat grid of blocks of 96 rows whose rows all take the first row's batch: batch 1's rows
    0..31 and batch 2's 0..63 wrong at N = 256 (flat rows 256..287, 512..575), nothing else."""
    shape = Shape(3, 256, 32)
    flat = np.arange(3 * 256)
    batches, rows = flat // 256, flat % 256
    bad = (((batches == 1) & (rows < 32)) | ((batches == 2) & (rows < 64))).astype(np.int32)
    assert diagnose.straddling_blocks(batches, rows, bad, shape) == [72, 96, 144, 288]
    assert diagnose.straddling_blocks(batches, rows, np.roll(bad, 5), shape) == []
    assert diagnose.straddling_blocks(batches[:-1], rows[:-1], bad[:-1], shape) == []  # a row not checked
    whole = Shape(3, 128, 32)  # batches 1 and 2 wrong in every row: batches moved, not blocks across two
    flat = np.arange(3 * 128)
    assert diagnose.straddling_blocks(flat // 128, flat % 128, (flat >= 128).astype(np.int32), whole) == []
    two = Shape(2, 100, 32)  # one boundary: any first rows of batch 1 fit some block size; nothing said
    flat = np.arange(200)
    assert diagnose.straddling_blocks(flat // 100, flat % 100, ((flat >= 100) & (flat < 112)).astype(np.int32),
                                      two) == []


def test_rows_not_written_point_at_the_grid_first_then_the_rows_index():
    """Rows from 64 on never written, where a d = 64 kernel of 64-row blocks was launched on a grid
    counted with the d = 32 kernel's 128 rows: the grid's line and a launch first."""
    from fa_cli.judge.diagnose import where_to_look
    from fa_cli.judge.mistakes import MISTAKES
    rows = next(m for m in MISTAKES if m.name == "rows not written")
    said = where_to_look(rows, DATA / "planted_sets" / "set23" / "x05.cu")
    assert said == ("; lines to look at in x05.cu: 188 `const dim3 grid((in.N + BR - 1) / BR, in.B);`, 190 "
                    "`flash_cols<32><<<grid, Rows<32>::value>>>(d_qkv, d_out, in.N);`, 113 `const int t = threadIdx.x, "
                    "b = blockIdx.y;`"), said
    base = where_to_look(rows, DATA / "planted_sets" / "set1" / "base.cu")  # no dim3 grid: the launch, not a
    assert base.startswith("; lines to look at in base.cu: 136 `attention_kernel<<<")  # kernel's ceil(N / BC)


def test_a_run_that_exits_with_a_status_of_its_own_after_a_right_output_is_said_so(tmp_path):
    """fwrite's item count checked against the float count: every value written, then "write
    failed" and exit status 2. The output is checked and said right; the reruns fail every time
    (the status), so nothing is said to come and go."""
    program = student_program(tmp_path, "WRITE_COUNT", name="hw4_write")
    inp = tmp_path / "x.in"
    generate.write_input(inp, Shape(2, 64, 32), 5)
    proc, out = judged(program, inp)
    said = " ".join(out.split())
    assert proc.returncode == 1 and "ERROR" in said and "write failed" in said, said
    assert ("its output file is whole and right (every value, max error" in said and "the program ended with exit "
            "status 2 after writing it" in said), said
    assert "intermittent" not in said and "probe" not in said, said
    source = tmp_path / "hw4.cpp"  # the same program as a source: the line that says it, and its test above
    planted = (DATA / "student_hw4.cpp").read_text()
    source.write_text(planted.replace("#define MISTAKE NONE", "#define MISTAKE WRITE_COUNT"))
    said = " ".join(judged(source, inp)[1].split())
    assert "measured: the output right, the exit status not: the line that says it in hw4.cpp, and the one above it: " \
        in said and "`if (std::fwrite(staged, sizeof(float) * d, (size_t)B * N, o) != values) {`" in said, said
