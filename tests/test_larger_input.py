"""A passing program run once more on a larger drawn input (fa_cli/judge/larger_input.py): a key loop
capped at 256 keys (tests/data/student_hw4.cpp, KEYS_CAPPED) passes N = 128 and is warned, with its
numbers and the command that looks into it; the right program is not; each build is checked once.
The larger input here is 4 x 512 x 32 (fa's is 4 x 2048 x d), for a CPU program's time."""
import shutil
from pathlib import Path

import numpy as np
import pytest

from helpers import build_students
from fa_cli.cases.format import Shape
from fa_cli.judge import drawn_shapes, larger_input
from fa_cli.judge.findings import Kind
from fa_cli.judge.tool_logs import Budget
from fa_cli.programs.programs import Program

RNG = np.random.default_rng(11)

pytestmark = pytest.mark.skipif(not shutil.which("g++"), reason="needs g++")


def test_a_mistake_that_shows_only_past_the_cases_sizes_is_a_warning(tmp_path, monkeypatch):
    monkeypatch.setenv("FA_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(drawn_shapes, "LARGER_N", 512)
    built = build_students(tmp_path, ["NONE", "KEYS_CAPPED"])
    shape = drawn_shapes.larger_shape([Shape(2, 128, 32), Shape(3, 200, 32)])
    assert shape == Shape(4, 512, 32)
    said = []
    capped = Program("hw4.cpp", built["KEYS_CAPPED"])
    [found] = larger_input.check(capped, shape, None, tmp_path, said.append, Budget(60))
    assert found.kind == Kind.WARNING, found.lines
    line = found.lines[0]
    assert line.startswith("passes the cases run, but on a drawn B=4, N=512, d=32 input (larger than the cases "
                           "passed; not one of the course's cases) it writes "), line
    assert "a mistake that shows only at larger sizes; `fa gen --shape 4,512,32 --seed 29 -o larger.in" in line
    assert line.endswith("; wrong again in one run with every launch waited for (CUDA_LAUNCH_BLOCKING=1)"), line
    assert larger_input.check(Program("hw4.cpp", built["NONE"]), shape, None, tmp_path, said.append, Budget(60)) == []
    assert len(said) == 3  # the capped program's two runs (as built, then waited for), the right one's one
    again = larger_input.check(capped, shape, None, tmp_path, said.append, Budget(60))  # kept for the build
    assert [f.lines for f in again] == [found.lines] and len(said) == 3


WRONG_UNLESS_WAITED = """#!{python}
import os, sys
import numpy as np
raw = np.fromfile(sys.argv[1], dtype="<i4", count=3); B, N, d = (int(x) for x in raw)
x = np.fromfile(sys.argv[1], dtype="<f4", offset=12).reshape(B, 3, N, d).astype(np.float64)
s = x[:, 0] @ x[:, 1].transpose(0, 2, 1) / np.sqrt(d)
p = np.exp(s - s.max(axis=2, keepdims=True))
o = (p / p.sum(axis=2, keepdims=True)) @ x[:, 2]
if os.environ.get("CUDA_LAUNCH_BLOCKING") != "1":
    o[B // 2:] = o[:B - B // 2]  # the later chunks' buffer reused before the earlier work read it
o.astype("<f4").tofile(sys.argv[2])
"""


def test_a_larger_input_wrong_as_built_and_right_with_every_launch_waited_for_says_so(tmp_path, monkeypatch):
    """Chunks on streams sharing a buffer (held-out set24's y05: wrong only past one chunk): the
    warning says the run with every launch waited for was right, one run each way."""
    import sys
    monkeypatch.setenv("FA_CACHE", str(tmp_path / "cache"))
    program = tmp_path / "stand-in"
    program.write_text(WRONG_UNLESS_WAITED.format(python=sys.executable))
    program.chmod(0o755)
    said = []
    [found] = larger_input.check(Program("hw4.cu", program), Shape(4, 256, 32), None, tmp_path, said.append,
                                 Budget(60))
    assert found.kind == Kind.WARNING and "a mistake that shows only at larger sizes" in found.lines[0]
    assert found.lines[0].endswith("; right in one run with every launch waited for (CUDA_LAUNCH_BLOCKING=1): wrong "
                                   "only where launches or copies overlap (a buffer, a stream or a copy reused "
                                   "before the work that reads it has ended)"), found.lines
    assert said[-1] == "the drawn B=4, N=256, d=32 input again, every launch waited for"


LAST_ROW_OF_ODD_N_LEFT = """#!{python}
import sys
import numpy as np
raw = np.fromfile(sys.argv[1], dtype="<i4", count=3); B, N, d = (int(x) for x in raw)
x = np.fromfile(sys.argv[1], dtype="<f4", offset=12).reshape(B, 3, N, d).astype(np.float64)
s = x[:, 0] @ x[:, 1].transpose(0, 2, 1) / np.sqrt(d)
p = np.exp(s - s.max(axis=2, keepdims=True))
o = (p / p.sum(axis=2, keepdims=True)) @ x[:, 2]
o[:, 2 * (N // 2):] = 0  # two halves of N // 2 rows: an odd N's last row is in neither
o.astype("<f4").tofile(sys.argv[2])
"""


def test_one_batch_of_an_odd_n_comes_last_and_is_said_as_no_course_size(tmp_path, monkeypatch):
    """set35's s06: rows split into two halves of N / 2, rounded down, pass every course shape; one
    batch of 129 rows shows the last row never written, said as a size no course case has."""
    import sys
    monkeypatch.setenv("FA_CACHE", str(tmp_path / "cache"))
    assert drawn_shapes.edge_shape([Shape(2, 128, 64), Shape(1, 200, 64)]) == Shape(1, 129, 64)
    assert drawn_shapes.edge_shape([Shape(1, 129, 32)]) is None and drawn_shapes.edge_shape([]) is None
    program = tmp_path / "stand-in"
    program.write_text(LAST_ROW_OF_ODD_N_LEFT.format(python=sys.executable))
    program.chmod(0o755)
    [found] = larger_input.check(Program("hw4.cu", program), Shape(1, 129, 32), None, tmp_path, lambda line: None,
                                 Budget(60))
    assert found.lines[0].startswith("passes the cases run, but on a drawn B=1, N=129, d=32 input (one batch of an odd "
                                     "N: no course case has either) it writes "), found.lines
    assert "every row checked is right before batch 0, row 128 and wrong from there on, every wrong value 0" in \
        found.lines[0] and "a mistake that shows only at such a size (the cases run have B > 1 or an even N)" in \
        found.lines[0], found.lines
    assert found.fields["larger_shape"] == [1, 129, 32]  # every row checked: looked into as a failing case


CRASHES_PAST_TWO_BATCHES = """#!{python}
import os, signal, sys
import numpy as np
B = int(np.fromfile(sys.argv[1], dtype="<i4", count=1)[0])
if B > 2:
    os.kill(os.getpid(), signal.SIGSEGV)  # a host loop that reads past its input where B is large
"""


CAPPED_KEYS = """#!{python}
import sys
import numpy as np
B, N, d = (int(x) for x in np.fromfile(sys.argv[1], dtype="<i4", count=3))
x = np.fromfile(sys.argv[1], dtype="<f4", offset=12).reshape(B, 3, N, d).astype(np.float64)
q, k, v = x[:, 0], x[:, 1, :256], x[:, 2, :256]  # tiles of a fixed array: 256 keys at most
s = q @ k.transpose(0, 2, 1) / np.sqrt(d)
p = np.exp(s - s.max(axis=2, keepdims=True))
((p / p.sum(axis=2, keepdims=True)) @ v).astype("<f4").tofile(sys.argv[2])
"""


def test_a_key_count_capped_below_n_is_read_as_attention_over_the_first_keys(tmp_path, monkeypatch):
    """Keys past 256 never looked at: on a drawn 2 x 512 input the warning says so, with the cap; a
    program right there says nothing."""
    import sys
    monkeypatch.setenv("FA_CACHE", str(tmp_path / "cache"))
    program = tmp_path / "stand-in"
    program.write_text(CAPPED_KEYS.format(python=sys.executable))
    program.chmod(0o755)
    [found] = larger_input.check(Program("hw4.cu", program), Shape(2, 512, 32), None, tmp_path, lambda line: None,
                                 Budget(60), rows=16)
    assert "; every value checked is attention over the row's first 256 keys only: keys 256..511 never looked at " \
        "(a key or tile count capped at 256" in found.lines[0], found.lines
    assert "or, as 256 = N / 2, the first part of the keys' split only: a merge of key splits" in found.lines[0]
    program.write_text(CAPPED_KEYS.format(python=sys.executable).replace(":256]", "]"))
    assert larger_input.check(Program("hw4.cu", program), Shape(2, 256, 32), None, tmp_path, lambda line: None,
                              Budget(60)) == []


def test_a_larger_input_that_crashes_names_its_input_however_it_was_checked(tmp_path, monkeypatch):
    """A crash on a larger input sampled by rows (the most batches) is still a case to look into:
    no output is judged, so the rows sampled do not matter; its input, shape, exit and stderr kept."""
    import sys
    monkeypatch.setenv("FA_CACHE", str(tmp_path / "cache"))
    program = tmp_path / "stand-in"
    program.write_text(CRASHES_PAST_TWO_BATCHES.format(python=sys.executable))
    program.chmod(0o755)
    [found] = larger_input.check(Program("hw4.cu", program), Shape(4, 64, 32), None, tmp_path, lambda line: None,
                                 Budget(60), rows=8)
    assert found.kind == Kind.WARNING and "it fails: killed by SIGSEGV" in found.lines[0], found.lines
    assert found.fields["larger_failed"] == -11 and found.fields["larger_shape"] == [4, 64, 32]
    assert Path(found.fields["larger_input"]).exists()
    fails = "sys.exit('hw4: hw4.cu:235: an illegal memory access was encountered')"
    program.write_text(CRASHES_PAST_TWO_BATCHES.format(python=sys.executable).replace(
        "os.kill(os.getpid(), signal.SIGSEGV)", fails))
    [found] = larger_input.check(Program("hw4.cu", program), Shape(4, 64, 32), None, tmp_path, lambda line: None,
                                 Budget(60), rows=8)  # an error exit, no signal: looked into all the same
    assert found.fields["larger_failed"] == 1 and Path(found.fields["larger_input"]).exists(), found.lines
    empty = ("sys.stderr.write('fa-gtx1080: k: a launch of a grid of 512 x 0 x 1 blocks of 64 x 1 x 1 threads: a "
             "dimension of 0, so no thread runs (refused)\\n'); sys.exit(1)")
    program.write_text(CRASHES_PAST_TWO_BATCHES.format(python=sys.executable).replace(
        "os.kill(os.getpid(), signal.SIGSEGV)", empty))
    [found] = larger_input.check(Program("hw4.cu", program), Shape(3, 64, 32), None, tmp_path, lambda line: None,
                                 Budget(60), rows=8)  # a grid of 0 blocks in y: a count rounded down to 0
    assert "threads: a dimension of 0, so no thread runs (refused) (a grid with a dimension of 0 at this size only: " \
        "a count that rounds down to 0 here, as whole batches in a buffer or chunk of a fixed size, where one " \
        "batch's Q, K and V are 24,576 bytes);" in found.lines[0], found.lines


def test_no_larger_run_where_a_case_passed_was_as_large():
    assert drawn_shapes.larger_shape([Shape(2, 128, 64), Shape(4, 2048, 64)]) is None
    assert drawn_shapes.larger_shape([]) is None


def test_the_longest_rows_are_checked_on_sampled_rows_where_the_larger_input_passed(tmp_path, monkeypatch):
    """After the larger input, the course's longest rows (here 1 x 1024 x 32 for a CPU program's
    time), checked on a few rows of each batch: a cap of 512 keys passes 4 x 512 and is warned there,
    with the rows checked said."""
    monkeypatch.setenv("FA_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(drawn_shapes, "LONGEST_B", 1)
    monkeypatch.setattr(drawn_shapes, "LONGEST_N", 1024)
    built = build_students(tmp_path, ["KEYS_CAPPED", "NONE"])
    shape = drawn_shapes.longest_shape([Shape(2, 128, 32)])
    assert shape == Shape(1, 1024, 32) and drawn_shapes.longest_shape([Shape(1, 1024, 32)]) is None
    rows = larger_input.sampled_rows(1024, 16)
    assert rows[0] == 0 and rows[-1] == 1023 and len(rows) <= 16
    [found] = larger_input.check(Program("hw4.cpp", built["KEYS_CAPPED"]), shape, None, tmp_path, lambda l: None,
                                 Budget(60), 16)
    assert found.kind == Kind.WARNING and f"values wrong (of {len(rows)} rows of each batch checked)" in found.lines[0]
    assert larger_input.check(Program("hw4.cpp", built["NONE"]), shape, None, tmp_path, lambda l: None,
                              Budget(60), 16) == []


def test_a_run_stopped_at_its_limit_is_not_judged_and_not_called_wrong(tmp_path, monkeypatch):
    monkeypatch.setenv("FA_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(larger_input, "RUN_TIMEOUT_S", 0.5)
    slow = tmp_path / "slow"
    slow.write_text("#!/bin/sh\nsleep 20\n")
    slow.chmod(0o755)
    [found] = larger_input.check(Program("slow", slow), Shape(1, 64, 32), None, tmp_path, lambda l: None, Budget(60))
    assert found.kind == Kind.MISSING_TOOL and found.lines[0].endswith("was stopped at 0.5 s (the search's budget or "
                                                                       "the run's limit): not judged"), found.lines


def test_the_most_batches_come_last_at_the_course_shape_of_the_d_passed():
    assert drawn_shapes.most_batches_shape([Shape(2, 128, 32)]) == Shape(13600, 128, 32)
    assert drawn_shapes.most_batches_shape([Shape(2, 256, 64)]) == Shape(9600, 128, 64)
    assert drawn_shapes.most_batches_shape([Shape(2, 128, 64), Shape(4800, 128, 64)]) is None  # half as many values
    assert drawn_shapes.most_batches_shape([]) is None


def test_the_longest_rows_and_most_batches_are_drawn_at_the_largest_d_passed():
    """The course's largest inputs are at d = 64 (t30 2 x 32768 x 64, a batch of 25 MB): a program
    that passed d = 32 and d = 64 is drawn there, the shorter inputs at the first case's d."""
    passed = [Shape(2, 128, 32), Shape(2, 128, 64)]
    assert drawn_shapes.longest_shape(passed) == Shape(2, 32768, 64)
    assert drawn_shapes.most_batches_shape(passed) == Shape(9600, 128, 64)
    assert drawn_shapes.larger_shape(passed) == Shape(4, 2048, 32)


@pytest.mark.parametrize("wrong_at, checked", [(None, 12), ("tiny", 12), ("small", 11), ("half tile", 10), ("edge", 9),
                                               ("shares", 8),
                                               ("n8192", 7), ("n1024", 6), ("n512", 5), ("most", 4), ("longest", 3),
                                               ("middle", 2), ("larger", 1)])
def test_each_larger_input_is_run_only_where_the_one_before_was_right(tmp_path, monkeypatch, wrong_at, checked):
    """4 x 2048, 2 x 4096, then 2 x 32768 on sampled rows, the most batches on fewer rows, 2 x 512,
    2 x 1024, 2 x 8192 on sampled rows, 10 x 128, 64 x 4 last,
    one batch of 129 rows, one of 97, three of 21: the first that is wrong is the warning, and nothing after it
    runs (but the run that weighs a 32-bit size where 2 x 32768 is wrong: 1 x 23168, sampled; and
    2 x 32768 where 2 x 4096 is wrong, to bracket it)."""
    from fa_cli.judge.steps import Context
    from fa_cli.judge.findings import Finding
    names = {Shape(4, 2048, 32): "larger", Shape(2, 4096, 32): "middle", Shape(2, 32768, 32): "longest",
             Shape(13600, 128, 32): "most", Shape(2, 512, 32): "n512", Shape(2, 1024, 32): "n1024",
             Shape(2, 8192, 32): "n8192", Shape(10, 128, 32): "shares", Shape(1, 129, 32): "edge",
             Shape(1, 97, 32): "half tile", Shape(3, 21, 32): "small", Shape(64, 4, 32): "tiny",
             Shape(1, 23168, 32): "under 2^31"}
    ran = []

    def check(program, shape, launcher, work, say, budget, rows=None):
        ran.append((names[shape], rows))
        return [Finding(Kind.WARNING, ["passes the cases run, but ..."])] if names[shape] == wrong_at else []
    monkeypatch.setattr(larger_input, "check", check)
    monkeypatch.setattr(larger_input.race_check, "applies", lambda program: True)
    result = type("Result", (), dict(verdict="PASS", target=type("Target", (), dict(shape=Shape(2, 128, 32)))))
    ctx = Context(Program("hw4", tmp_path / "hw4"), None, tmp_path, Budget(60), lambda l: None, 5e-3, None, "t01")
    ctx.results = [result]
    assert larger_input.LargerInput().applies(ctx)
    found = larger_input.LargerInput().run(ctx)
    assert ran[:checked] == [("larger", None), ("middle", None), ("longest", drawn_shapes.SAMPLED_ROWS),
                             ("most", drawn_shapes.MOST_ROWS), ("n512", None), ("n1024", None),
                             ("n8192", drawn_shapes.SAMPLED_ROWS), ("shares", None), ("edge", None),
                             ("half tile", None), ("small", None), ("tiny", None)][:checked]
    after = {"longest": [("under 2^31", drawn_shapes.SAMPLED_ROWS)], "middle": [("longest", drawn_shapes.SAMPLED_ROWS)]}
    assert ran[checked:] == after.get(wrong_at, [])
    assert bool(found) == (wrong_at is not None)
    if wrong_at == "middle":  # right at the longest rows too: a band of lengths
        assert found[0].lines[0].endswith("; right on a drawn B=2, N=32768, d=32 input (64 rows of each batch "
                                          "checked), as at the shorter rows passed: wrong at N = 4096 only, between "
                                          "them (a path taken for rows up to some length, with a buffer or a "
                                          "shared-memory row sized for fewer keys than that path lets in?)"), found


def test_rows_left_unwritten_past_a_grid_of_65535_blocks_are_read_as_its_end():
    """A 1-D grid of 8-row blocks capped at 65535: rows b * N + i from 524280 on hold 0. Checked
    on sampled rows, as the input of most batches is: the first wrong row checked and the cap's
    rows a block."""
    shape = Shape(4200, 128, 4)
    rows = larger_input.sampled_rows(shape.N, drawn_shapes.MOST_ROWS)
    correct = RNG.uniform(-1, 1, (shape.B, rows.size, shape.d))
    flat = np.arange(shape.B)[:, None] * shape.N + rows[None, :]
    got = np.where((flat >= 65535 * 8)[:, :, None], 0.0, correct)
    wrong = np.abs(got - correct) > 5e-3
    said = larger_input.wrong_from(got, wrong, shape, rows)
    assert said.startswith("every row checked is right before batch 4095, row 126 and wrong from there on, every "
                           "wrong value 0 (as where nothing was written): where a grid of 65535 blocks of 8 rows "
                           "ends"), said
    shifted = np.where((flat >= 300000)[:, :, None], correct + 1, correct)  # wrong from a row no cap explains
    said = larger_input.wrong_from(shifted, np.abs(shifted - correct) > 5e-3, shape, rows)
    assert said.startswith("every row checked is right before batch 2343, row 101") and "grid" not in said \
        and "nothing was written" not in said
    every = correct + 1
    assert larger_input.wrong_from(every, np.abs(every - correct) > 5e-3, shape, rows) is None


def test_rows_wrong_from_the_end_of_a_logged_grids_first_pass_over_its_items_say_so():
    """set31's s08 under the GTX 1080's rules: a grid-stride loop over 64-row items with a grid of
    80 blocks (4 an SM) keeps its first item's queries: on 4 x 2048 x 32 every row from b * N + i =
    5120 = 80 x 64 on is wrong. The launch log's grid places it; a row that is no such product, or
    no log, says only where."""
    from fa_cli.programs.timing import launches
    shape = Shape(4, 2048, 32)
    correct = RNG.uniform(-1, 1, (shape.B, shape.N, 4))
    flat = np.arange(shape.B)[:, None] * shape.N + np.arange(shape.N)[None, :]
    got = np.where((flat >= 5120)[:, :, None], correct + 1, correct)
    wrong = np.abs(got - correct) > 5e-3
    log = launches("fa-launch: launches=1 untimed=0 ms=0.5 grid=80x1x1 block=64x1x1 smem=16640 regs=40 "
                   "kernel=void attention_items(const float *, float *, int, int)\n")
    said = larger_input.wrong_from(got, wrong, shape, None, log)
    assert said.startswith("every row checked is right before batch 2, row 1024 and wrong from there on: exactly where "
                           "the first pass of attention_items's grid of 80 blocks over items of 64 rows ends (80 x "
                           "64 = 5120"), said
    assert larger_input.wrong_from(got, wrong, shape, None) == "every row checked is right before batch 2, row 1024 " \
        "and wrong from there on"
    other = np.where((flat >= 5000)[:, :, None], correct + 1, correct)
    assert "first pass" not in larger_input.wrong_from(other, np.abs(other - correct) > 5e-3, shape, None, log)
    # batches 1.. wrong (a batch's own mistake) under a grid of 32 x 4 = 128 blocks of 16 rows, which covers
    # every row in one pass: no first pass to speak of
    whole = launches("fa-launch: launches=1 untimed=0 ms=0.5 grid=32x4x1 block=64x1x1 smem=0 regs=40 kernel=k\n")
    from_batch_1 = np.where((flat >= 2048)[:, :, None], correct + 1, correct)
    said = larger_input.wrong_from(from_batch_1, np.abs(from_batch_1 - correct) > 5e-3, shape, None, whole + log)
    assert said == "every row checked is right before batch 1, row 0 and wrong from there on", said
    covering = launches(f"fa-launch: launches=1 untimed=0 ms=0.5 grid={8192 // 64}x1x1 block=64x1x1 smem=0 regs=40 "
                        "kernel=k\n")
    at_6400 = np.where((flat >= 6400)[:, :, None], correct + 1, correct)  # 6400 = 100 x 64, yet 128 blocks cover all
    assert "first pass" not in larger_input.wrong_from(at_6400, np.abs(at_6400 - correct) > 5e-3, shape, None,
                                                       covering)
    rows = np.arange(4, 2048, 8)  # sampled (set43's s06 on 2 x 32768): the end of the first pass between two rows
    sampled = larger_input.wrong_from(got[:, rows], wrong[:, rows], shape, rows, log)
    assert sampled.startswith("every row checked is right before batch 2, row 1028 and wrong from there on: between "
                              "the last right row checked (5116) and the first wrong one (rows sampled: a product "
                              "that falls there may be a coincidence), where the first pass of "
                              "attention_items's grid of 80 blocks over items of 64 rows ends (80 x 64 = 5120"), sampled
    assert "first pass" not in larger_input.wrong_from(got[:, rows], wrong[:, rows], shape, rows, whole)


def test_whole_batches_wrong_and_zero_are_read_as_a_part_of_the_batches_left_out():
    """set36's s09: a two-stream pipeline whose last-but-one chunk is never collected: on 2 x 32768,
    batch 0 holds 0 in every row checked and batch 1 is right."""
    correct = RNG.uniform(-1, 1, (3, 8, 4))
    correct[0, 0, 0] = 0.001  # a right value near 0: a batch of zeros is right there
    got = correct.copy()
    got[0] = 0
    said = larger_input.whole_batches(got, np.abs(got - correct) > 5e-3)
    assert said == ("batch 0 wrong in 97% or more of the values checked, every value there 0 (as where nothing was "
                    "written or copied back), the other batches right: a part of the input's batches (a chunk, a "
                    "stream's share) whose output was not computed or not collected"), said
    got[2] = 0  # to the last batch: wrong_from's reading, not this one
    assert larger_input.whole_batches(got, np.abs(got - correct) > 5e-3) is None
    got = correct.copy()
    got[1, 3] += 1  # one row of a batch: no whole batch
    assert larger_input.whole_batches(got, np.abs(got - correct) > 5e-3) is None


def test_rows_that_are_the_right_rows_scaled_are_read_with_their_factors():
    correct = RNG.uniform(-1, 1, (2, 16, 8))
    factor = RNG.uniform(0.02, 0.2, (2, 16, 1))
    got = correct * factor
    said = larger_input.rows_scaled(got, correct, np.abs(got - correct) > 5e-3)
    assert said.startswith("every wrong row is the right row times a factor of its own (from "
                           f"{factor.min():.3g} to "), said
    noisy = got + RNG.normal(0, 0.05, got.shape)
    assert larger_input.rows_scaled(noisy, correct, np.abs(noisy - correct) > 5e-3) is None
    zeros = np.where(np.arange(16)[None, :, None] >= 8, 0.0, correct)  # rows never written: no factor to read
    assert larger_input.rows_scaled(zeros, correct, np.abs(zeros - correct) > 5e-3) is None


def larger_run_failing(tmp_path, monkeypatch, failing: set[Shape], message: str = "out of memory"
                       ) -> tuple[str, list[Shape]]:
    """LargerInput's warning for a build that passed 2 x 128 x 32 and fails on each shape of
    `failing` with `message` (check stubbed), and the shapes it was run on."""
    from fa_cli.judge.steps import Context
    from fa_cli.judge.findings import Finding
    ran = []

    def check(program, shape, launcher, work, say, budget, rows=None):
        ran.append(shape)
        return [Finding(Kind.WARNING, [f"passes the cases run, but ... it fails: {message}"],
                        dict(larger_failed=1))] if shape in failing else []
    monkeypatch.setattr(larger_input, "check", check)
    monkeypatch.setattr(larger_input.race_check, "applies", lambda program: True)
    result = type("Result", (), dict(verdict="PASS", target=type("Target", (), dict(shape=Shape(2, 128, 32)))))
    ctx = Context(Program("hw4", tmp_path / "hw4"), None, tmp_path, Budget(60), lambda l: None, 5e-3, None, "t01")
    ctx.results = [result]
    line, = larger_input.LargerInput().run(ctx)[0].lines
    return line, ran


PRODUCTS_SAID = "; there N*N*4 bytes = 4 GiB, B*N*N*4 bytes = 8 GiB, B*N*N = 2,147,483,648: 2^31 or more, on no " \
    "input passed"


def test_a_failure_where_a_32_bit_size_first_reaches_2_31_is_weighed_by_a_run_where_none_does(tmp_path, monkeypatch):
    """4 x 2048 right, 2 x 32768 failing (B*N*N = 2^31 there, its int wrapped): the warning names the
    products that reach 2^31 there and on no input passed, the larger one that passed counted too,
    and one run more at 1 x 23168 (the longest N, a multiple of 128, where none does: N*N*4 bytes =
    2,147,024,896) that is right. That run holds a third of the floats (set36's s09: a two-stream
    pipeline that leaves a chunk uncollected, one chunk there), so a 32-bit size is said as one
    question beside what grows with the input."""
    line, ran = larger_run_failing(tmp_path, monkeypatch, {Shape(2, 32768, 32)})
    assert ran == [Shape(4, 2048, 32), Shape(2, 4096, 32), Shape(2, 32768, 32), Shape(1, 23168, 32)], ran
    assert line.endswith("out of memory" + PRODUCTS_SAID + ", and a drawn B=1, N=23168, d=32 input, where none does, "
                         "is right on the 64 rows checked; it holds 2,224,128 floats against 6,291,456: a 32-bit "
                         "size? (an int holding a size or an index: compute it in size_t), or anything sized by the "
                         "input's length (a chunk or stream count, a buffer sized for less, a race with more tiles to "
                         "meet in)"), line


def test_a_failure_at_the_longest_rows_that_shows_where_no_product_reaches_2_31_asks_no_32_bit_size(
        tmp_path, monkeypatch):
    """set34's s04: partial buffers sized for 4 key splits where 8 are made fail at 2 x 32768 x 32, where
    B*N*N reaches 2^31, and at 1 x 23168 x 32, where nothing does: the warning says so, and asks no
    32-bit size."""
    line, ran = larger_run_failing(tmp_path, monkeypatch, {Shape(2, 32768, 32), Shape(1, 23168, 32)})
    assert ran[-1] == Shape(1, 23168, 32)
    assert line.endswith("out of memory" + PRODUCTS_SAID + "; but a drawn B=1, N=23168, d=32 input, where none reaches "
                         "2^31, fails too: a mistake that needs no 32-bit size shows there already (a buffer sized, or "
                         "an index bounded, for shorter rows?)"), line
    assert "a 32-bit size?" not in line


def test_the_run_where_no_product_reaches_2_31_is_the_longest_whole_tile_n():
    from fa_cli.judge.across_cases import SIZE_PRODUCTS, under_limit
    under = under_limit(Shape(2, 32768, 64))
    assert under == Shape(1, 23168, 64)
    assert all(product(under) < 2**31 for _, product, _ in SIZE_PRODUCTS)
    assert any(product(Shape(1, under.N + 128, 64)) >= 2**31 for _, product, _ in SIZE_PRODUCTS)
    assert under_limit(Shape(1, 100, 32)) is None  # no multiple of 128 at or under N


def test_a_run_stopped_far_past_the_kernels_pace_is_warned_as_one_that_may_never_end(tmp_path, monkeypatch):
    """set36's s04: split-K blocks whose merge spins on blocks that are not resident hang on 2 x 32768:
    stopped at 30 s where t04's kernels (0.2 ms, 3 x 256 x 64) give about 2.2 s at that pace: a warning.
    At a pace that needs most of the limit, the stop is said as it was."""
    from types import SimpleNamespace
    from fa_cli.judge.findings import Finding
    from fa_cli.judge.steps import Context
    stopped = [Finding(Kind.MISSING_TOOL, ["larger input: ... was stopped at 30 s"], dict(larger_stopped=30.0))]
    monkeypatch.setattr(larger_input, "check", lambda *a, **k: stopped if a[1] == Shape(2, 32768, 64) else [])
    monkeypatch.setattr(larger_input.race_check, "applies", lambda program: True)

    def passed(ms):
        log = f"fa-launch: launches=1 untimed=0 ms={ms} grid=4x3x1 block=64x1x1 smem=0 regs=40 kernel=k\n"
        return SimpleNamespace(verdict="PASS", target=SimpleNamespace(name="t04", shape=Shape(3, 256, 64)),
                               run=SimpleNamespace(stderr=log, timing={}))
    ctx = Context(Program("hw4", tmp_path / "hw4"), None, tmp_path, Budget(60), lambda l: None, 5e-3, None, "t01")
    ctx.results = [passed(0.2)]
    [found] = larger_input.LargerInput().run(ctx)
    assert found.kind == Kind.WARNING and "it was still running when stopped at 30 s: its work is 10923 times t04's, " \
        "whose kernels took 0.2 ms, so about 2.2 s of kernels at that pace: a run that may never end" in \
        found.lines[0], found.lines
    ctx.results = [passed(5.0)]  # 55 s at that pace: a slow program, not said to hang
    assert larger_input.LargerInput().run(ctx) == stopped


def test_a_last_tile_of_64_keys_past_half_full_comes_after_the_odd_n_and_is_said_so(tmp_path, monkeypatch):
    """set39's s10: a last tile of `N % 32` keys on 64 lanes drops 32 keys where N mod 64 >= 32; the
    course's N (0 or 8 mod 64) and 129 pass, one batch of 97 rows does not."""
    import sys
    monkeypatch.setenv("FA_CACHE", str(tmp_path / "cache"))
    assert drawn_shapes.SHAPES[-3] is drawn_shapes.half_tile_shape
    assert drawn_shapes.half_tile_shape([Shape(2, 128, 64), Shape(3, 200, 32)]) == Shape(1, 97, 64)
    assert drawn_shapes.half_tile_shape([Shape(1, 100, 32)]) is None and drawn_shapes.half_tile_shape([]) is None
    program = tmp_path / "stand-in"
    program.write_text(HALF_TILE_CUT.format(python=sys.executable))
    program.chmod(0o755)
    [found] = larger_input.check(Program("hw4.hip", program), Shape(1, 97, 32), None, tmp_path, lambda line: None,
                                 Budget(60))
    assert found.lines[0].startswith("passes the cases run, but on a drawn B=1, N=97, d=32 input (one batch whose "
                                     "last tile of 64 keys holds 33, past half: no course case has such an N) it "
                                     "writes"), found
    assert larger_input.check(Program("hw4.hip", program), Shape(1, 129, 32), None, tmp_path, lambda line: None,
                              Budget(60)) == []


def test_a_few_batches_of_rows_shorter_than_a_tile_come_last_and_are_said_so(tmp_path, monkeypatch):
    """set40's s07: a kernel that takes a batch's row tiles as gridDim.x / B over a 1-D grid of
    ceil(B N / 8) blocks leaves the last N % 8 rows of a batch unwritten where B N % 8 leaves too few
    blocks: the course's N and one batch of 129 or 97 rows pass, 3 batches of 21 rows do not."""
    import sys
    monkeypatch.setenv("FA_CACHE", str(tmp_path / "cache"))
    assert drawn_shapes.SHAPES[-2] is drawn_shapes.small_shape and drawn_shapes.SHAPES[-1] is drawn_shapes.tiny_shape
    assert drawn_shapes.small_shape([Shape(2, 128, 64), Shape(1, 97, 32)]) == Shape(3, 21, 64)
    assert drawn_shapes.small_shape([Shape(2, 16, 32)]) is None and drawn_shapes.small_shape([]) is None
    program = tmp_path / "stand-in"
    program.write_text(FLAT_TILES.format(python=sys.executable))
    program.chmod(0o755)
    [found] = larger_input.check(Program("hw4.cu", program), Shape(3, 21, 32), None, tmp_path, lambda line: None,
                                 Budget(60))
    assert found.lines[0].startswith("passes the cases run, but on a drawn B=3, N=21, d=32 input (3 batches of 21 "
                                     "rows, under one tile of 32: no course case has rows so short) it writes "), found
    assert "a mistake that shows only at such a size (the cases run have rows of a tile or more)" in found.lines[0]
    for shape in (Shape(1, 129, 32), Shape(1, 97, 32), Shape(2, 128, 32)):
        assert larger_input.check(Program("hw4.cu", program), shape, None, tmp_path, lambda line: None,
                                  Budget(60)) == []


FLAT_TILES = """#!{python}
import sys
import numpy as np
raw = np.fromfile(sys.argv[1], dtype="<i4", count=3); B, N, d = (int(x) for x in raw)
x = np.fromfile(sys.argv[1], dtype="<f4", offset=12).reshape(B, 3, N, d).astype(np.float64)
tiles = (-(-B * N // 8)) // B  # row tiles a batch, from a 1-D grid over the flat rows
o = np.zeros((B, N, d))
for b in range(B):
    q, k, v = x[b]
    s = q @ k.T / np.sqrt(d)
    p = np.exp(s - s.max(axis=1, keepdims=True))
    rows = min(N, 8 * tiles)
    o[b, :rows] = (p @ v / p.sum(axis=1, keepdims=True))[:rows]
o.astype("<f4").tofile(sys.argv[2])
"""


HALF_TILE_CUT = """#!{python}
import sys
import numpy as np
raw = np.fromfile(sys.argv[1], dtype="<i4", count=3); B, N, d = (int(x) for x in raw)
x = np.fromfile(sys.argv[1], dtype="<f4", offset=12).reshape(B, 3, N, d).astype(np.float64)
keys = N if N % 64 < 32 else N - 32  # the last tile's count taken as N % 32 on 64 lanes: 32 keys lost
o = np.empty((B, N, d))
for b in range(B):
    q, k, v = x[b]
    s = q @ k[:keys].T / np.sqrt(d)
    p = np.exp(s - s.max(axis=1, keepdims=True))
    o[b] = p @ v[:keys] / p.sum(axis=1, keepdims=True)
o.astype("<f4").tofile(sys.argv[2])
"""


LAST_SHARE_LEFT = """#!{python}
import sys
import numpy as np
B, N, d = (int(x) for x in np.fromfile(sys.argv[1], dtype="<i4", count=3))
x = np.fromfile(sys.argv[1], dtype="<f4", offset=12).reshape(B, 3, N, d).astype(np.float64)
s = x[:, 0] @ x[:, 1].transpose(0, 2, 1) / np.sqrt(d)
p = np.exp(s - s.max(axis=2, keepdims=True))
o = (p / p.sum(axis=2, keepdims=True)) @ x[:, 2]
S = min(4, B); per = -(-B // S)
nb = B - (S - 1) * per  # the last stream's share, shorter: started at s * nb, its own batches never done
if nb < per:
    o[(S - 1) * per:] = 0
o.astype("<f4").tofile(sys.argv[2])
"""


def test_ten_batches_come_before_the_odd_n_and_show_a_short_last_share(tmp_path, monkeypatch):
    """set41's s04: batches dealt to min(4, B) streams in shares of ceil(B / 4), the last share's start
    taken from its own count: right at B = 2, 3, 4 and 16, wrong at the course's B = 10."""
    import sys
    monkeypatch.setenv("FA_CACHE", str(tmp_path / "cache"))
    passed = [Shape(2, 128, 32), Shape(3, 200, 32), Shape(16, 128, 64)]
    assert drawn_shapes.shares_shape(passed) == Shape(10, 128, 32)
    assert drawn_shapes.shares_shape([Shape(10, 2048, 64)]) is None
    assert drawn_shapes.SHAPES.index(drawn_shapes.shares_shape) < drawn_shapes.SHAPES.index(drawn_shapes.edge_shape)
    program = tmp_path / "stand-in"
    program.write_text(LAST_SHARE_LEFT.format(python=sys.executable))
    program.chmod(0o755)
    [found] = larger_input.check(Program("hw4.cu", program), Shape(10, 128, 32), None, tmp_path, lambda line: None,
                                 Budget(60))
    assert found.lines[0].startswith("passes the cases run, but on a drawn B=10, N=128, d=32 input (10 batches, as the "
                                     "course's c10, c26 and c27 have"), found.lines
    assert "a mistake that shows only at 10 batches" in found.lines[0], found.lines
    assert "every row checked is right before batch 9, row 0 and wrong from there on, every wrong value 0 (as where " \
        "nothing was written): batch 9 is where the last of 4 shares of ceil(10 / 4) = 3 batches would start, a " \
        "short one of 1" in found.lines[0], found.lines
    assert larger_input.last_share(9, 12) is None and larger_input.last_share(5, 10) is None  # shares that divide


FIRST_BATCHS_V = """#!{python}
import sys
import numpy as np
B, N, d = (int(x) for x in np.fromfile(sys.argv[1], dtype="<i4", count=3))
x = np.fromfile(sys.argv[1], dtype="<f4", offset=12).reshape(B, 3, N, d).astype(np.float64)
s = x[:, 0] @ x[:, 1].transpose(0, 2, 1) / np.sqrt(d)
p = np.exp(s - s.max(axis=2, keepdims=True))
v = x[:, 2] if N < 64 else np.broadcast_to(x[:1, 2], x[:, 2].shape)  # a later chunk's P V given the first batch's V
((p / p.sum(axis=2, keepdims=True)) @ v).astype("<f4").tofile(sys.argv[2])
"""


def test_batches_that_read_the_first_batchs_v_are_said_so(tmp_path, monkeypatch):
    """set42's s01: the P V pass of every chunk after the first given the first chunk's input: each
    later batch is its own softmax times batch 0's V, said from the values checked."""
    import sys
    monkeypatch.setenv("FA_CACHE", str(tmp_path / "cache"))
    program = tmp_path / "stand-in"
    program.write_text(FIRST_BATCHS_V.format(python=sys.executable))
    program.chmod(0o755)
    [found] = larger_input.check(Program("hw4.cu", program), Shape(3, 128, 32), None, tmp_path, lambda line: None,
                                 Budget(60))
    assert "; batches 1-2's values checked are attention with batch 0's V (batch 0) and their own other parts: V " \
        "read at another batch's place" in found.lines[0], found.lines


ROWS_CUT_AT_512 = """#!{python}
import sys
import numpy as np
B, N, d = (int(x) for x in np.fromfile(sys.argv[1], dtype="<i4", count=3))
x = np.fromfile(sys.argv[1], dtype="<f4", offset=12).reshape(B, 3, N, d).astype(np.float64)
s = x[:, 0] @ x[:, 1].transpose(0, 2, 1) / np.sqrt(d)
p = np.exp(s - s.max(axis=2, keepdims=True))
o = (p / p.sum(axis=2, keepdims=True)) @ x[:, 2]
if N == 512:  # set43's s08: the instance chosen by N > 512, its grid by N >= 512: half the rows at N = 512
    o[:, 256:] = 0
o.astype("<f4").tofile(sys.argv[2])
"""


def test_the_courses_n_of_512_is_drawn_where_no_case_run_had_it(tmp_path, monkeypatch):
    import sys
    monkeypatch.setenv("FA_CACHE", str(tmp_path / "cache"))
    assert drawn_shapes.N512([Shape(2, 128, 32), Shape(3, 256, 64)]) == Shape(2, 512, 64)
    assert drawn_shapes.N512([Shape(2, 512, 32)]) is None
    program = tmp_path / "stand-in"
    program.write_text(ROWS_CUT_AT_512.format(python=sys.executable))
    program.chmod(0o755)
    [found] = larger_input.check(Program("hw4.cu", program), Shape(2, 512, 32), None, tmp_path, lambda line: None,
                                 Budget(60))
    assert found.lines[0].startswith("passes the cases run, but on a drawn B=2, N=512, d=32 input (2 batches at the "
                                     "course's N = 512, which no case run has)"), found.lines
    assert "a mistake that shows only at N = 512 (the cases run have other N)" in found.lines[0], found.lines


NEGATIVE_ROWS_NAN = """#!{python}
import sys
import numpy as np
B, N, d = (int(x) for x in np.fromfile(sys.argv[1], dtype="<i4", count=3))
x = np.fromfile(sys.argv[1], dtype="<f4", offset=12).reshape(B, 3, N, d).astype(np.float64)
s = x[:, 0] @ x[:, 1].transpose(0, 2, 1) / np.sqrt(d)
m = np.maximum(s.max(axis=2, keepdims=True), 0.0)  # set43's s09: a max merged as integers keeps its start
p = np.exp(s - m)
o = (p / p.sum(axis=2, keepdims=True)) @ x[:, 2]
o[(s.max(axis=2) < 0)] = np.nan  # exp(s + inf) / inf in the rows whose scores are all negative
o.astype("<f4").tofile(sys.argv[2])
"""


def test_rows_of_only_negative_scores_show_on_the_tiny_rows_drawn_last(tmp_path, monkeypatch):
    import sys
    monkeypatch.setenv("FA_CACHE", str(tmp_path / "cache"))
    assert drawn_shapes.tiny_shape([Shape(2, 128, 64)]) == Shape(64, 4, 64)
    program = tmp_path / "stand-in"
    program.write_text(NEGATIVE_ROWS_NAN.format(python=sys.executable))
    program.chmod(0o755)
    [found] = larger_input.check(Program("hw4.cu", program), Shape(64, 4, 32), None, tmp_path, lambda line: None,
                                 Budget(60))
    assert found.lines[0].startswith("passes the cases run, but on a drawn B=64, N=4, d=32 input (64 batches of 4 "
                                     "rows: about 1 row in 16 has only negative scores"), found.lines
    assert "(max error inf)" in found.lines[0] or "NaN" in found.lines[0], found.lines  # the rows' NaN seen


def test_the_last_chunk_of_batches_left_out_is_said_where_its_size_divides_b():
    """set45's s08: batches in chunks of 64, the last chunk's count B % 64 (0 at B = 9600): every row
    right before batch 9536 and 0 from there on; said as the last 64 batches, 64 dividing B."""
    shape = Shape(9600, 4, 2)
    got = np.ones((9600, 4, 2), dtype=np.float32)
    got[9536:] = 0
    wrong = got == 0
    said = larger_input.wrong_from(got, wrong, shape, None)
    assert said == ("every row checked is right before batch 9536, row 0 and wrong from there on, every wrong value 0 "
                    "(as where nothing was written): the last 64 batches exactly, and 64 divides B = 9600 (150 x 64): "
                    "as in a program that computes the batches in chunks of 64 and takes the last chunk's count as "
                    "B % 64 (0 where 64 divides B) where B minus the chunk's first batch belongs, the chunk not "
                    "computed or not copied back?"), said
    assert larger_input.last_chunk(9550, 9600) is None and larger_input.last_chunk(9599, 9600) is None
    assert larger_input.last_chunk(2, 4) is None and larger_input.last_chunk(32, 64) is None  # halves: two shares'
    got[9536:] = 2.0  # written, and wrong: no chunk left out said
    assert "chunks of 64" not in larger_input.wrong_from(got, got == 2.0, shape, None)


def test_a_short_rows_slots_past_n_weighed_in_l_are_read_from_the_rows_after_k():
    """set44's s09: rows under one tile of 32, the lanes past N scored against the floats after K
    (V's first rows) and counted in l, the output's loop stopping at N: every value of the drawn
    3 x 21 input is that attention; the right output is not."""
    from fa_cli.judge import keys_past_n, reference
    shape = Shape(3, 21, 32)
    rng = np.random.default_rng(29)
    flat = rng.uniform(-3, 3, size=(3, 3 * 21, 32))  # the input's layout: each batch's Q, K, V rows in turn
    q, k, v = flat[:, :21], flat[:, 21:42], flat[:, 42:]
    got = np.zeros((3, 21, 32))
    for b, i in np.ndindex(3, 21):  # one tile of 32 lanes, lane j reading K's row j past N as the buffer has it
        s = np.array([q[b, i] @ flat[b, 21 + j] for j in range(32)]) / np.sqrt(32)
        p = np.exp(s - s.max())
        got[b, i] = (p[:21, None] * v[b]).sum(axis=0) / p.sum()  # the output's loop stops at N
    said = keys_past_n.unmasked_slots((q, k, v), shape, None, got, 5e-3)
    assert said is not None and said.startswith("every value checked is attention whose sum l holds 11 keys more: the "
                                                "slots 21..31 of a last tile of 16 or 32 keys"), said
    assert keys_past_n.unmasked_slots((q, k, v), shape, None, reference.attention(q, k, v), 5e-3) is None
    apart = np.concatenate([k.reshape(-1, 32), np.zeros((11, 32))])  # K in a buffer of its own: the next batch's
    for b, i in np.ndindex(2, 21):
        s = np.array([q[b, i] @ apart[b * 21 + j] for j in range(32)]) / np.sqrt(32)
        p = np.exp(s - s.max())
        got[b, i] = (p[:21, None] * v[b]).sum(axis=0) / p.sum()
    said = keys_past_n.unmasked_slots((q, k, v), shape, None, got, 5e-3)
    assert said is not None and "against the rows that follow K_b in a buffer of K alone (the next batch's K rows " \
        "0..10; the last batch not checked)" in said, said


def test_a_cooperative_launch_refused_at_a_larger_size_is_said_as_what_it_ran_into(tmp_path, monkeypatch):
    """set50's s06: a cooperative kernel whose grid is B x ceil(N / 64) blocks passes every case and stops
    at 2 x 32768 with the runtime's "too many blocks in cooperative launch": the warning says what that
    refusal means and asks neither a 32-bit size nor a run where none reaches 2^31."""
    line, ran = larger_run_failing(tmp_path, monkeypatch, {Shape(2, 32768, 32)},
                                   "hw4: s06.cu:198: too many blocks in cooperative launch")
    assert ran[-1] == Shape(2, 32768, 32), ran
    assert line.endswith("cooperative launch; the runtime refused the launch for the input's size: a cooperative "
                         "launch may have no more blocks than the GPU holds at once"
                         " (cudaOccupancyMaxActiveBlocksPerMultiprocessor times the SMs), and this grid grows with the "
                         "input: launch that many blocks and let each loop over the work"), line
    assert "32-bit" not in line
