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


def test_a_rows_own_weights_times_factors_are_not_another_rows_even_where_rows_repeat():
    """Q with repeated rows (rows 32..63 the same as 0..31: P's rows alike): a stale max (a factor a
    tile of the row's own weights) and a wrong sum (one factor a row) fit another row too, and are
    still the row's own: not this reading."""
    q, k, _ = scores(64)
    q[32:] = q[:32]
    s = logits(q[None], k[None])[0]
    P = softmax_rows(s[None])[0]
    assert row_weights.another_rows(online_weights(s, 16, stale_max=True), P, 2e-5) is None
    assert row_weights.another_rows(0.7 * P, P, 2e-5) is None
    W = online_weights(s, 16, second_of=8)  # rows 8.. of each: the earlier row's weight, where rows repeat too
    said = row_weights.another_rows(W, P, 2e-5)
    assert said is not None and "row r - 8's" in said, said


def test_weights_of_a_tile_of_24_are_said_at_24():
    q, k, s = scores(96)
    W, P = online_weights(s, 24, second_of=48), softmax_rows(s[None])[0]
    said = row_weights.another_rows(W, P, 2e-5)
    assert said is not None and "a factor of each key tile of 24" in said and "row r - 48's" in said, said


def test_right_weights_and_weights_of_no_row_say_nothing():
    _, _, s = scores(64)
    P = softmax_rows(s[None])[0]
    assert row_weights.another_rows(P, P, 2e-5) is None
    noise = P * RNG.uniform(0.5, 1.5, size=P.shape)
    assert row_weights.another_rows(noise / noise.sum(axis=1, keepdims=True), P, 2e-5) is None


TWO_ROWS = """#!{python}
import sys
import numpy as np
raw = np.fromfile(sys.argv[1], dtype="<i4", count=3); B, N, d = (int(x) for x in raw)
x = np.fromfile(sys.argv[1], dtype="<f4", offset=12).reshape(B, 3, N, d).astype(np.float64)
q, k, v = x[:, 0], x[:, 1], x[:, 2]
s = q @ k.transpose(0, 2, 1) / np.sqrt(d)
m = np.full((B, N), -np.inf); l = np.zeros((B, N)); o = np.zeros((B, N, d))
for j0 in range(0, N, 8):  # key tiles of 8; rows q0 + t and q0 + 8 + t of each 16 one thread's
    part = s[:, :, j0:j0 + 8]
    new = np.maximum(m, part.max(axis=2)); alpha = np.exp(m - new)
    p = np.exp(part - new[..., None])
    met = p.copy()
    for q0 in range(0, N, 16):
        met[:, q0 + 8:q0 + 16] = p[:, q0:q0 + 8]
    l = l * alpha + p.sum(axis=2); o = o * alpha[..., None] + met @ v[:, j0:j0 + 8]; m = new
(o / l[..., None]).astype("<f4").tofile(sys.argv[2])
"""


def test_the_step_names_a_thread_s_second_row_weighed_with_the_first_s_on_a_stand_in(tmp_path):
    """LinearMap on a stand-in program (NumPy, the course's format) whose thread owns rows q0 + t and
    q0 + 8 + t of each 16 and accumulates the second with the first's weight: named with the rows,
    the formula and the key tiles, and the line where the weight meets V."""
    from helpers import stand_in_context
    from fa_cli.judge.probes.step import ProbeInput
    q, k, v = (RNG.uniform(-2, 2, size=(2, 32, 16)).astype(np.float32) for _ in range(3))
    ctx = stand_in_context(tmp_path, TWO_ROWS, "__global__ void f() {\n  float pa = __expf(sa - ma);\n"
                           "  for (int x = 0; x < D; ++x) oc[x] += pa * v_s[j][x];\n}\n", ProbeInput(q, k, v))
    step = linear_map.LinearMap()
    assert step.applies(ctx)
    found = step.run(ctx)
    assert ctx.facts.named and found[0].kind == "measured", found
    assert "rows 8-15, 24-31 each weigh the keys with another row's weights: row r's are row r - 8's" in \
        found[0].lines[0] and "a factor of each key tile of 8" in found[0].lines[0]
    assert found[0].lines[-1] == "lines with where a weight meets V in hw4.cu: 3 `for (int x = 0; x < D; ++x) " \
        "oc[x] += pa * v_s[j][x];`"


def half_warp_off_by_one(s: np.ndarray, tile: int = 16) -> np.ndarray:
    """set39's s01, row by row: rows 2t and 2t + 1 share a warp, a half each, key jj of a tile on lane
    jj of the half; the odd row fetches its weights from lane 1 + jj (its half's first lane taken as
    1, not 16): the even row's weight of key jj + 1, and at jj = 15 its own lane 16's, its key 0."""
    rows, N = s.shape
    W = np.zeros_like(s)
    for r in range(rows):
        m, l, o = -np.inf, 0.0, np.zeros(N)
        for j0 in range(0, N, tile):
            new = max(m, s[r, j0:j0 + tile].max())
            own = np.exp(s[r, j0:j0 + tile] - new)
            met = own.copy()
            if r % 2:
                partner = np.exp(s[r - 1, j0:j0 + tile] - max(s[r - 1, :j0 + tile].max(), -np.inf))
                met[:-1], met[-1] = partner[1:], own[0]
            alpha = np.exp(m - new)
            l, o = l * alpha + own.sum(), o * alpha
            o[j0:j0 + tile] += met
            m = new
        W[r] = o / l
    return W


def test_rows_weighed_with_another_rows_weights_one_key_off_are_said_with_the_shift_and_the_tile():
    q, k, s = scores(64)
    W, P = half_warp_off_by_one(s), softmax_rows(s[None])[0]
    said = row_weights.shifted_rows(W, P, 2e-5)
    assert said is not None and said.startswith("one set of weights for every column; wrong in every 2nd row (rows "
                                                "1, 3, 5, ...): each row weighs V's row j"), said
    assert "weighs V's row j with another row's weight of key j + 1 (key tiles of 16, the slot that leaves " \
        "apart): row r's are row r - 1's of P shifted by one key" in said, said
    assert row_weights.shifted_rows(online_weights(s, 16, second_of=32), P, 2e-5) is None  # no shift: not this
    [read] = linear_map.read_map(as_T(W), P, q[:, :4], k[:, :4])
    assert read == said and linear_map.look_for([read]) == "shuffles"
