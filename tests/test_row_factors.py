"""Each wrong row the right row times a factor of its own, read from the output alone
(fa_cli/judge/probes/row_factors.py), and the running sums it names (sum_terms.py, running_sums.py):
NumPy online softmaxes, each with one way of summing l written otherwise, against a float64 reference;
the right output and a factor no sum explains get no claim."""
import numpy as np
import pytest

from fa_cli.judge.probes import factors, row_factors, score_sums
from fa_cli.judge.probes.step import logits

RNG = np.random.default_rng(5)


def drawn(B=2, N=256, d=32):
    return (RNG.uniform(-3, 3, size=(B, N, d)) for _ in range(3))


def online(q, k, v, T: int, l_of_tile, l0: float = 0.0, m0: float = -np.inf):
    """A tiled online softmax whose output is right but for l: l_of_tile(l, p, alpha, m_before, m_new,
    tile) gives the new l (p against the running max); l0 and m0 its start."""
    s = logits(q, k)
    B, N, _ = s.shape
    m, l = np.full((B, N), m0), np.full((B, N), l0)
    o = np.zeros(q.shape)
    for j0 in range(0, N, T):
        tile = s[..., j0:j0 + T]
        new = np.maximum(m, tile.max(axis=2))
        alpha, p = np.exp(m - new), np.exp(tile - new[..., None])
        l = l_of_tile(l, p, alpha, m, new, tile)
        o = o * alpha[..., None] + p @ v[:, j0:j0 + T] if B == 1 else o * alpha[..., None] + np.einsum(
            "bij,bjx->bix", p, v[:, j0:j0 + T])
        m = new
    return o / l[..., None]


def right(q, k, v):
    s = logits(q, k)
    p = np.exp(s - s.max(axis=2, keepdims=True))
    return np.einsum("bij,bjx->bix", p / p.sum(axis=2, keepdims=True), v)


def said(out, q, k, v):
    f = row_factors.row_factors(out.astype(np.float32), right(q, k, v))
    if f is None:
        return None
    s = logits(q, k)
    total = np.exp(s - s.max(axis=-1, keepdims=True)).sum(axis=-1)
    fields = {}
    return factors.wrong_sum(np.where(np.isnan(f), 1.0, f), s, total, fields), fields


def test_a_log_sum_exp_started_at_0_is_read_as_one_key_of_score_0():
    q, k, v = drawn(N=24)  # under a tile: the extra term is a large share
    out = online(q, k, v, 32, lambda l, p, a, m, new, tile: l * a + p.sum(axis=2), l0=1.0, m0=0.0)
    words, fields = said(out, q, k, v)
    assert "one term more than the keys' weights, exp(0 - m)" in words and "started at 1" in words
    assert abs(fields["sum_extra_score"]) < 1e-2


def test_weights_summed_in_16_16_fixed_point_are_named_with_their_bits_and_tile():
    q, k, v = drawn(N=512)
    cut = lambda l, p, a, m, new, tile: l * a + np.floor(p * 65536.0).sum(axis=2) / 65536.0
    words, fields = said(online(q, k, v, 32, cut), q, k, v)
    assert "fixed point with 16 fraction bits, truncated" in words and "key tiles of 32" in words
    assert fields["sum_fixed_bits"] == 16 and fields["sum_tile"] == 32


def test_weights_summed_as_whole_numbers_are_named_as_an_integer_reduction():
    """A warp's sum reduced through an int (a functor copied from an integer reduction): every
    weight truncated, only the key at the running max (a weight of exactly 1) counted."""
    q, k, v = drawn(N=256)
    cut = lambda l, p, a, m, new, tile: l * a + np.floor(p).sum(axis=2)
    words, fields = said(online(q, k, v, 32, cut), q, k, v)
    assert "adds each weight truncated to a whole number" in words and "only a weight of exactly 1" in words
    assert fields["sum_fixed_bits"] == 0 and fields["sum_tile"] == 32


