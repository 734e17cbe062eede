"""key_places: keys weighed a whole number of times by the row's and the key's place in a group of
lanes, read from W against P and named by the shuffle that makes the pattern."""
import numpy as np
import pytest

from fa_cli.judge.probes.key_places import counted_by_place
from fa_cli.judge.probes.step import logits, softmax_rows


def weights(counts, B=2, N=128, d=32, seed=1):
    """(W as a float32 program writes it, P): each row a softmax over its keys, each key counted
    counts(row, key) times in both the sum and the output."""
    rng = np.random.default_rng(seed)
    q, k = (rng.uniform(-3, 3, (B, N, d)).astype(np.float32) for _ in range(2))
    s = logits(q, k)
    n = np.array([[counts(r, j) for j in range(N)] for r in range(N)], dtype=float)
    W = n * np.exp(s - s.max(axis=-1, keepdims=True))
    return (W / W.sum(axis=-1, keepdims=True)).astype(np.float32).astype(np.float64), softmax_rows(s)


def ring(T, down=True):
    """A ring of T lanes, step 0..T-1, each lane taking the row of lane (lane +- step) through a
    shuffle that does not wrap: a lane whose source falls off the end gets its own row back."""
    def counts(r, j):
        a, b = r % T, j % T
        return sum(1 for step in range(T) if (a + step if a + step < T else a) == b) if down else \
            sum(1 for step in range(T) if (a - step if a - step >= 0 else a) == b)
    return counts


@pytest.mark.parametrize("T, down, N, d", [(32, True, 128, 32), (16, False, 200, 64), (64, True, 256, 32)])
def test_a_ring_whose_shuffle_does_not_wrap_is_named_by_its_direction(T, down, N, d):
    """set35's s01: K and V rows passed round a warp by __shfl_down_sync(FULL, v, step): the row on lane
    a meets keys a..31 of each tile, its own a + 1 times, and never the keys below a."""
    W, P = weights(ring(T, down), N=N, d=d)
    said, fields = counted_by_place(W, P)
    assert fields == dict(place_counts=T, place_shuffle="down" if down else "up"), said
    shuffle = "__shfl_down_sync(mask, v, step)" if down else "__shfl_up_sync(mask, v, step)"
    assert f"each {T}-key group" in said and shuffle in said, said
    if down:
        assert "n = 0 where b < a, a + 1 where b = a, 1 where b > a" in said


def test_lanes_that_swap_with_the_wrong_partner_are_said_by_their_first_rows():
    """Lanes that take their partner's row (lane xor 1) twice and their own never: no shuffle's
    ring, said by the table's first rows."""
    W, P = weights(lambda r, j: 2 if j % 32 == (r % 32) ^ 1 else 0 if j % 32 == r % 32 else 1)
    said, fields = counted_by_place(W, P)
    assert fields == dict(place_counts=32) and "rows at place 0: keys at 0 never, keys at 2-31 once, keys at 1 " \
        "twice; rows at place 1: keys at 1 never" in said, said


def test_right_weights_or_weights_off_by_a_rounding_are_no_count():
    W, P = weights(lambda r, j: 1)
    assert counted_by_place(W, P) is None
    noisy = W * (1 + np.random.default_rng(0).normal(0, 5e-4, W.shape))  # fp16's rounding of each weight
    assert counted_by_place(noisy, P) is None


def lanes_skipping_the_last_rescale(s, G=32):
    """A warp a row, key j on lane j mod G, each lane's own (l, o) rescaled by exp(m_old - m_new)
    inside `if (j < N)`: in the last, partial tile the lanes with no key skip it while m moves on;
    the lanes' sums merged at the end. W per row, the loops written out."""
    B, R, N = s.shape
    W = np.zeros_like(s)
    for b, r in np.ndindex(B, R):
        m, l, o = -np.inf, np.zeros(G), np.zeros(N)
        for j0 in range(0, N, G):
            new = max(m, s[b, r, j0:j0 + G].max())
            for g in range(G):
                j = j0 + g
                if j < N:
                    a = np.exp(m - new)
                    l[g] *= a
                    o[g::G] *= a
                    p = np.exp(s[b, r, j] - new)
                    l[g] += p
                    o[j] += p
            m = new
        W[b, r] = o / l.sum()
    return W


def test_lanes_with_no_key_in_the_last_tile_that_skip_its_rescale_are_read_by_lane():
    """set44's s06: at N = 200, lanes 8..31 hold no key of the last tile; where that tile raises the
    row's max, their keys weigh e^(m_new - m_old) too much: said by lane, with the key guard."""
    from fa_cli.judge.probes import readings
    from fa_cli.judge.probes.key_places import lanes_apart
    rng = np.random.default_rng(3)
    q, k = (rng.uniform(-3, 3, size=(2, 200, 32)) for _ in range(2))
    s = logits(q, k)
    said, fields = lanes_apart(lanes_skipping_the_last_rescale(s), softmax_rows(s), readings.FLAT)
    assert fields["lanes_apart"] == 32 and fields["lanes_off"] == list(range(8, 32)), said
    assert "the keys j with j mod 32 in 8-31 weigh as P does up to one factor of their own a row, larger" in said, said
    assert "exactly the lanes with no key in the last, partial tile (N = 200, N mod 32 = 8)" in said, said
    assert lanes_apart(softmax_rows(s), softmax_rows(s), readings.FLAT) is None
    W = softmax_rows(s) * np.where(np.arange(200) % 32 < 8, rng.uniform(0.5, 2.0, size=(2, 200, 1)), 1.0)
    assert lanes_apart(W / W.sum(axis=2, keepdims=True), softmax_rows(s), readings.FLAT) is None  # either way
    odd = softmax_rows(s) * np.where(np.arange(200) % 2 == 1, 1.7, 1.0)  # an interleave: no one run of lanes
    assert lanes_apart(odd / odd.sum(axis=2, keepdims=True), softmax_rows(s), readings.FLAT) is None
