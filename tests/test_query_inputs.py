"""fa_cli/judge/probes/query_inputs.py: the scores' query side read back with Q coded and each key
one-hot at one dim. Programs written in NumPy read Q their own (wrong) way: each is named by its
formula or by the batch it takes; the right program says nothing. Then the step end to end on a
stand-in program in the course's format, after ScoreInputs found rows alike in Q scoring otherwise."""
import numpy as np
import pytest
from helpers import stand_in_context

from fa_cli.judge.probes import query_inputs, score_inputs
from fa_cli.judge.probes.step import ProbeInput

N, D = 128, 32


def attention(inp: ProbeInput, read_q) -> np.ndarray:
    """Attention of each batch with Q as read_q(b, Q) reads it, in float64, written as float32."""
    q = np.stack([read_q(b, inp.q.astype(np.float64)) for b in range(inp.q.shape[0])])
    k, v = inp.k.astype(np.float64), inp.v.astype(np.float64)
    s = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1])
    p = np.exp(s - s.max(axis=2, keepdims=True))
    return ((p / p.sum(axis=2, keepdims=True)) @ v).astype(np.float32)


def read_back(read_q):
    q = query_inputs.coded((query_inputs.BATCHES, N, D), query_inputs.CODE_SEED + 1)
    out = attention(query_inputs.design(N, D, q), read_q)
    return score_inputs.sources(query_inputs.read_terms(out), q, query_inputs.MATCH_TOL).T


def said_of(found) -> tuple[str, set]:
    """What the step would say: the batch's words, and the formula each batch fits ("right": none needed)."""
    batch, locals_ = query_inputs.batch_of_reading(found, query_inputs.BATCHES, N, D)
    right = np.arange(N * D).reshape(N, D)
    return batch, {"right" if (b == right).all() else score_inputs.fitting(b, N, D, query_inputs.ROWS) for b in locals_}


def test_a_right_program_reads_every_term_of_q_from_its_own_element():
    found = read_back(lambda b, q: q[b])
    assert (found == np.arange(found.size).reshape(found.shape)).all()


def test_every_batch_reading_batch_0s_q_is_named_a_missing_batch_offset():
    assert said_of(read_back(lambda b, q: q[0])) == (
        "every batch's scores take batch 0's Q (a missing batch offset on Q); ", {"right"})


@pytest.mark.parametrize("read_q, words", [
    (lambda b, q: np.concatenate([q[b].ravel(), np.zeros(N)])[np.arange(N)[:, None] * (D + 1) + np.arange(D)],
     "rows read at a pitch of 33 floats (d +1): q[r, x] taken from Q's flat element r*33 + x (128 terms past Q's "
     "last element)"),
    (lambda b, q: np.concatenate([q[b][1:], np.full((1, D), 7.0)]),
     "rows shifted: q[r, x] taken from Q[r + 1, x] (32 terms past Q's last element)"),
    (lambda b, q: np.roll(q[b], -1, axis=1), "dims shifted: q[r, x] taken from Q[r, (x + 1) mod d]"),
    (lambda b, q: q[b].ravel()[np.arange(D)[None, :] * N + np.arange(N)[:, None]],
     "Q read as if stored d x N: q[r, x] taken from Q[x*N + r]"),
])
def test_other_readings_of_q_are_named_by_their_formula_in_every_batch(read_q, words):
    assert said_of(read_back(read_q)) == ("", {words})


@pytest.mark.slow  # make test-all (docs/testing.md: what make test keeps of it)
def test_rows_read_in_an_order_no_formula_gives_are_not_named_and_said_by_batch():
    order = np.random.default_rng(5).permutation(N)
    found = read_back(lambda b, q: q[b][order])
    assert None in said_of(found)[1]
    right = found == np.arange(found.size).reshape(found.shape)
    said = query_inputs.examples(found, right, N, D)
    a = int(np.flatnonzero(~right.all(axis=1))[0])  # the first wrong row, in batch 0
    assert said.startswith(f"wrong in {(~right.all(axis=1)).sum()} of {2 * N} rows") and \
        f"batch 0, row {a}, dim 0 took Q[0][{order[a]}, 0]" in said, said


