"""fa_cli/judge/probes/precision.py: an output that is a lower precision's rounding is named with
the part rounded and the format; an error only of that size is said as measured; a wrong formula
gets nothing from this step."""
import ctypes
import shutil
import subprocess

import numpy as np
import pytest
from helpers import DATA

from fa_cli.judge.probes import precision
from fa_cli.judge.probes.step import ProbeInput

RNG = np.random.default_rng(5)


@pytest.fixture(autouse=True)
def same_draws():
    """Each test draws from the same seed whichever tests ran before it in its process (xdist)."""
    global RNG
    RNG = np.random.default_rng(5)


def probe(B=2, N=96, d=32) -> ProbeInput:
    q, k, v = (RNG.uniform(-3, 3, size=(B, N, d)).astype(np.float32) for _ in range(3))
    return ProbeInput(q, k, v)


def test_rounding_to_the_nearest_even_of_each_format():
    x = np.array([1 + 2 ** -12, 1 + 3 * 2 ** -12, 1 + 2 ** -9, 1 + 3 * 2 ** -9, -2.5])
    assert list(precision.rounded(x, "fp16")) == [1.0, 1 + 2 ** -10, 1 + 2 ** -9, 1 + 3 * 2 ** -9, -2.5]
    assert list(precision.rounded(x, "tf32")) == list(precision.rounded(x, "fp16"))
    assert list(precision.rounded(x, "bf16")) == [1.0, 1.0, 1.0, 1 + 2 ** -7, -2.5]


def test_an_output_computed_from_half_precision_inputs_is_named():
    inp = probe()
    out = precision.attention(inp.q, inp.k, inp.v, "fp16", "inputs").astype(np.float32)
    said, named = precision.read(out.astype(np.float64), inp.output(), inp)
    assert named and said.startswith("the output is float64 attention with Q, K and V rounded to fp16 (or tf32: "
                                     "the same here): it misses that by at most"), said


def test_bf16_weights_are_named_and_a_wrong_formula_is_not():
    inp = probe()
    out = precision.attention(inp.q, inp.k, inp.v, "bf16", "weights").astype(np.float32)
    said, named = precision.read(out.astype(np.float64), inp.output(), inp)
    assert named and "with P and V of the product P V rounded to bf16" in said, said
    wrong = ProbeInput(inp.q * 2, inp.k, inp.v).output()  # scores twice too large
    assert precision.read(wrong, inp.output(), inp) == (None, False)


def test_k_and_v_kept_in_bf16_are_named_apart_from_every_input_rounded():
    """K and V rounded to bf16's 8 significant bits (frexp and round here, ties to even), Q kept: a
    program's K and V tiles in bf16."""
    inp = probe()

    def bf16(x):
        m, e = np.frexp(x.astype(np.float64))
        return np.ldexp(np.round(np.ldexp(m, 8)), e - 8)
    out = ProbeInput(inp.q, bf16(inp.k).astype(np.float32), bf16(inp.v).astype(np.float32)).output()
    said, named = precision.read(out, inp.output(), inp)
    assert named and "with K and V (tiles of keys and values kept in it, Q not) rounded to bf16" in said, said


def test_a_row_max_stored_in_half_precision_for_the_weights_is_named():
    """Row statistics in one kernel, the output in another: l summed against the exact max, m stored
    as __half and the weights exp(s - m_h) / l: every row off by its own exp(m - m_h), built here
    with numpy's float16 directly."""
    inp = probe(B=2, N=128, d=32)
    s = inp.q.astype(np.float64) @ inp.k.astype(np.float64).transpose(0, 2, 1) / np.sqrt(32)
    m = s.max(axis=2, keepdims=True)
    m_h = m.astype(np.float32).astype(np.float16).astype(np.float64)
    out = (np.exp(s - m_h) / np.exp(s - m).sum(axis=2, keepdims=True)) @ inp.v.astype(np.float64)
    said, named = precision.read(out.astype(np.float32).astype(np.float64), inp.output(), inp)
    assert named and said.startswith("the output is float64 attention with the row's max m as the weights use it (l "
                                     "summed against the exact max, as where m is stored for a later kernel or pass) "
                                     "kept in fp16"), said


