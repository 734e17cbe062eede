"""fa_cli/judge/probes/tile_sums.py: each lane divided by a sum of its own, modelled as a tile's
sum merged by a butterfly written otherwise. The reference is the program's loops written out
lane by lane here (a warp a row, key j0 + g on lane g, lane g storing dims g and g + 32)."""
import math

import numpy as np
import pytest

from fa_cli.judge.probes import linear_map, tile_sums
from fa_cli.judge.probes.step import logits, softmax_rows


def lanes_l(s_row, T, merge):
    """Each lane's running sum l at the end of one row, the program's loops written out, float64."""
    N = len(s_row)
    m, l = [-math.inf] * T, [0.0] * T
    for j0 in range(0, N, T):
        tm = [np.float64(s_row[j0 + g] if j0 + g < N else -1e30) for g in range(T)]  # slots past N: a large negative
        ts = [1.0 if j0 + g < N else 0.0 for g in range(T)]
        off = T // 2
        while off:
            om, os = [tm[g ^ off] for g in range(T)], [ts[g ^ off] for g in range(T)]
            for g in range(T):
                nm = max(tm[g], om[g])
                ts[g] = merge(ts[g], os[g], tm[g], om[g], nm)
                tm[g] = nm
            off //= 2
        for g in range(T):
            m_new = max(m[g], tm[g])
            l[g] = l[g] * math.exp(m[g] - m_new) + ts[g] * math.exp(tm[g] - m_new)
            m[g] = m_new
    return [l[g] * math.exp(m[g] - max(s_row)) for g in range(T)]  # relative to the row's max


OWN_MAX = lambda ts, os, tm, om, nm: ts * np.exp(tm - nm) + os * np.exp(om - tm)  # noqa: E731
RIGHT = lambda ts, os, tm, om, nm: ts * np.exp(tm - nm) + os * np.exp(om - nm)  # noqa: E731


def column_weights(s, T, merge, d=64):
    P = softmax_rows(s[None])[0]
    true_l = np.exp(s - s.max(axis=1, keepdims=True)).sum(axis=1)
    per_lane = np.array([lanes_l(row, T, merge) for row in s])  # (rows, T)
    return np.stack([P * (true_l / per_lane[:, c % T])[:, None] for c in range(d)]), P


def scores(n=96, d=64, seed=3):
    rng = np.random.default_rng(seed)
    q, k = (rng.uniform(-3, 3, size=(n, d)).astype(np.float32) for _ in range(2))
    return logits(q[None], k[None])[0].astype(np.float64)


@pytest.mark.slow  # make test-all (docs/testing.md: what make test keeps of it)
def test_a_partners_sum_taken_against_the_lanes_own_max_is_named_with_the_lanes():
    """set38's s09: the butterfly's sum step `ts * exp(tm - nm) + os * exp(om - tm)`."""
    s = scores()
    weights, P = column_weights(s, 32, OWN_MAX)
    [said] = linear_map.lane_sums(weights, P, s)
    assert "every column's weights are P's times a factor of its own for each row" in said, said
    assert ("each column is divided by its lane's own sum l, modelled: keys dealt a tile of 32 at a time" in said
            and "`ts = ts * exp(tm - nm) + os * exp(om - tm) (the partner's sum taken against the lane's own max"
            in said), said
    assert "(columns 0, 32: lane 0's; columns 1, 33: lane 1's; columns 2, 34: lane 2's ...)" in said, said


def test_the_right_butterfly_gives_one_sum_and_says_nothing():
    s = scores()
    weights, P = column_weights(s, 32, RIGHT)
    assert np.allclose(weights, P[None])
    assert linear_map.lane_sums(weights, P, s) == []


@pytest.mark.parametrize("T", [16, 32])
def test_the_model_matches_the_loops_written_out(T):
    """Whole tiles for both forms (every value finite); a partial last tile (N = 40) for the right one
    (the own-max form meets a slot past N there, exp(om - (-1e30)): inf in the loops and the model)."""
    for n, forms in ((64, ((0, RIGHT), (1, OWN_MAX))), (40, ((0, RIGHT),))):
        s = scores(n=n, seed=5)
        for form, merge in forms:
            loops = np.array([lanes_l(row, T, merge) for row in s]).T
            assert np.isfinite(loops).all()
            assert np.allclose(tile_sums.lane_sums(s, T, tile_sums.SUM_FORMS[form][1]), loops, rtol=1e-9), form