def test_a_tiles_own_sum_merged_with_the_old_factor_is_named():
    """Tile-local state: the tile's sum against its own max, merged as l * f_old + sum * f_old where
    sum * f_tile belongs (the first tile's sum dropped)."""
    q, k, v = drawn(N=256)

    def old_factor(l, p, a, m, new, tile):
        own = tile.max(axis=2)
        return l * a + np.exp(tile - own[..., None]).sum(axis=2) * a
    words, _ = said(online(q, k, v, 32, old_factor), q, k, v)
    assert "multiplied by the old state's factor" in words and "against its own max" in words


def test_the_right_output_and_a_factor_no_sum_gives_are_no_claim():
    q, k, v = drawn()
    assert row_factors.row_factors(right(q, k, v).astype(np.float32), right(q, k, v)) is None
    scaled = right(q, k, v) * RNG.uniform(0.5, 2.0, size=(2, 256, 1))
    words, _ = said(scaled, q, k, v)
    assert words is None
    f = row_factors.row_factors(scaled.astype(np.float32), right(q, k, v))
    assert score_sums.signed_factors(f, logits(q, k), score_sums.OUTPUT_SUBJECT) is None  # no factor negative
    flipped, _ = score_sums.signed_factors(f * np.where(np.arange(256) % 2, -1.0, 1.0), logits(q, k),
                                           score_sums.OUTPUT_SUBJECT)
    assert "none of the scores' sums fa tried fits" in flipped, flipped


@pytest.mark.parametrize("T, base2", [(64, False), (1, False), (32, True)])
def test_scores_summed_where_their_weights_belong_are_named_from_the_output_with_rows_of_either_sign(T, base2):
    """tsum += s[j] on the line before s[j] = exp(s[j] - m) (held-out set49's s11): l sums the scores,
    rescaled as l is; the output's weights right. A row divided by an l of 0 is inf: left out."""
    q, k, v = drawn(N=256, d=64)
    c = np.log2(np.e) if base2 else 1.0
    with np.errstate(divide="ignore", invalid="ignore"):
        out = online(q, k, v, T, lambda l, p, a, m, new, tile: l * a + c * tile.sum(axis=2)).astype(np.float32)
    out[0, :3] = np.inf
    f = row_factors.row_factors(out, right(q, k, v))
    assert f is not None and (f < 0).any() and np.isnan(f[0, :3]).all()
    words, fields = score_sums.signed_factors(f, logits(q, k), score_sums.OUTPUT_SUBJECT)
    assert fields["sum_tile"] == T and fields["negative_rows"] > 0, words
    assert ("base 2" in fields["sum_of_scores"]) == base2 and "before the exponential" in words


PHANTOM_KEY = """#!{python}
import sys
import numpy as np
B, N, d = (int(x) for x in np.fromfile(sys.argv[1], dtype="<i4", count=3))
x = np.fromfile(sys.argv[1], dtype="<f4", offset=12).reshape(B, 3, N, d).astype(np.float64)
e = np.exp(x[:, 0] @ x[:, 1].transpose(0, 2, 1) / np.sqrt(d))
((e @ x[:, 2]) / (e.sum(axis=2, keepdims=True) + 1.0)).astype("<f4").tofile(sys.argv[2])
"""


def test_where_w_was_not_read_the_output_alone_names_the_sum(tmp_path):
    """The step runs no program: on the probe's own output, with W never read (the budget ended), a
    log-sum-exp started at 0 is named, with the lines of l's start; once W is read it stands aside
    (Factors reads the factor from W, and a program that is no W V has none)."""
    from helpers import stand_in_context
    from fa_cli.judge.probes.step import ProbeInput
    q, k, v = (x.astype(np.float32) for x in drawn(B=3, N=21))
    ctx = stand_in_context(tmp_path, PHANTOM_KEY, "float lse = 0.f;\nl = l * alpha + sum;\n", ProbeInput(q, k, v))
    ctx.facts.probe_fails = True
    step = row_factors.RowFactors()
    assert step.applies(ctx) and not step.measures
    [found] = step.run(ctx)
    assert "one term more than the keys' weights, exp(0 - m)" in found.lines[0], found.lines
    assert found.lines[1] == "lines with the running sum's start in hw4.cu: 1 `float lse = 0.f;`", found.lines
    ctx.facts.named, ctx.facts.W = False, np.zeros((3, 21, 21))
    assert not step.applies(ctx)


