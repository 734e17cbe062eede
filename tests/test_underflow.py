"""fa_cli/judge/probes/underflow.py: NaN with a single key read as weights that underflow. Stand-in
programs in the course's format subtract a bound from the scores in place of their max: a squared
norm of K is named by its bound; a program NaN at every scale, or one with no bound, is not."""
import numpy as np
from helpers import stand_in_context

from fa_cli.judge.probes import underflow
from fa_cli.judge.probes.experiments import NotFinite
from fa_cli.judge.probes.step import ProbeInput

BOUNDED = """#!{python}
import sys
import numpy as np
raw = np.fromfile(sys.argv[1], dtype="<i4", count=3); B, N, d = (int(x) for x in raw)
x = np.fromfile(sys.argv[1], dtype="<f4", offset=12).reshape(B, 3, N, d)
out = np.empty((B, N, d), np.float32)
with np.errstate(all="ignore"):
    for b in range(B):
        q, k, v = x[b]
        q = q / np.float32(np.sqrt(d))
        ref = {ref}  # subtracted in place of the running max
        p = np.exp(q @ k.T - ref)  # float32: 0 under about -104
        out[b] = (p @ v) / p.sum(axis=1, keepdims=True)
out.astype("<f4").tofile(sys.argv[2])
"""


def context(tmp_path, bound: str = "", ref: str = "", size: float = 3.0, source: str = "p = __expf(s - ref);\n"):
    """A stand-in subtracting `ref` (else |q| times `bound`) from its scaled scores."""
    rng = np.random.default_rng(4)
    inp = ProbeInput(*(rng.uniform(-size, size, size=(2, 64, 32)).astype(np.float32) for _ in range(3)))
    ref = ref or f"np.linalg.norm(q, axis=1, keepdims=True) * {bound}"
    return stand_in_context(tmp_path, BOUNDED.replace("{ref}", ref), source, inp)


def test_a_squared_norm_of_k_subtracted_from_the_scores_is_named_as_an_underflow(tmp_path):
    ctx = context(tmp_path, "(np.linalg.norm(k, axis=1) ** 2).max()")
    said, _ = underflow.reading(ctx) or (None, None)
    assert said is not None and "every row is NaN above a scale and finite below it" in said, said
    assert "each weight exp(s - m) underflows to 0" in said, said
    assert said.endswith("it is |q| max_j |k_j|^2: a squared norm of K where its norm belongs (a square root left "
                         "out) (inside each row's bracket in 100% of the rows, and the thresholds of K's own scaling "
                         "follow it)"), said


def test_the_step_names_it_after_nan_with_one_key(tmp_path):
    ctx = context(tmp_path, "(np.linalg.norm(k, axis=1) ** 2).max()")
    found = NotFinite().run(ctx)
    assert ctx.facts.named and found[0].kind == "measured", found
    assert any("a squared norm of K" in line for line in found[0].lines), found
    assert found[0].lines[-1].startswith("lines with the exponential in hw4.cu: 1 `p = __expf(s - ref);`"), found


def test_a_max_taken_from_unscaled_scores_is_named_by_its_bound(tmp_path):
    # a first pass's row max of q . k without 1/sqrt(d), the weights' pass scaled: large inputs underflow
    ctx = context(tmp_path, ref="((q * np.float32(np.sqrt(d))) @ k.T).max(axis=1, keepdims=True)", size=10.0,
                  source="qi[x] = q[x];\nmx = fmaxf(mx, s);\np = __expf(s - m);\n")
    said, _ = underflow.reading(ctx) or (None, None)
    assert said is not None and "it is sqrt(d) max_j s_j, the row's max of q . k not scaled by 1/sqrt(d)" in said, said
    found = NotFinite().run(ctx)  # the lines shown: where that max is taken
    assert found[0].lines[-1] == "lines with the row's max in hw4.cu: 2 `mx = fmaxf(mx, s);`", found


def test_a_bound_fa_has_not_is_said_by_its_size_and_no_nan_at_every_scale_is_no_underflow(tmp_path):
    ctx = context(tmp_path, "400.0")
    said, _ = underflow.reading(ctx) or (None, None)
    assert said is not None and said.endswith("none of the bounds fa tried fits it (max q . k unscaled, |q| max "
                                              "|k|^2, |q| max |k| unscaled, |q| sum |k|, sum |s|)"), said
    ctx = context(tmp_path, "np.float32('nan')")
    assert underflow.reading(ctx) is None


UNSHIFTED = """#!{python}
import sys
import numpy as np
raw = np.fromfile(sys.argv[1], dtype="<i4", count=3); B, N, d = (int(x) for x in raw)
x = np.fromfile(sys.argv[1], dtype="<f4", offset=12).reshape(B, 3, N, d)
out = np.empty((B, N, d), np.float32)
with np.errstate(all="ignore"):
    for b in range(B):
        q, k, v = x[b]
        p = np.exp((q / np.float32(np.sqrt(d))) @ k.T).astype({dtype}).astype(np.float32)  # no max subtracted
        out[b] = (p @ v) / p.sum(axis=1, keepdims=True)
out.astype("<f4").tofile(sys.argv[2])
"""


