"""fa_cli/judge/probes/warp_tiles.py: a warp a row, a key a lane, with one butterfly written
otherwise. The reference is the program's loops written out lane by lane here (lane g stores dims
g and g + 32), float64."""
import math

import numpy as np
import pytest

from fa_cli.judge.probes import warp_tiles
from fa_cli.judge.probes.step import logits, softmax_rows

NEG = -1e30


def butterfly(values, steps, op, down=False):
    """An xor butterfly; or shuffles down (lane g reads lane g + off, its own value past the last lane)."""
    values, T = list(values), len(values)
    for off in steps:
        values = [op(values[g], values[(g + off if g + off < T else g) if down else g ^ off]) for g in range(T)]
    return values


def lanes_by_loops(s_row, T, max_steps, sum_steps, max_down=False):
    """Each lane's weights for one row: the kernel's loops, lane by lane."""
    N = len(s_row)
    m, l, acc = [NEG] * T, [0.0] * T, [[0.0] * N for _ in range(T)]
    for j0 in range(0, N, T):
        n = min(T, N - j0)
        st = [s_row[j0 + g] if g < n else NEG for g in range(T)]
        tm = butterfly(st, max_steps, max, max_down)
        m_new = [max(m[g], tm[g]) for g in range(T)]
        alpha = [math.exp(m[g] - m_new[g]) for g in range(T)]
        p = [math.exp(st[g] - m_new[g]) if g < n else 0.0 for g in range(T)]
        ts = butterfly(p, sum_steps, lambda a, b: a + b)
        for g in range(T):
            l[g] = l[g] * alpha[g] + ts[g]
            acc[g] = [a * alpha[g] for a in acc[g]]
            for jj in range(n):
                acc[g][j0 + jj] += p[jj]  # p of key j0 + jj, shuffled from lane jj
        m = m_new
    return np.array([[a / l[g] for a in acc[g]] for g in range(T)])


def scores(n=64, d=64, seed=7):
    rng = np.random.default_rng(seed)
    q, k = (rng.uniform(-3, 3, size=(n, d)).astype(np.float32) for _ in range(2))
    return logits(q[None], k[None])[0].astype(np.float64)


@pytest.mark.parametrize("max_steps, sum_steps", [([8, 4, 2, 1], [16, 8, 4, 2, 1]), ([16, 8, 4, 2, 1], [16, 8])])
def test_the_model_is_the_loops_written_out(max_steps, sum_steps):
    s = scores(n=40)  # a partial last tile
    model = warp_tiles.lane_weights(s, 32, max_steps, sum_steps)
    loops = np.stack([lanes_by_loops(row, 32, max_steps, sum_steps) for row in s])
    assert np.allclose(model, loops, atol=1e-12)


def column_weights(s, max_steps, sum_steps, d=64, max_down=False):
    lanes = np.stack([lanes_by_loops(row, 32, max_steps, sum_steps, max_down) for row in s])  # (rows, 32, N)
    return np.stack([lanes[:, c % 32] for c in range(d)])


def test_a_max_butterfly_that_starts_at_8_is_named_with_the_lane_of_each_column():
    s = scores()
    said = warp_tiles.reading(column_weights(s, [8, 4, 2, 1], [16, 8, 4, 2, 1]), s)
    assert said is not None and said.startswith(
        "each output column's weights are one lane's own: a key a lane in tiles of 32 (key j0 + g on lane g), the "
        "tile's max reduced by an xor butterfly over offsets 8..1 where it is 16..1 (its first steps left out), so "
        "the lanes end with maxima of their own"), said
    assert "(columns 0, 32: lane 0's;" in said or "columns 0-15, 32-47: lane 0's" in said, said


@pytest.mark.parametrize("max_steps, words", [
    ([16, 8, 4, 2], "over offsets 16..2 where it is 16..1 (its last steps left out)"),  # a loop `off > 1`
    ([], "never run (each lane keeps its own key's, where offsets 16..1 belong)")])
def test_a_max_butterfly_that_stops_early_or_never_runs_is_named_as_such(max_steps, words):
    s = scores()
    said = warp_tiles.reading(column_weights(s, max_steps, [16, 8, 4, 2, 1]), s)
    assert said is not None and f"{warp_tiles.MAX_STEP} by an xor butterfly {words}" in said, said


def test_a_max_shuffled_down_and_never_sent_back_is_named_as_such():
    """__shfl_down_sync over 16..1 for the tile's max with no broadcast of lane 0's: lane g keeps the
    max over lanes g..31, the loops written out here."""
    s = scores()
    said = warp_tiles.reading(column_weights(s, [16, 8, 4, 2, 1], [16, 8, 4, 2, 1], max_down=True), s)
    assert said is not None and f"{warp_tiles.MAX_STEP} by __shfl_down_sync over offsets 16..1 whose result, lane " \
        "0's, is never sent back" in said, said


def test_the_right_butterflies_and_weights_of_no_model_say_nothing():
    s = scores()
    right = column_weights(s, [16, 8, 4, 2, 1], [16, 8, 4, 2, 1])
    assert np.allclose(right, softmax_rows(s[None])[0][None])
    assert warp_tiles.reading(right, s) is None
    noise = right * np.random.default_rng(2).uniform(0.5, 1.5, size=right.shape)
    assert warp_tiles.reading(noise, s) is None


def test_the_lines_shown_are_those_of_the_butterfly_named(tmp_path):
    import re
    from fa_cli.judge.probes import linear_map
    s = scores()
    said = warp_tiles.reading(column_weights(s, [8, 4, 2, 1], [16, 8, 4, 2, 1]), s)
    assert linear_map.look_for([said]) == "max shuffle"
    max_line = "for (int off = 8; off > 0; off >>= 1) tmax = fmaxf(tmax, __shfl_xor_sync(FULL, tmax, off));"
    sum_line = "for (int off = 16; off > 0; off >>= 1) ts += __shfl_xor_sync(FULL, ts, off);"
    (_, max_pattern), _ = linear_map.LOOK["max shuffle"]
    (_, sum_pattern), _ = linear_map.LOOK["sum shuffle"]
    assert re.search(max_pattern, max_line) and not re.search(max_pattern, sum_line)
    assert re.search(sum_pattern, sum_line) and not re.search(sum_pattern, max_line)
    said = warp_tiles.reading(column_weights(s, [16, 8, 4, 2, 1], [4, 2, 1]), s)
    assert said is not None and warp_tiles.SUM_STEP in said and linear_map.look_for([said]) == "sum shuffle", said


def test_a_sum_butterfly_that_starts_low_is_named_where_the_map_reads_a_factor_by_column():
    """The max right, the sum's butterfly from offset 4: each column P times its lane's factor, and
    the butterfly named after it (the map's reading, not the bare factor)."""
    from fa_cli.judge.probes import linear_map
    s = scores()
    weights = column_weights(s, [16, 8, 4, 2, 1], [4, 2, 1])
    [said] = linear_map.lane_sums(weights, softmax_rows(s[None])[0], s)
    assert said.startswith("every column's weights are P's times a factor of its own for each row"), said
    assert (f"{warp_tiles.SUM_STEP} by an xor butterfly over offsets 4..1 where it is 16..1 (its first steps left "
            "out), so the lanes end with sums of their own") in said, said