def test_a_factor_set_by_the_rows_max_is_named_by_its_slope():
    """set43's s07: the row max stored as m ln 2 and read as a base-2 reference: every row is the right
    one times exp((1 - ln 2) M), M the row's largest score (f = W / P, read from W); a slope no unit
    gives is no claim."""
    q, k, _ = drawn(N=128)
    s = logits(q, k)
    P = np.exp(s - s.max(axis=2, keepdims=True))
    P /= P.sum(axis=2, keepdims=True)
    W = P * np.exp((1 - np.log(2)) * s.max(axis=2))[..., None]
    said, fields = factors.per_row_factor(W, P, s)
    assert "f = exp(a M) in every row read, M the row's largest score and a = 0.307: the weights' max a natural-log " \
        "one taken by base-2 exponentials" in said, said
    assert abs(fields["max_slope"] - (1 - np.log(2))) < 1e-3
    said, _ = factors.per_row_factor(P * np.exp(0.2 * s.max(axis=2))[..., None], P, s)
    assert "exp(a M)" not in said, said
    # weights exp(s - M) over a sum of exp(s) never shifted: f = exp(-M)
    said, fields = factors.per_row_factor(P * np.exp(-s.max(axis=2))[..., None], P, s)
    assert "a = -1: the max subtracted from the weights' scores and not from the sum's" in said, said


def test_a_tiles_sum_reduced_over_two_rows_is_named_with_the_partner():
    """Two rows a warp, 16 lanes each, the tile's sum reduced at the warp's width: each row's l takes
    the other's tile sum too (against that row's own running max), rescaled as its own."""
    q, k, v = drawn(N=256)
    partner = np.arange(256) ^ 1

    def both(l, p, a, m, new, tile):
        return l * a + p.sum(axis=2) + p[:, partner].sum(axis=2)
    words, fields = said(online(q, k, v, 16, both), q, k, v)
    assert "and each tile's sum of row r xor 1 too (against that row's own running max)" in words, words
    assert fields["sum_tile"] == 16


def test_every_batch_divided_by_batch_0s_sum_against_its_own_max_is_named():
    """set46's s05: a kernel that writes each row undivided (against its own max) and a host that
    divides row i of every batch by batch 0's l of row i: batch b's rows off by l_b / l_0."""
    q, k, v = drawn(B=3, N=128)
    s = logits(q, k)
    p = np.exp(s - s.max(axis=2, keepdims=True))
    undivided = np.einsum("bij,bjx->bix", p, v)
    words, fields = said(undivided / p.sum(axis=2)[:1, :, None], q, k, v)
    assert words.startswith("every batch divides by batch 0's sum l, each row's sum against its own max"), words
    assert fields["sum_first_batch"]


def test_the_last_key_counted_again_by_unmasked_clamped_slots_is_named():
    """set46's s09: two keys a lane in tiles of 64, the second key's mask copied from the first and
    the loader clamping past N: at N = 200 key 199 counted 8 more times, in l and in the output."""
    from fa_cli.judge.probes import partial_sums
    q, k, v = drawn(B=2, N=200)
    s = logits(q, k)
    P = right_weights = np.exp(s - s.max(axis=2, keepdims=True))
    counts = np.ones(200)
    counts[199] = 9
    W = right_weights * counts
    W /= W.sum(axis=2, keepdims=True)
    said, _ = partial_sums.keys_counted(W, P / P.sum(axis=2, keepdims=True))
    assert "keys 199 9 times" in said, said
    assert ("the last key, N - 1, counted 8 more times (8 = -N mod 16 = N mod 16 = N mod 32 = N mod 64: the slots "
            "past N of a last tile or the second slots of a last tile's lanes that hold a key)") in said, said


