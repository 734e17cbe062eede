import numpy as np
import pytest

from fa_cli import generate, reference, verify
from fa_cli.format import AttentionInput, Shape


@pytest.fixture
def case(tmp_path):
    shape = Shape(3, 40, 32)
    path = tmp_path / "x.in"
    generate.write_input(path, shape, seed=2)
    inp = AttentionInput(path)
    exact = np.concatenate([reference.attention(*inp.qkv(b)) for b in range(3)]).astype(np.float32)
    return inp, exact


def test_exact_output_passes(case):
    inp, exact = case
    result = verify.against_reference(inp, exact, tol=1e-6)
    assert result.passed and result.checked == exact.size and result.max_err < 1e-6


def test_planted_error_is_found_and_located(case):
    inp, exact = case
    wrong = exact.copy()
    wrong[2, 17, 5] += 0.01
    wrong[1, 3, 0] += 0.004
    result = verify.against_reference(inp, wrong)
    assert not result.passed
    assert result.bad == 1 and result.where == (2, 17, 5)
    assert result.max_err == pytest.approx(0.01, rel=1e-3)


def test_nan_always_fails(case):
    inp, exact = case
    wrong = exact.copy()
    wrong[0, 39, 31] = np.nan
    result = verify.against_reference(inp, wrong, tol=1e9)
    assert not result.passed and result.nonfinite == 1 and result.where == (0, 39, 31)


def test_sampled_rows_include_first_and_last(case):
    inp, exact = case
    wrong = exact.copy()
    wrong[1, 39, 7] = 5.0  # the last row: the partial tile of every kernel
    result = verify.against_reference(inp, wrong, check=verify.RowCheck(sample=4, seed=9))
    assert not result.passed and result.where == (1, 39, 7)
    assert result.checked == 3 * 4 * 32


def test_sampling_is_seeded():
    rng_rows = [verify.sampled_rows(np.random.default_rng([s, 0]), 2, 100, 8) for s in (1, 1, 2)]
    np.testing.assert_array_equal(rng_rows[0], rng_rows[1])
    assert not np.array_equal(rng_rows[0], rng_rows[2])
    assert all(len(set(r)) == 8 for r in rng_rows[0])


def test_row_check():
    assert verify.RowCheck().rows(Shape(4, 1024, 64)) is None  # small: full
    assert verify.RowCheck().rows(Shape(26, 32768, 64)) == verify.DEFAULT_SAMPLE_ROWS
    assert verify.RowCheck(full=True).rows(Shape(26, 32768, 64)) is None
    assert verify.RowCheck(sample=100).rows(Shape(2, 16, 32)) is None  # more rows asked than exist
    assert verify.RowCheck().is_default and not verify.RowCheck(sample=3).is_default


def test_against_expected_locates_in_shape(case):
    _, exact = case
    wrong = exact.copy()
    wrong[1, 2, 3] = 1.0 + exact[1, 2, 3]
    result = verify.against_expected(wrong, exact, shape=Shape(3, 40, 32))
    assert result.bad == 1 and result.where == (1, 2, 3)
