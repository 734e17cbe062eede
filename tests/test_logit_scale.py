"""logit_scale: the factor on the logits read from log W, named by its value."""
import numpy as np

from fa_cli.judge.probes import logit_scale
from fa_cli.judge.probes.step import ProbeInput, logits, softmax_rows


def probe(N=200, d=32) -> ProbeInput:
    rng = np.random.default_rng(3)
    q, k, v = (rng.uniform(-3, 3, size=(2, N, d)).astype(np.float32) for _ in range(3))
    return ProbeInput(q, k, v)


def test_a_factor_on_the_logits_is_named_by_its_value():
    inp = probe(d=64)
    s = logits(inp.q, inp.k)
    W = softmax_rows(s * np.sqrt(64))
    said, fields = logit_scale.logit_slope(W, s, 64)
    assert fields["named"] == "sqrt(d)" and "not divided by sqrt(d)" in said
    assert logit_scale.logit_slope(softmax_rows(s), s, 64) is None


def test_a_scale_off_by_a_fifth_of_a_percent_is_told_from_float32s_rounding():
    """1/sqrt(64) from a bit trick and one Newton step, 0.124788 for 0.125 (-0.17%): W as a float32
    program writes it shows a = 0.9983; the right softmax in float32 shows none."""
    inp = probe(d=64)
    s = logits(inp.q, inp.k)
    W = softmax_rows(s * 0.124788396 * 8).astype(np.float32).astype(np.float64)
    said, fields = logit_scale.logit_slope(W, s, 64)
    assert "the scores are scaled by 0.1247884 where 1/sqrt(d) = 0.125 belongs, -0.169%: a scale computed " \
        "approximately" in said, said
    assert abs(fields["logit_factor"] - 0.998307) < 1e-5
    right = softmax_rows(s).astype(np.float32).astype(np.float64)
    assert logit_scale.logit_slope(right, s, 64) is None


def test_a_scale_kept_in_whole_numbers_is_named_by_its_value():
    """1 / floor(sqrt(32)) = 1/5 in place of 1/sqrt(32) (an int holding sqrt(d)); 1 / sqrt(d) in
    integers, 0: every key weighs the same."""
    inp = probe(d=32)
    s = logits(inp.q, inp.k)
    said, fields = logit_scale.logit_slope(softmax_rows(s * np.sqrt(32) / 5), s, 32)
    assert fields["named"] == "sqrt(d) / floor(sqrt(d))" and "sqrt(d) kept as a whole number" in said, said
    said, fields = logit_scale.logit_slope(softmax_rows(s * 0.0), s, 32)
    assert fields["named"] == "0" and "every key weighs the same" in said, said


def test_a_factor_on_the_logits_is_read_as_the_constants_it_is_made_of():
    assert logit_scale.constant_name(np.log(2) ** 2, 32) == "(ln 2)^2"
    assert logit_scale.constant_name(np.sqrt(64) / np.log(2), 64) == "sqrt(d) * (ln 2)^-1"
    assert logit_scale.constant_name(1.3, 64) is None