def test_k_alone_in_bf16_is_named_from_a_hi_lo_split_that_loses_a_cross_term():
    """q and K split into bf16 hi and lo parts, the score summed as qh kh + ql kl + ql kh (qh kl
    written ql kl): K's low part never meets q's high part, the score is q . bf16(K) but for a term
    of 2^-16: K alone rounded, named apart from K and V."""
    inp = probe()
    bf = lambda x: precision.rounded(x, "bf16")
    qh, kh = bf(inp.q), bf(inp.k)
    ql, kl = inp.q - qh, inp.k - kh
    d = inp.q.shape[-1]
    s = (np.einsum("bix,bjx->bij", qh, kh) + np.einsum("bix,bjx->bij", ql, kl) +
         np.einsum("bix,bjx->bij", ql, kh)) / np.sqrt(d)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    out = (np.einsum("bij,bjx->bix", p / p.sum(axis=-1, keepdims=True), inp.v)).astype(np.float32)
    said, named = precision.read(out.astype(np.float64), inp.output(), inp)
    assert named and "with K (the key tiles kept in it, Q and V not: the scores' other operand) rounded to bf16" \
        in said, said


def test_an_error_of_a_formats_size_that_no_rounding_gives_is_said_as_measured():
    inp = probe()
    true = inp.output()
    out = true * (1 + RNG.choice([-1, 1], size=true.shape) * 6e-4)
    said, named = precision.read(out, true, inp)
    assert not named and said.startswith("the error is the size of fp16 or tf32 rounding (median relative error"), said


def test_rounding_sized_errors_beside_values_far_off_are_not_called_rounding():
    """fp16's rounding everywhere, and the last 8 rows never written: most errors are rounding's,
    the ones that fail the case are not."""
    inp = probe()
    true = inp.output()
    out = precision.attention(inp.q, inp.k, inp.v, "fp16", "inputs")
    out[:, -8:] = 0
    assert precision.read(out, true, inp) == (None, False)


def half_sum_program(tmp_path, name="half_sum_attention.c"):
    """A C program of tests/data built with gcc: its attend(), or None where gcc or _Float16 is missing."""
    library = tmp_path / f"{name}.so"
    built = subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", str(library), str(DATA / name),
                            "-lm"], capture_output=True) if shutil.which("gcc") else None
    return ctypes.CDLL(str(library)).attend if built is not None and built.returncode == 0 else None


def test_a_running_sum_kept_in_half_precision_is_named(tmp_path):
    """A C program's _Float16 l (its own arithmetic, not fa's simulation) is read as fp16's running sum."""
    attend = half_sum_program(tmp_path)
    if attend is None:
        pytest.skip("needs gcc with _Float16")
    inp = probe(N=128)
    out = np.zeros(inp.q.shape, dtype=np.float32)
    pointer = ctypes.POINTER(ctypes.c_float)
    attend(*(np.ascontiguousarray(a).ctypes.data_as(pointer) for a in (inp.q, inp.k, inp.v, out)), *inp.q.shape)
    assert np.abs(out - inp.output()).max() > 5e-3  # it fails the course's tolerance
    said, named = precision.read(out.astype(np.float64), inp.output(), inp)
    assert named and said.startswith("the output is float64 attention with the softmax's running sum l, key after "
                                     "key, kept in fp16"), said


FUSED = "q, k and each fused multiply-add in fp16)"
PAIRS = " in pairs of dims, even and odd dims summed apart and added last, as __hfma2 does (q scaled first; "


@pytest.mark.parametrize("fused, words", [(1, f", dim after dim (q scaled first; {FUSED}"),
                                          (0, ", dim after dim (q scaled first; each product and each sum in fp16)"),
                                          (2, PAIRS + FUSED)])