def test_a_tiles_sum_against_its_own_max_added_without_its_factor_is_named():
    """set46's s07: each tile summarised against its own max, merged as l = l * alpha + tsum where
    tsum * exp(m_tile - m_new) belongs (the output takes its factor)."""
    q, k, v = drawn(N=256)

    def own_sum(l, p, a, m, new, tile):
        return l * a + np.exp(tile - tile.max(axis=2, keepdims=True)).sum(axis=2)
    words, fields = said(online(q, k, v, 32, own_sum), q, k, v)
    assert "each tile's sum taken against the tile's own max and added as it is" in words, words
    assert fields["sum_factor"] == [-1, 1] and fields["sum_tile"] == 32


def test_lanes_past_d_whose_part_of_l_is_never_rescaled_are_named():
    """set46's s10: a wavefront of 64 lanes, key j0 + g on lane g, the max shared; each lane keeps
    its part of l, rescaled only inside `if (lane < d)` with d = 32: lanes 32..63 never rescale."""
    q, k, v = drawn(N=256)
    s = logits(q, k)
    B, N, _ = s.shape
    l = np.zeros((B, N, 64))
    m = np.full((B, N), -np.inf)
    for j0 in range(0, N, 64):
        new = np.maximum(m, s[..., j0:j0 + 64].max(axis=2))
        l[..., :32] *= np.exp(m - new)[..., None]  # lanes < d: rescaled
        l += np.exp(s[..., j0:j0 + 64] - new[..., None])
        m = new
    l_used = l.sum(axis=2) * np.exp(m - s.max(axis=2))  # relative to the row's max
    total = np.exp(s - s.max(axis=2, keepdims=True)).sum(axis=2)
    words, fields = said(right(q, k, v) * (total / l_used)[..., None], q, k, v)
    assert "the parts of lanes 32..63 are never rescaled as the max grows" in words, words
    assert fields["sum_lanes_unrescaled"] == [32, 64]


SCORES_SUMMED = """#!{python}
import sys
import numpy as np
B, N, d = (int(x) for x in np.fromfile(sys.argv[1], dtype="<i4", count=3))
x = np.fromfile(sys.argv[1], dtype="<f4", offset=12).reshape(B, 3, N, d).astype(np.float64)
s = x[:, 0] @ x[:, 1].transpose(0, 2, 1) / np.sqrt(d)
m, l, o = np.full((B, N), -np.inf), np.zeros((B, N)), np.zeros((B, N, d))
with np.errstate(all="ignore"):
    for j0 in range(0, N, 64):
        t = s[..., j0:j0 + 64]
        new = np.maximum(m, t.max(axis=2))
        a = np.exp(m - new)
        l = l * a + t.sum(axis=2)
        o = o * a[..., None] + np.exp(t - new[..., None]) @ x[:, 2, j0:j0 + 64]
        m = new
    out = o / l[..., None]
out[0, :2] = np.inf
out.astype("<f4").tofile(sys.argv[2])
"""


def test_an_output_with_inf_rows_and_scores_summed_is_read_from_its_other_rows(tmp_path):
    """set49's s11 on the device: NaN and inf in a few rows kept W from being read; the other rows are
    the right ones times factors of either sign, and the sum of the scores gives them."""
    from helpers import stand_in_context
    from fa_cli.judge.probes.step import ProbeInput
    q, k, v = (x.astype(np.float32) for x in drawn(B=2, N=256, d=64))
    ctx = stand_in_context(tmp_path, SCORES_SUMMED, "l = l * alpha + tsum;\n", ProbeInput(q, k, v))
    ctx.facts.probe_fails = True
    step = row_factors.RowFactors()
    assert step.applies(ctx)
    [found] = step.run(ctx)
    assert found.lines[0].startswith("measured on the probe input: 510 of 512 rows of the output are (the other 2 "
                                     "left out of the reading: NaN or inf in some) the right row times a factor f of "
                                     "its own, of either sign"), found.lines
    assert "the scores s summed, key tiles of 64, rescaled as l is" in found.lines[0], found.lines
    assert found.lines[1] == "lines with the running sum's update in hw4.cu: 1 `l = l * alpha + tsum;`", found.lines