def test_rows_of_inf_where_the_largest_score_passes_a_halfs_exp_overflow_are_named_as_unshifted_weights(tmp_path):
    """set39's s06: weights exp(s) of the unshifted scores staged as __half: the rows whose largest
    score passes ln 65504 = 11.09 are inf or NaN, the others right (to a half's rounding of p)."""
    rng = np.random.default_rng(8)
    inp = ProbeInput(*(rng.uniform(-3, 3, size=(2, 128, 32)).astype(np.float32) for _ in range(3)))
    ctx = stand_in_context(tmp_path, UNSHIFTED.replace("{dtype}", "np.float16"), "w = __float2half(__expf(s));\n", inp)
    found = NotFinite().run(ctx)
    assert ctx.facts.named and found[0].kind == "measured", found
    said = found[0].lines[1]
    assert "rows with NaN or inf on " in said and "are exactly those whose largest score q . k / sqrt(d) is over ln " \
        "of a half (fp16, largest finite 65504) = 11.09" in said, said
    assert "; with Q times 1.1 the rows with NaN or inf are again exactly those over it" in said, said
    assert said.endswith("its weights are exp of the scores not shifted by the row's max, overflowing a half (exp(s "
                         "- m) is at most 1)"), said
    assert found[0].lines[-1].startswith("lines with the exponential in hw4.cu: 1 `w = __float2half(__expf(s));`")
    # NaN in every row is no split by the scores
    assert underflow.overflow_cut(np.full((2, 128, 32), np.nan), inp) is None


def test_nan_rows_fixed_by_their_index_are_not_read_as_an_overflow_when_scaling_q_does_not_move_them(tmp_path):
    """A program whose NaN rows are fixed by their index (a race in those rows, say) that happen to be
    exactly the rows whose largest score passes 11.09: the split by scores fits, but with Q scaled
    up the rows it predicts over the threshold are not the NaN ones."""
    rng = np.random.default_rng(8)
    inp = ProbeInput(*(rng.uniform(-3, 3, size=(2, 128, 32)).astype(np.float32) for _ in range(3)))
    s_max = (inp.q.astype(np.float64) @ inp.k.astype(np.float64).transpose(0, 2, 1)).max(axis=2) / np.sqrt(32)
    rows = [tuple(map(int, br)) for br in np.argwhere(s_max > np.log(65504.0))]
    script = UNSHIFTED.replace("p = np.exp((q / np.float32(np.sqrt(d))) @ k.T).astype({dtype}).astype(np.float32)",
                               "s = (q / np.float32(np.sqrt(d))) @ k.T; p = np.exp(s - s.max(axis=1, keepdims=True))")
    script = script.replace("out.astype(", "".join(f"out[{b}, {r}] = np.nan\n" for b, r in rows) + "out.astype(")
    ctx = stand_in_context(tmp_path, script, "p = __expf(s - m);\n", inp)
    assert underflow.overflow_cut(ctx.facts.out, inp) is not None  # the split alone fits
    assert underflow.overflow(ctx) is None


MAX_AS_SIGNED_BITS = """#!{python}
import sys
import numpy as np
raw = np.fromfile(sys.argv[1], dtype="<i4", count=3); B, N, d = (int(x) for x in raw)
x = np.fromfile(sys.argv[1], dtype="<f4", offset=12).reshape(B, 3, N, d).astype(np.float64)
s = x[:, 0] @ x[:, 1].transpose(0, 2, 1) / np.sqrt(d)
m = np.where(s.max(axis=2, keepdims=True) < 0, -np.inf, s.max(axis=2, keepdims=True))  # a signed atomicMax of bits
with np.errstate(all="ignore"):
    p = np.exp(s - m)
    out = (p @ x[:, 2]) / p.sum(axis=2, keepdims=True)
out.astype("<f4").tofile(sys.argv[2])
"""


def test_rows_of_nan_exactly_where_every_score_is_negative_are_named_as_a_max_that_keeps_its_start(tmp_path):
    """set43's s09: the row max merged by a signed atomicMax on a float's bits stays -inf where every
    score is negative: NaN in those rows alone, and with Q negated in the rows of positive scores."""
    rng = np.random.default_rng(8)
    inp = ProbeInput(*(rng.uniform(-3, 3, size=(64, 4, 32)).astype(np.float32) for _ in range(3)))
    ctx = stand_in_context(tmp_path, MAX_AS_SIGNED_BITS, "atomicMax((int*)&M, __float_as_int(m));\n", inp)
    found = NotFinite().run(ctx)
    assert ctx.facts.named and found[0].kind == "measured", found
    assert "are exactly those whose scores are all negative, and with Q negated again exactly those" in \
        found[0].lines[1], found[0].lines
    assert found[0].lines[-1] == "lines with the row's max in hw4.cu: 1 `atomicMax((int*)&M, __float_as_int(m));`"