def test_scores_summed_in_half_precision_are_named_with_how(tmp_path, fused, words):
    """A C program's _Float16 dot product (its own arithmetic) is read as the scores summed in fp16,
    by fused multiply-adds or by products rounded and added, or in pairs of dims (__hfma2: set47's
    s03), q scaled first."""
    attend = half_sum_program(tmp_path, "half_dot_attention.c")
    if attend is None:
        pytest.skip("needs gcc with _Float16")
    inp = probe(N=128)
    out = np.zeros(inp.q.shape, dtype=np.float32)
    pointer = ctypes.POINTER(ctypes.c_float)
    attend(*(np.ascontiguousarray(a).ctypes.data_as(pointer) for a in (inp.q, inp.k, inp.v, out)), *inp.q.shape, fused)
    assert np.abs(out - inp.output()).max() > 5e-3
    said, named = precision.read(out.astype(np.float64), inp.output(), inp)
    assert named and said.startswith(f"the output is float64 attention with the scores' dot product{words}"), said


def test_the_format_that_gives_the_output_is_named_before_one_that_misses_it():
    """Weights rounded to tf32 are tf32's, not fp16's (its small weights are subnormal there), though
    fp16 comes first in the table; an accumulator in bf16 past fp16's range is bf16's."""
    inp = probe()
    out = precision.attention(inp.q, inp.k, inp.v, "tf32", "weights")
    said, named = precision.read(out, inp.output(), inp)
    assert named and said.startswith("the output is float64 attention with P and V of the product P V rounded to "
                                     "tf32: it misses that by at most 0,"), said
    large = inp.with_v(inp.v * 1e5, "V past fp16's range")
    out = precision.online(large.q, large.k, large.v, "bf16", "accumulator")
    said, named = precision.read(out, large.output(), large)
    assert named and "the output's running accumulator, key after key, kept in bf16" in said, said


def softmax_v(s: np.ndarray, v: np.ndarray) -> np.ndarray:
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return (p / p.sum(axis=-1, keepdims=True)) @ v.astype(np.float64)


def test_scores_kept_in_an_int_are_named_whole_or_summed():
    """A float score passed through an int builtin (truncated toward zero), and a score summed in
    `auto s = 0` (an int: each partial sum truncated, q scaled first): each named as what it is."""
    inp = probe()
    q, k = inp.q.astype(np.float64), inp.k.astype(np.float64)
    d = q.shape[-1]
    out = softmax_v(np.fix(q @ k.transpose(0, 2, 1) / np.sqrt(d)), inp.v).astype(np.float32)
    said, named = precision.read(out.astype(np.float64), inp.output(), inp)
    assert named and said.startswith("the output is float64 attention with the scores truncated to whole numbers (an "
                                     "int): it misses that by at most"), said
    scaled = inp.q * np.float32(1 / np.sqrt(d))
    s = np.zeros((q.shape[0], q.shape[1], k.shape[1]))
    for x in range(d):  # the int's running sum: a float added, the sum truncated back
        s = np.fix(s + scaled[:, :, None, x].astype(np.float32) * inp.k[:, None, :, x])
    out = softmax_v(s, inp.v).astype(np.float32)
    said, named = precision.read(out.astype(np.float64), inp.output(), inp)
    assert named and "the scores' dot product summed in an int, each partial sum truncated (q scaled first)" in said, \
        said


def test_scores_divided_by_d_are_not_taken_for_a_sum_in_an_int():
    """Scores scaled twice (by 1/d) weigh keys nearly alike, as scores summed in an int (mostly
    truncated to 0) do: the int's model lands nearer than float64 but fits few values, so no
    rounding is named."""
    rng = np.random.default_rng(0)  # a draw where the int's model misses by 0.498, float64 by 2.56
    inp = ProbeInput(*(rng.uniform(-3, 3, (2, 128, 32)).astype(np.float32) for _ in range(3)))
    q, k = inp.q.astype(np.float64), inp.k.astype(np.float64)
    out = softmax_v(q @ k.transpose(0, 2, 1) / q.shape[-1], inp.v).astype(np.float32)
    said, named = precision.read(out.astype(np.float64), inp.output(), inp)
    assert not named, said


