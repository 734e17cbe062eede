import numpy as np
import pytest

from fa_cli.cases import generate
from fa_cli.cases.format import AttentionInput, Shape
from fa_cli.judge import reference, verify


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
    assert verify.RowCheck().rows(Shape(4, 1024, 64)) is None  # every row, whatever the size
    assert verify.RowCheck().rows(Shape(26, 32768, 64)) is None
    assert verify.RowCheck(full=True).rows(Shape(26, 32768, 64)) is None
    assert verify.RowCheck(sample=32).rows(Shape(26, 32768, 64)) == 32
    assert verify.RowCheck(sample=100).rows(Shape(2, 16, 32)) is None  # more rows asked than exist
    assert verify.RowCheck().is_default and not verify.RowCheck(sample=3).is_default


def test_against_expected_locates_in_shape(case):
    _, exact = case
    wrong = exact.copy()
    wrong[1, 2, 3] = 1.0 + exact[1, 2, 3]
    result = verify.against_expected(wrong, exact, shape=Shape(3, 40, 32))
    assert result.bad == 1 and result.where == (1, 2, 3)


def test_sampled_results_say_so(case):
    inp, exact = case
    assert verify.against_reference(inp, exact, check=verify.RowCheck(sample=4)).sampled
    assert not verify.against_reference(inp, exact).sampled
    assert not verify.against_expected(exact, exact, shape=inp.shape).sampled


@pytest.fixture
def big():
    """An output of 2 x 1000 x 64 (several comparison blocks, one cut inside a batch) and its expected file."""
    rng = np.random.default_rng(5)
    exp = rng.uniform(-3, 3, size=(2, 1000, 64)).astype(np.float32)
    return exp, Shape(2, 1000, 64)


def test_every_scattered_value_is_found(big, monkeypatch):
    """50 values off by 0.25 anywhere (a race's footprint) are each counted, whichever block they fall in."""
    exp, shape = big
    monkeypatch.setattr(verify, "COMPARE_BLOCK", 4096)
    out = exp.copy()
    flat = np.random.default_rng(1).choice(out.size, size=50, replace=False)
    out.reshape(-1)[flat] += 0.25
    result = verify.against_expected(out, exp, shape=shape)
    assert result.bad == 50 and result.checked == out.size and not result.passed
    assert result.max_err == pytest.approx(0.25, rel=1e-5)
    batches, rows, bad = result.wrong.arrays()
    assert len(rows) == shape.B * shape.N  # every row accounted for, the clean ones too
    wrong_rows = {(int(b), int(r)) for b, r, n in zip(batches, rows, bad) if n}
    assert wrong_rows == {(int(i // 64 // 1000), int(i // 64 % 1000)) for i in flat}


def test_values_at_the_tolerance_are_judged_exactly(big):
    """A difference just over tol is wrong and one just under is right, however float32 rounds."""
    exp, shape = big
    out = exp.copy()
    out[0, 0, 0] = exp[0, 0, 0] + np.float32(0.00501)
    out[1, 999, 63] = exp[1, 999, 63] + np.float32(0.00499)
    result = verify.against_expected(out, exp, shape=shape)
    assert result.bad == 1 and result.where == (0, 0, 0)


def test_nan_and_infinity_in_an_output_are_wrong(big):
    exp, shape = big
    out = exp.copy()
    out[1, 500, 3], out[0, 7, 9] = np.nan, np.inf
    result = verify.against_expected(out, exp, shape=shape)
    assert result.bad == 2 and result.nonfinite == 2


def test_a_passing_output_reports_its_largest_error_and_where(big):
    exp, shape = big
    out = exp.copy()
    out[1, 321, 12] += np.float32(0.002)
    result = verify.against_expected(out, exp, shape=shape)
    assert result.passed and result.where == (1, 321, 12)
    assert result.max_err == pytest.approx(0.002, rel=1e-3)


def test_a_signalling_nan_in_an_output_is_wrong_and_no_warning(case, big):
    """Garbage bits a program wrote (memory past a buffer) may be a signalling NaN, whose arithmetic
    raises numpy's invalid flag: it counts as a NaN, and fa prints no RuntimeWarning of numpy's."""
    import warnings
    from fa_cli.judge import diagnose
    signalling = np.array([0x7FA00000], dtype=np.uint32).view(np.float32)[0]
    inp, exact = case
    wrong = exact.copy()
    wrong[1, 4, 2] = signalling
    exp, shape = big
    out = exp.copy()
    out[0, 7, 9] = signalling
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = verify.against_reference(inp, wrong)
        assert not result.passed and result.nonfinite == 1 and result.where == (1, 4, 2)
        result = verify.against_expected(out, exp, shape=shape)
        assert result.bad == 1 and result.nonfinite == 1
        assert diagnose.take_sample(inp, wrong, 5e-3).wrong.sum() == 1
