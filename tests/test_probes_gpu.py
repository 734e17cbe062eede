"""On an NVIDIA GPU: the race check of a passing build and the probes on GPU programs, with the
planted sets' GPU files (tests/data/planted_sets/): a missing barrier that passes is warned with its
lines, a 32-lane assumption in a hw4.hip is named from the 32-lane experiment, and the correct
programs get no warning."""
import re

import pytest

from helpers import DATA, fa
from fa_cli.cases import generate
from fa_cli.cases.format import Shape

pytestmark = pytest.mark.gpu
SETS = DATA / "planted_sets"


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    path = tmp_path_factory.mktemp("probes-gpu") / "small.in"
    generate.write_input(path, Shape(3, 300, 64), 11)
    return path


def test_a_passing_program_with_a_missing_barrier_is_warned_with_its_lines(case):
    proc = fa("run", case, "--program", SETS / "set1" / "race.cu")
    assert proc.returncode == 0 and "PASS" in proc.stdout, proc.stdout + proc.stderr
    line = next(l for l in proc.stdout.splitlines() if l.startswith("passes here, but racecheck"))
    assert re.search(r"a write at .*race\.cu:\d+ against a read at .*race\.cu:\d+", line), line
    assert "the judge's GPU may schedule it otherwise" in line
    again = fa("run", case, "--program", SETS / "set1" / "race.cu")  # kept for the build: said again, not rerun
    assert line in again.stdout and "race check: compute-sanitizer" not in again.stderr
    quiet = fa("run", case, "--program", SETS / "set1" / "race.cu", "--no-race-check")
    assert "passes here, but" not in quiet.stdout


CORRECT = [SETS / "set1" / "base.cu", SETS / "set1" / "wave_ok.hip", SETS / "set2" / "base.cu", DATA / "planted_hw4.cu"]


@pytest.mark.parametrize("correct", CORRECT, ids=lambda p: f"{p.parent.name}-{p.name}")
def test_a_correct_program_gets_no_warning(correct, case):
    proc = fa("run", case, "--program", correct)
    assert proc.returncode == 0 and "PASS" in proc.stdout, proc.stdout + proc.stderr
    assert "passes here, but" not in proc.stdout and "32-lane" not in proc.stdout


def test_a_32_lane_assumption_is_named_from_the_experiment(case):
    proc = fa("run", case, "--program", SETS / "set1" / "wave32.hip")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    line = next(l for l in proc.stdout.splitlines() if "32-lane wavefronts" in l)
    assert "right with 32-lane wavefronts, wrong with the MI210's 64" in line and "a 32-lane assumption" in line
    assert re.search(r"wave32\.hip line \d+: .*__shfl", line), line


def test_a_q_row_without_its_blocks_offset_is_named_on_the_gpu(case):
    proc = fa("run", case, "--program", SETS / "set2" / "h02.cu")
    assert proc.returncode == 1 and "Q_b's row j read as row j % 64" in proc.stdout, proc.stdout + proc.stderr


def test_a_shuffle_only_half_a_wavefront_calls_is_named_with_its_line(case, tmp_path):
    """A hw4.hip whose shuffle sits in a branch that only the lower 32 lanes take stops on the
    emulation with no output: the 32-lane experiment still runs, and the emulation's line names the
    two calls the halves met at, the shuffle's own line among them."""
    source = tmp_path / "hw4.hip"
    source.write_text(f'#define PLANT HALF_BRANCH\n#include "{DATA / "planted_hw4.hip"}"\n')
    shuffle = next(n for n, text in enumerate((DATA / "planted_hw4.hip").read_text().splitlines(), 1)
                   if "if (__lane_id() < G) pj = __shfl(p, j);" in text)
    proc = fa("run", case, "--program", source)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    line = " ".join(next(l for l in proc.stdout.splitlines() if "32-lane wavefronts" in l).split())
    assert "right with 32-lane wavefronts; with the emulation's 64 no output of the right size" in line, proc.stdout
    assert f"lanes 0..31 at __shfl line {shuffle}, lanes 32..63 at __ballot line" in line, line


def test_a_passing_program_wrong_only_at_larger_sizes_is_warned(case):
    """set9's f05 skips keys under the running max less 10: right at N = 300, wrong from N = 512;
    it passes the case and is warned from one run on a drawn 4 x 2048 x 64 input."""
    proc = fa("run", case, "--program", SETS / "set9" / "f05.cu")
    assert proc.returncode == 0 and "PASS" in proc.stdout, proc.stdout + proc.stderr
    said = " ".join(proc.stdout.split())
    assert "passes the cases run, but on a drawn B=4, N=2048, d=64 input" in said, said