@pytest.mark.parametrize("scaled", [False, True])
def test_a_query_row_kept_in_bf16_is_named_before_or_after_its_scale(scaled):
    """q kept in bf16 registers (frexp and round here), K and V in float32: as it is, or after its
    1/sqrt(d) scale (a scaled q row converted once, before the loop over keys)."""
    inp = probe()
    scale = np.float32(1 / np.sqrt(32))

    def bf16(x):
        m, e = np.frexp(x.astype(np.float64))
        return np.ldexp(np.round(np.ldexp(m, 8)), e - 8)
    q = bf16(inp.q * scale) / np.float64(scale) if scaled else bf16(inp.q)
    out = ProbeInput(q.astype(np.float64), inp.k, inp.v).output()
    said, named = precision.read(out, inp.output(), inp)
    part = "Q scaled by 1/sqrt(d) (the query row kept in it after its scale" if scaled else "Q (the query row kept"
    assert named and f"with {part}" in said and "rounded to bf16" in said, said
    at_64 = probe(d=64)  # 1/sqrt(64) is a power of 2: the two roundings give one output
    q = bf16(at_64.q * np.float32(1 / 8)) * 8.0 if scaled else bf16(at_64.q)
    said, named = precision.read(ProbeInput(q, at_64.k, at_64.v).output(), at_64.output(), at_64)
    assert named and "with Q, before or after its 1/sqrt(d) scale" in said and "the same output at this d" in said, said


def test_scores_stored_in_half_precision_are_named():
    """Each scaled score q . k / sqrt(d), summed in float32, stored in __half (a scores buffer
    halved): named as the scores kept in fp16."""
    inp = probe()
    s = np.matmul(inp.q.astype(np.float32), inp.k.astype(np.float32).transpose(0, 2, 1)) * np.float32(1 / np.sqrt(32))
    w = np.exp(s.astype(np.float16).astype(np.float64) - s.max(axis=-1, keepdims=True))
    out = (w / w.sum(axis=-1, keepdims=True)) @ inp.v.astype(np.float64)
    said, named = precision.read(out, inp.output(), inp)
    assert named and "with each score q . k / sqrt(d) (a scores buffer or register kept in it" in said \
        and "rounded to fp16" in said, said


@pytest.mark.parametrize("B, N, d", [(2, 128, 32), (1, 256, 64)])
def test_a_split_whose_low_part_has_its_sign_reversed_is_named_by_its_factors(B, N, d):
    """3xTF32 with lo = tf32(hi - x) on every operand (Q after log2(e)/sqrt(d), K, P before its
    division, V): each operand 2 hi - x, twice plain TF32's error, which no single rounding gives."""
    rng = np.random.default_rng(B + N + d)
    q, k, v = (rng.uniform(-3, 3, size=(B, N, d)).astype(np.float32) for _ in range(3))
    inp = ProbeInput(q, k, v)

    def reversed_split(x):
        return 2 * precision.rounded(x, "tf32") - x
    c = np.log2(np.e) / np.sqrt(d)
    s = precision.logits(reversed_split(q.astype(np.float64) * c) / c, reversed_split(k.astype(np.float64)))
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    out = (np.matmul(reversed_split(p), reversed_split(v.astype(np.float64))) / p.sum(axis=-1, keepdims=True))
    said, named = precision.read(out.astype(np.float32).astype(np.float64), inp.output(), inp)
    assert named and said.startswith("the output's error is each operand's own tf32 rounding error (or fp16's: the same "
                                     "bits in this range) times a whole "
                                     "factor (Q log2(e) / sqrt(d) x 2, K x 2, P x 2, V x 2;"), said
    assert said.endswith(precision.SPLIT_REVERSED)


def test_a_wrong_formula_near_the_right_one_is_no_sum_of_roundings():
    inp = probe()
    assert precision.operand_fit(ProbeInput(inp.q * 1.001, inp.k, inp.v).output(), inp.output(), inp) is None


