"""fa_cli/judge/probes/floors.py: weights with a floor. The reference is a key-by-key online
softmax written out here whose exponential is clamped from below (set40's s05: exp2f(fmaxf(x, -16)));
the right softmax and other wrong weights read as no floor."""
import numpy as np
from helpers import stand_in_context

from fa_cli.judge.probes import floors
from fa_cli.judge.probes.step import ProbeInput, logits, softmax_rows

FLOOR = 2.0 ** -16


def clamped_loops(s, floor=FLOOR):
    """Each row's weights from a key-by-key online softmax whose exp is max(exp(x), floor)."""
    W = np.zeros_like(s)
    for b, r in np.ndindex(*s.shape[:2]):
        m, l, acc = -np.inf, 0.0, np.zeros(s.shape[2])
        for j, x in enumerate(s[b, r]):
            m_new = max(m, x)
            alpha = max(np.exp(m - m_new), floor) if np.isfinite(m) else 0.0
            p = max(np.exp(x - m_new), floor)
            l, acc = l * alpha + p, acc * alpha
            acc[j] += p
            m = m_new
        W[b, r] = acc / l
    return W


def scores(seed=5, size=3.0):
    rng = np.random.default_rng(seed)
    q, k = (rng.uniform(-size, size, size=(2, 96, 64)).astype(np.float32) for _ in range(2))
    return logits(q, k).astype(np.float64), q, k


def test_a_clamped_exponential_is_read_with_its_floor():
    s, _, _ = scores()
    found = floors.floor_of(clamped_loops(s), s)
    assert found is not None and abs(found[0] / FLOOR - 1) < 1e-6 and found[1] >= floors.MIN_ROWS, found
    assert floors.named_power(found[0]) == " = 2^-16"


def test_the_right_weights_and_a_factor_per_row_have_no_floor():
    s, _, _ = scores()
    P = softmax_rows(s)
    assert floors.floor_of(P, s) is None
    assert floors.floor_of(P * np.linspace(0.5, 1.5, 96)[None, :, None], s) is None


def test_uniform_weights_and_a_floor_added_are_no_clamp():
    """Every weight alike (scores all equal: a "floor" of 1) and p = exp(s - m) + 2^-16 (added, not
    clamped: keys near the floor get t + f, not max(t, f)) are not read as a clamp."""
    s, _, _ = scores()
    assert floors.floor_of(np.full_like(s, 1 / s.shape[2]), np.zeros_like(s)) is None
    s5 = 5 * s  # scores spread far enough that many keys fall near and under 2^-16 of the max
    p = np.exp(s5 - s5.max(axis=2, keepdims=True)) + FLOOR
    assert floors.floor_of(p / p.sum(axis=2, keepdims=True), s5) is None
    assert floors.floor_of(clamped_loops(s5), s5) is not None  # the same scores, clamped: read


def test_the_step_names_it_with_the_exponentials_line(tmp_path):
    s, q, k = scores()
    inp = ProbeInput(q, k, k, "the probe")
    ctx = stand_in_context(tmp_path, "#!/bin/false\n", "float p = exp2f(fmaxf(x, -EXP_FLOOR));\n", inp)
    ctx.facts.W, ctx.facts.P, ctx.facts.linear = clamped_loops(s), softmax_rows(s), True
    assert floors.WeightFloor().applies(ctx)
    [found] = floors.WeightFloor().run(ctx)
    assert "gets exactly that much" in found.lines[0] and "= 2^-16" in found.lines[0], found.lines
    assert found.lines[-1] == "lines with exp in hw4.cu: 1 `float p = exp2f(fmaxf(x, -EXP_FLOOR));`", found.lines