@pytest.mark.slow
def test_a_row_whose_dims_all_land_on_one_element_is_not_said_to_read_it():
    """A row of Q overwritten by values of another buffer (equal dims): its terms land on one coded
    element by chance; the example says so rather than naming that element."""
    found = read_back(lambda b, q: q[b])
    found[0, 1:] = 1234  # row 0's dims 1.. all one element
    right = found == np.arange(found.size).reshape(found.shape)
    said = query_inputs.examples(found, right, N, D)
    assert f"batch 0, row 0, dim 1 took Q[0][38, 18], as did {D - 2} other dims of its row (one element read for " \
        "many, or a value of another buffer met by chance" in said, said
    paired = read_back(lambda b, q: q[b])  # dims 2i and 2i + 1 both read dim i: a real read, said as one
    paired[0] = paired[0, np.arange(D) // 2]
    right = paired == np.arange(paired.size).reshape(paired.shape)
    said = query_inputs.examples(paired, right, N, D)
    assert "batch 0, row 0, dim 1 took Q[0][0, 0]; " in said and "as did" not in said, said


Q_PITCH = """#!{python}
import sys
import numpy as np
raw = np.fromfile(sys.argv[1], dtype="<i4", count=3); B, N, d = (int(x) for x in raw)
x = np.fromfile(sys.argv[1], dtype="<f4", offset=12).reshape(B, 3 * N * d).astype(np.float64)
out = np.empty((B, N, d))
for b in range(B):
    flat = x[b]  # Q, K, V of the batch, one after the other
    q = flat[np.arange(N)[:, None] * (d + 1) + np.arange(d)[None, :]]  # Q's rows at a pitch of d + 1: into K
    k, v = flat[N * d:2 * N * d].reshape(N, d), flat[2 * N * d:].reshape(N, d)
    s = q @ k.T / np.sqrt(d)
    p = np.exp(s - s.max(axis=1, keepdims=True))
    out[b] = (p / p.sum(axis=1, keepdims=True)) @ v
out.astype("<f4").tofile(sys.argv[2])
"""


def test_the_step_names_q_read_at_a_pitch_where_rows_alike_in_q_scored_otherwise(tmp_path):
    rng = np.random.default_rng(4)
    inp = ProbeInput(*(rng.uniform(-3, 3, size=(2, 96, D)).astype(np.float32) for _ in range(3)))
    ctx = stand_in_context(tmp_path, Q_PITCH, "__global__ void f() {\n  float qi = q[row * (D + 1) + x];\n}\n", inp)
    [said] = score_inputs.ScoreInputs().run(ctx)  # Q's rows alike, read at a pitch: no longer alike
    assert "the rows' weights disagree" in said.lines[0] and ctx.facts.query_side and not ctx.facts.named
    step = query_inputs.QueryInputs()
    assert step.applies(ctx)
    [found] = step.run(ctx)
    assert found.kind == "measured" and ctx.facts.named, found
    assert "every term fits rows read at a pitch of 33 floats (d +1): q[r, x] taken from Q's flat element r*33 + x" \
        in found.lines[0]
    assert found.lines[-1] == "lines with Q's index in hw4.cu: 2 `float qi = q[row * (D + 1) + x];`"


@pytest.mark.slow
def test_a_threads_second_row_scored_with_its_first_rows_q_is_named():
    """Rows 64..127 of every 128 taking row r - 64's Q in every term: an index of Q that leaves out
    64, or a thread owning both rows that gives the second the first's scores (the reading cannot
    tell them apart, and says both). With some terms landing on no element (held-out set24's y04:
    the first row's weights met with the second row's scale), only the second. Any other set of
    wrong rows is not this reading."""
    def second_from_first(b, q):
        read = q[b].copy()
        for q0 in range(0, N, 128):
            read[q0 + 64:q0 + 128] = q[b][q0:q0 + 64]
        return read
    found = read_back(second_from_first)
    right = found == np.arange(found.size).reshape(found.shape)
    said, q_index = query_inputs.second_rows_take_the_first(found, right, N, D)
    assert said.startswith("rows q0 + 64 .. q0 + 127 of every 128 are wrong, and each of their terms that lands on Q "
                           "(100%) takes row r - 64's own element: row q0 + 64 + t scored with row q0 + t's Q") and \
        "or a thread that owns both rows" in said and q_index, said
    partly = found.copy()
    for q0 in range(0, partly.shape[0], 128):  # half of each wrong row's terms on no element of Q, every batch
        partly[q0 + 64:q0 + 128, D // 2:] = -1
    said, q_index = query_inputs.second_rows_take_the_first(partly, right, N, D)
    assert "(50%) takes row r - 64's own element, the others no element of Q" in said and not q_index, said
    shifted = read_back(lambda b, q: np.roll(q[b], 64, axis=0))  # every row another's: not a thread's two rows
    assert query_inputs.second_rows_take_the_first(
        shifted, shifted == np.arange(shifted.size).reshape(shifted.shape), N, D) is None


def test_one_row_of_every_tile_read_wrong_is_said_by_its_tile_and_row():
    """Row 0 of every 16-row Q tile overwritten (a buffer before the Q tile written past its end):
    said as row 0 of every tile of 16, not as an element of Q one term happens to land on."""
    def overwritten(b, q):
        x = q[b].copy()
        x[np.arange(N) % 16 == 0, :31] = np.eye(31)[5]  # a one-hot V row's values
        return x
    found = read_back(overwritten)
    right = found == np.arange(found.size).reshape(found.shape)
    said = query_inputs.one_row_of_each_tile(right, N)
    assert said.startswith("exactly row 0 of every tile of 16 rows is wrong (rows 0, 16, 32, ... of every batch;"), said
    assert query_inputs.one_row_of_each_tile(np.ones_like(right), N) is None
    two = right.copy()
    two[1] = False  # row 1 wrong too: no one row of each tile
    assert query_inputs.one_row_of_each_tile(two, N) is None
