"""fa_cli/judge/probes/row_weights.py: one set of weights whose wrong rows are other rows' weights
of P, a factor a key tile. The weights come from an online softmax run in NumPy over key tiles,
with one thing written otherwise each (a thread's second row accumulated with its first row's
weight; a stale running max), and are read back through linear_map.read_map as fa reads T."""
import numpy as np

from fa_cli.judge.probes import linear_map, row_weights
from fa_cli.judge.probes.step import logits, softmax_rows

RNG = np.random.default_rng(5)


def online_weights(s: np.ndarray, tile: int, second_of: int | None = None, stale_max: bool = False) -> np.ndarray:
    """W (rows x keys) of an online softmax over key tiles, V the identity: row r accumulates the
    weight of row r - second_of where r >= second_of (a thread owning rows t and t + second_of);
    stale_max: each tile's weights taken against the max before that tile's."""
    rows, N = s.shape
    m, l, o = np.full(rows, -np.inf), np.zeros(rows), np.zeros((rows, N))
    for j0 in range(0, N, tile):
        part = s[:, j0:j0 + tile]
        new = np.maximum(m, part.max(axis=1))
        against = np.where(np.isfinite(m), m, new) if stale_max else new
        p = np.exp(part - against[:, None])
        alpha = np.exp(m - new)
        met = p.copy()
        if second_of is not None:
            met[second_of:] = p[:rows - second_of]
        l = l * alpha + p.sum(axis=1)
        o = o * alpha[:, None]
        o[:, j0:j0 + tile] += met
        m = new
    return o / l[:, None]


def scores(rows: int = 128, d: int = 32):
    q, k = (RNG.uniform(-1, 1, size=(rows, d)).astype(np.float32) for _ in range(2))
    return q, k, logits(q[None], k[None])[0]


def as_T(W: np.ndarray, d: int = 4) -> np.ndarray:
    N = W.shape[0]
    T = np.zeros((N, d, N, d))
    for c in range(d):
        T[:, c, :, c] = W
    return T


def test_a_second_row_accumulated_with_the_first_rows_weight_is_read_with_its_rows_and_tiles():
    q, k, s = scores()
    W, P = online_weights(s, 16, second_of=64), softmax_rows(s[None])[0]
    assert np.abs(W[:64] - P[:64]).max() < 1e-9 and np.abs(W[64:] - P[64:]).max() > 1e-2
    said = row_weights.another_rows(W, P, 2e-5)
    assert said is not None and "rows 64-127" in said and "row r - 64's of P" in said, said
    assert "a factor of each key tile of 16" in said and "e.g. row 64: row 0's" in said
    [read] = linear_map.read_map(as_T(W), P, q[:, :4], k[:, :4])
    assert read == said and linear_map.look_for([read]) == "weights met"


def test_rows_given_whole_rows_of_another_are_one_factor_a_row():
    q, k, s = scores(64)
    P = softmax_rows(s[None])[0]
    W = P.copy()
    W[32:] = P[:32]  # each row of the second half holds the first half's row r - 32, its sum 1
    said = row_weights.another_rows(W, P, 2e-5)
    assert said is not None and "row r - 32's" in said and "one factor a row" in said


def test_a_stale_max_is_its_own_rows_weights_and_not_this_reading():
    """W[r] = P[r] times a factor a tile (each tile against the max before it): the row's own
    weights, for the Factors step to read, not another row's."""
    _, _, s = scores()
    W, P = online_weights(s, 16, stale_max=True), softmax_rows(s[None])[0]
    assert np.abs(W - P).max() > 1e-3
    assert row_weights.another_rows(W, P, 2e-5) is None


def test_right_weights_and_weights_of_no_row_say_nothing():
    _, _, s = scores(64)
    P = softmax_rows(s[None])[0]
    assert row_weights.another_rows(P, P, 2e-5) is None
    noise = P * RNG.uniform(0.5, 1.5, size=P.shape)
    assert row_weights.another_rows(noise / noise.sum(axis=1, keepdims=True), P, 2e-5) is None