def test_factors_no_form_gives_are_left_unnamed():
    s = scores()
    rng = np.random.default_rng(1)
    factor = rng.uniform(0.5, 2.0, size=(64, s.shape[0]))
    assert tile_sums.reading(factor, s) is None


def lanes_l_narrow(s_row, T, width):
    """lanes_l with the sum's shuffle given `width` under T (the max's right), the loops written out:
    at an offset of width or more a lane whose partner is in a later segment reads its own sum."""
    N = len(s_row)
    m, l = [-math.inf] * T, [0.0] * T
    for j0 in range(0, N, T):
        tm = [np.float64(s_row[j0 + g] if j0 + g < N else -1e30) for g in range(T)]
        ts = [1.0 if j0 + g < N else 0.0 for g in range(T)]
        off = T // 2
        while off:
            src = [g if off >= width and g ^ off > g else g ^ off for g in range(T)]
            new_m = [max(tm[g], tm[g ^ off]) for g in range(T)]
            ts = [RIGHT(ts[g], ts[src[g]], tm[g], tm[src[g]], new_m[g]) for g in range(T)]
            tm, off = new_m, off // 2
        for g in range(T):
            m_new = max(m[g], tm[g])
            l[g] = l[g] * math.exp(m[g] - m_new) + ts[g] * math.exp(tm[g] - m_new)
            m[g] = m_new
    return [l[g] * math.exp(m[g] - max(s_row)) for g in range(T)]


def test_a_sums_butterfly_given_too_narrow_a_width_is_named_with_the_width():
    """set43's s12: a group of 16 lanes whose sum's __shfl_xor is given a width of 8: lanes 0..7 take
    their own sum back at offset 8, so the columns they write are divided by twice their half's sum."""
    s = scores(n=64, d=32)
    loops = np.array([lanes_l_narrow(row, 16, 8) for row in s]).T
    assert np.allclose(tile_sums.lane_sums(s, 16, RIGHT, 8), loops, rtol=1e-9)
    true_l = np.exp(s - s.max(axis=1, keepdims=True)).sum(axis=1)
    factor = np.stack([true_l / loops[c % 16] for c in range(32)])
    said = tile_sums.reading(factor, s)
    assert said is not None and "a width of 8 where its offsets span 16 lanes" in said, said


def lanes_l_first_own(s_row, T):
    """Each lane's l where the first tile sets l to the lane's own weight (psum belongs), every later
    tile right, the loops written out: a wavefront a row, key j0 + g on lane g."""
    N = len(s_row)
    m, l = -math.inf, [0.0] * T
    for j0 in range(0, N, T):
        keys = [s_row[j] for j in range(j0, min(N, j0 + T))]
        m_new = max(m, max(keys))
        psum = sum(math.exp(x - m_new) for x in keys)
        for g in range(T):
            own = math.exp(s_row[j0 + g] - m_new) if j0 + g < N else 0.0
            l[g] = own if j0 == 0 else l[g] * math.exp(m - m_new) + psum
        m = m_new
    return [x * math.exp(m - max(s_row)) for x in l]


def test_a_first_tiles_sum_set_to_the_lanes_own_weight_is_named():
    """set44's s11: `l = p` at the first tile where `l = psum` belongs, a key a lane of 64: each lane's
    l holds its own first key's weight, the later tiles' sums right."""
    s = scores(n=200, d=64)
    loops = np.array([lanes_l_first_own(row, 64) for row in s]).T
    assert np.allclose(tile_sums.first_tile_own(s, 64), loops, rtol=1e-9)
    true_l = np.exp(s - s.max(axis=1, keepdims=True)).sum(axis=1)
    factor = np.stack([true_l / loops[c % 64] for c in range(64)])
    said = tile_sums.reading(factor, s)
    assert said is not None and "keys dealt a tile of 64 at a time" in said and "the first tile's l set to the " \
        "lane's own weight" in said and said.endswith("look at the first tile's update of l"), said