@pytest.mark.slow
def test_the_split_in_an_online_softmax_is_named_without_ps_rounding():
    """The same split in a tiled online softmax (tiles of 32, p against the running max): P's
    rounding moves with the max, so it is left out of the fit and said so; Q, K and V at 2."""
    rng = np.random.default_rng(3)
    B, N, d = 2, 512, 64
    q, k, v = (rng.uniform(-3, 3, size=(B, N, d)).astype(np.float32) for _ in range(3))
    inp = ProbeInput(q, k, v)

    def reversed_split(x):
        return 2 * precision.rounded(x, "tf32") - x
    s = np.einsum("bid,bjd->bij", reversed_split((q * np.float32(np.log2(np.e) / np.sqrt(d))).astype(np.float64)),
                  reversed_split(k.astype(np.float64)))  # base 2
    o, m, l = np.zeros((B, N, d)), np.full((B, N, 1), -np.inf), np.zeros((B, N, 1))
    for t in range(0, N, 32):
        m_new = np.maximum(m, s[:, :, t:t + 32].max(axis=-1, keepdims=True))
        p, alpha = np.exp2(s[:, :, t:t + 32] - m_new), np.exp2(m - m_new)
        l = l * alpha + p.sum(axis=-1, keepdims=True)
        o = o * alpha + np.matmul(reversed_split(p), reversed_split(v[:, t:t + 32].astype(np.float64)))
        m = m_new
    said, named = precision.read((o / l).astype(np.float32).astype(np.float64), inp.output(), inp)
    assert named and "(Q log2(e) / sqrt(d) x 2, K x 2, V x 2;" in said and "P's own rounding not read" in said, said
    assert said.endswith(precision.SPLIT_REVERSED)


def test_two_operands_in_two_formats_are_no_whole_factors():
    """K rounded to bf16 and V to fp16: each a plain rounding (factors 0 and 1 of one format): the
    fit names no factor, rather than one format's with the other left out."""
    inp = probe()
    k, v = precision.rounded(inp.k.astype(np.float64), "bf16"), precision.rounded(inp.v.astype(np.float64), "fp16")
    out = np.matmul(precision.softmax_rows(precision.logits(inp.q.astype(np.float64), k)), v)
    assert precision.operand_fit(out, inp.output(), inp) is None


def card_with_cut_weights(inp: ProbeInput, tile: int = 32) -> np.ndarray:
    """The course card in float32, tile by tile: each tile's weights exp(s - m) against the running
    max cut to bf16 (the high 16 bits kept) for P V, l summed from the float weights."""
    s = (inp.q @ inp.k.transpose(0, 2, 1)) * np.float32(1 / np.sqrt(inp.q.shape[-1]))
    B, N, keys = s.shape
    m = np.full((B, N, 1), -np.inf, np.float32)
    l = np.zeros((B, N, 1), np.float32)
    o = np.zeros(inp.q.shape, np.float32)
    for j0 in range(0, keys, tile):
        st = s[:, :, j0:j0 + tile]
        m_new = np.maximum(m, st.max(axis=2, keepdims=True))
        alpha, p = np.exp(m - m_new), np.exp(st - m_new)
        kept = (p.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)
        l = l * alpha + p.sum(axis=2, keepdims=True)
        o = o * alpha + kept @ inp.v[:, j0:j0 + tile]
        m = m_new
    return o / l


def test_weights_cut_to_bf16_against_the_running_max_with_l_from_floats_are_named():
    """A truncation's bias (every weight a little low, l not) is no rounding to nearest: named with
    the tile, the cut and where l came from."""
    inp = probe(N=128)
    said, named = precision.read(card_with_cut_weights(inp).astype(np.float64), inp.output(), inp)
    assert named and said.startswith(
        "the output is float64 attention with the weights p = exp(s - m), m the running max as far as each key "
        "tile of 32, cut toward zero to bf16 (the low bits dropped) for P V, V in float32, and l summed from the "
        "float weights before"), said


def test_cut_toward_zero_keeps_the_formats_bits_below_the_value():
    x = np.array([1 + 2 ** -9, 1 + 3 * 2 ** -11, -(1 + 2 ** -9), 0.1])
    assert list(precision.cut(x, "bf16")[:3]) == [1.0, 1.0, -1.0]
    assert list(precision.cut(x, "fp16")[:3]) == [1 + 2 ** -9, 1 + 2 ** -10, -(1 + 2 ** -9)]
    for form in ("bf16", "fp16"):
        assert (np.abs(precision.cut(x, form)) <= np.abs(x)).all()
