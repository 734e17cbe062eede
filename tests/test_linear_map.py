"""fa_cli/judge/probes/linear_map.py: the output read as a linear map of V. Maps built in NumPy to
hold one mechanism each (a GPU program's: lanes of a warp summing half the dims, an output written
transposed, columns moved, a scale, terms across columns) are read back as that mechanism, with
its figures; the right map says nothing. Then the step end to end on a stand-in program."""
import numpy as np
import pytest
from helpers import stand_in_context

from fa_cli.judge.findings import Kind
from fa_cli.judge.probes import linear_map, pairing, step
from fa_cli.judge.probes.step import Context, ProbeInput, logits, softmax_rows
from fa_cli.judge.tool_logs import Budget
from fa_cli.programs.programs import Program

RNG = np.random.default_rng(11)
N, D = 24, 32


def qk():
    return (RNG.uniform(-3, 3, size=(N, D)).astype(np.float32) for _ in range(2))


def weights(q, k, dims=None, scale=None):
    """softmax of the scores over some dims (all by default) at a scale (1/sqrt(d) by default)."""
    keep = np.zeros(D) if dims is not None else np.ones(D)
    if dims is not None:
        keep[dims] = 1
    return softmax_rows(logits((q * keep)[None], k[None], scale))[0]


def diagonal_map(per_column):
    """T[r, c, k, c] = per_column[c][r, k], zero across columns."""
    T = np.zeros((N, D, N, D))
    for c in range(D):
        T[:, c, :, c] = per_column[c]
    return T


def test_the_right_map_says_nothing():
    q, k = qk()
    P = weights(q, k)
    assert linear_map.read_map(diagonal_map([P] * D), P, q, k) == []


def test_lanes_that_sum_half_the_dims_are_two_sets_of_columns_each_with_its_dims():
    """A warp whose reduction starts at 8 of 16: columns 0-15 weigh scores over dims 0-15 and
    columns 16-31 over dims 16-31."""
    q, k = qk()
    low, high = weights(q, k, dims=np.arange(16)), weights(q, k, dims=np.arange(16, 32))
    said = linear_map.read_map(diagonal_map([low] * 16 + [high] * 16), weights(q, k), q, k)
    assert said[0] == ("the weights differ by output column: 2 sets (blocks of 16 consecutive columns, none right: the "
                       "threads that write a row's columns did not agree on its weights: each block's threads combined "
                       "their partial scores, max or sum with threads of another row, or with none)"), said
    assert said[1].startswith("columns 0-15: max |W - P|")
    assert said[1].endswith("its scores take q[r, x] k[j, x] of dims 0-15 at 1/sqrt(d); dims 16-31 not at all")
    assert said[2].endswith("dims 0-15 not at all") and "dims 16-31 at 1/sqrt(d)" in said[2]


def test_columns_that_hold_the_last_keys_v_row_are_said_with_the_state_that_restarts():
    """Lanes 1..31 whose running max stays -inf (set by lane 0 only): each key restarts their sums,
    so their columns hold V's last row; lane 0's column is right."""
    q, k = qk()
    P = weights(q, k)
    last = np.zeros_like(P)
    last[:, -1] = 1.0
    said = linear_map.read_map(diagonal_map([P] + [last] * (D - 1)), P, q, k)
    assert said[:2] == ["the weights differ by output column: 2 sets", "columns 0: right"], said
    assert said[2].startswith(f"columns 1-31: every row's whole weight on key {N - 1}: these columns hold V's row "
                              f"{N - 1} alone, the last key's: the running sums start over at every key"), said


def test_one_set_of_weights_from_scores_of_some_dims_is_said_and_one_factor_on_all_is_left_to_the_factors():
    q, k = qk()
    said = linear_map.read_map(diagonal_map([weights(q, k, dims=np.arange(24))] * D), weights(q, k), q, k)
    assert said == ["one set of weights for every column; its scores take q[r, x] k[j, x] of dims 0-23 at 1/sqrt(d); "
                    "dims 24-31 not at all"]
    assert linear_map.read_map(diagonal_map([weights(q, k, scale=1 / D)] * D), weights(q, k), q, k) == []
    a, residual = linear_map.score_fit(weights(q, k, scale=1 / D), q, k)
    assert residual < 1e-6 and np.allclose(a, 1 / D, rtol=1e-4)  # read back: the factor 1/d, for the Factors step


def moved_map(P, source):
    """T for an output whose (r, c) holds the right value of source(r, c) = (r', c')."""
    T = np.zeros((N, D, N, D))
    for r in range(N):
        for c in range(D):
            rr, cc = source(r, c)
            T[r, c, :, cc] = P[rr]
    return T


def test_an_output_written_transposed_is_named_as_such_with_an_example():
    q, k = qk()
    P = weights(q, k)
    said = linear_map.read_map(moved_map(P, lambda r, c: divmod((r * D + c) % N * D + (r * D + c) // N, D)), P, q, k)
    assert len(said) == 1 and "read as the block's transpose" in said[0] and "e.g. row 0, column 1 holds row" in said[0]


def test_columns_moved_within_each_row_are_a_shift_or_an_xor_and_rows_moved_a_shift():
    q, k = qk()
    P = weights(q, k)
    assert "row r, column (c + 1) mod d" in linear_map.read_map(moved_map(P, lambda r, c: (r, (c + 1) % D)), P, q, k)[0]
    assert "row r, column c xor 1" in linear_map.read_map(moved_map(P, lambda r, c: (r, c ^ 1)), P, q, k)[0]
    assert "row (r + 1) mod N, column c" in linear_map.read_map(moved_map(P, lambda r, c: ((r + 1) % N, c)), P, q, k)[0]


def test_each_pair_of_columns_holding_its_first_is_said_as_one_value_packed_for_both():
    """V packed in pairs with the first value in both halves (__float2half2_rn(v.x)): column 2c + 1
    holds column 2c; said by the formula, with a pack's lines looked for."""
    q, k = qk()
    P = weights(q, k)
    said = linear_map.read_map(moved_map(P, lambda r, c: (r, c - c % 2)), P, q, k)
    assert "row r, column c - c mod 2 + 0: every column of each block of 2 holds the block's column 0" in said[0], said
    assert linear_map.look_for(said) == "packed"
    last = linear_map.read_map(moved_map(P, lambda r, c: (r, c - c % 4 + 3)), P, q, k)
    assert "column c - c mod 4 + 3" in last[0], last


def test_rows_stored_with_a_blocks_two_indices_combined_in_the_other_order_are_said_by_the_formula():
    """Warps of y rows each computing rows 4w + y of a block, stored at row 2y + w (held-out set24's
    y02 has 4 warps of 8 rows, blocks of 32; here 2 of 4, blocks of 8): row q0 + i holds row
    q0 + (i mod 2)*4 + i div 2."""
    q, k = qk()
    P = weights(q, k)

    def interleaved(r, c):
        i, q0 = r % 8, r - r % 8
        return q0 + (i % 2) * 4 + i // 2, c
    said = linear_map.read_map(moved_map(P, interleaved), P, q, k)[0]
    assert "row q0 + (i mod 2)*4 + i div 2, column c (i = r - q0, each block of 8 rows from q0)" in said, said


def test_terms_across_columns_are_said_with_the_columns():
    q, k = qk()
    P = weights(q, k)
    T = diagonal_map([P] * D)
    T[:, 3, :, 4] = 0.5 * P
    said = linear_map.read_map(T, P, q, k)
    assert said == ["output columns take other columns of V: 1 of 32 columns (column <- V's columns besides its own: "
                    f"3<-4); up to {linear_map.fmt(0.5 * P.max())} a weight"]



def test_columns_made_of_no_v_and_an_output_where_v_is_zero_are_said():
    """A 64-lane wavefront taken as 32 at d = 64: columns 32-63 never written (weights all 0); and
    memory never written shows as an output where V is all zero."""
    q, k = qk()
    P = weights(q, k)
    T = diagonal_map([P] * 16 + [np.zeros_like(P)] * 16)
    said = linear_map.read_map(T, P, q, k)
    assert said[:3] == ["the weights differ by output column: 2 sets", "columns 0-15: right",
                        "columns 16-31: every weight 0: made of no row of V"]
    constant = np.zeros((N, D))
    constant[5:8, 16:] = 7.5
    assert linear_map.without_v(constant) == ["with V all zero the output is not: up to 7.5 in 3 of 24 rows (5-7), "
                                              "columns 16-31: values made of no V (memory never written, or another "
                                              "buffer's)"]
    assert linear_map.without_v(np.zeros((N, D))) == []

def masked_weights(q, k, keep):
    """softmax of the right scores over the keys keep[r] allows, the others 0."""
    s = np.where(keep, logits(q[None], k[None])[0], -np.inf)
    w = np.exp(s - s.max(axis=1, keepdims=True))
    return w / w.sum(axis=1, keepdims=True)


def test_a_causal_mask_and_a_band_of_keys_are_said_with_the_keys_kept():
    q, k = qk()
    offset = np.arange(N)[None, :] - np.arange(N)[:, None]
    said = linear_map.read_map(diagonal_map([masked_weights(q, k, offset <= 0)] * D), weights(q, k), q, k)
    assert len(said) == 1 and said[0].startswith("each row weighs only keys up to its own (a causal mask): "), said
    head, _, figure = said[0].rpartition(" to ")
    assert head.endswith("the keys kept have the right scores' softmax over them alone") and float(figure) < 1e-12
    said = linear_map.read_map(diagonal_map([masked_weights(q, k, np.abs(offset) <= 3)] * D), weights(q, k), q, k)
    assert said[0].startswith("each row weighs only keys r - 3 to r + 3: "), said


def test_keys_left_out_with_no_band_are_not_called_a_mask():
    q, k = qk()
    every_other = np.broadcast_to(np.arange(N) % 2 == 0, (N, N))
    said = linear_map.read_map(diagonal_map([masked_weights(q, k, every_other)] * D), weights(q, k), q, k)
    assert not any("each row weighs only" in line for line in said)


def test_a_float4s_components_crossed_are_named_with_the_lines_that_cross_them(tmp_path):
    """set49's s09: o.z += p * v.w and o.w += p * v.z: columns 4k + 2 and 4k + 3 exchanged in every
    row. Said as the components moved, with the lines that set one from the other; a move across
    blocks of 4 is no component's."""
    q, k = qk()
    P = weights(q, k)
    said = linear_map.read_map(moved_map(P, lambda r, c: (r, c ^ 1 if c % 4 >= 2 else c)), P, q, k)
    assert "row r, the components of each block of 4 columns moved the same way: z<-w, w<-z" in said[0], said
    assert "as a float4's components crossed" in said[0], said
    source = tmp_path / "hw4.cu"
    source.write_text("if (threadIdx.z == 0 && threadIdx.w == 0) {}\no[x].x += p * vv.x;\n"
                      "o[x].z = o[x].z * a + p * vv.w;\no[x].w = o[x].w * a + p * vv.z;\n")
    ctx = Context(Program("p", source, source=source), None, tmp_path, Budget(1.0), lambda line: None, 5e-3, None, "t")
    look = linear_map.first_found(ctx, linear_map.components_look(said))
    assert [n for n, _ in linear_map.source_lines(source, look[1])] == [3, 4]
    across = linear_map.read_map(moved_map(P, lambda r, c: (r, (c + 4) % D if c % 4 == 2 else
                                                            (c - 4) % D if c % 4 == 3 else c)), P, q, k)
    assert "components" not in " ".join(across), across


def test_the_lines_shown_are_those_of_the_mechanism_measured(tmp_path):
    """Weights by column: the shuffle, not every line with a lane; a set of columns made of no V: the
    lanes' width; a band of keys: the loop bound by the row."""
    source = tmp_path / "hw4.cu"
    source.write_text("const int W = 32;\nint lane = threadIdx.x % W;\nfor (int j = 0; j <= i; ++j) {}\n"
                      "for (int o = 8; o > 0; o >>= 1) s += __shfl_xor_sync(~0u, s, o);\n")
    ctx = Context(Program("p", source, source=source), None, tmp_path, Budget(1.0), lambda line: None, 5e-3, None, "t")
    found = lambda mapped: linear_map.source_lines(source, linear_map.first_found(ctx, linear_map.LOOK[  # noqa: E731
        linear_map.look_for(mapped)])[1])
    assert [n for n, _ in found(["the weights differ by output column: 2 sets", "columns 0-15: max"])] == [4]
    assert [n for n, _ in found(["the weights differ by output column: 2 sets",
                                 "columns 32-63: every weight 0: made of no row of V"])] == [1]
    assert [n for n, _ in found(["each row weighs only keys up to its own (a causal mask): ..."])] == [3]
    source.write_text(source.read_text() + "for (int x4 = 0; x4 < 8; ++x4) dst[x4] = o4[x4];\n")
    assert [n for n, _ in found(["the weights differ by output column: 2 sets",  # d = 32's 8 float4s, at d = 64
                                 "columns 32-63: every weight 0: made of no row of V"])] == [5]


def test_spans():
    assert step.spans([0, 1, 2, 5, 6, 9]) == "0-2, 5-6, 9"


HALF_LANES = """#!{python}
import sys
import numpy as np
raw = np.fromfile(sys.argv[1], dtype="<i4", count=3); B, N, d = (int(x) for x in raw)
x = np.fromfile(sys.argv[1], dtype="<f4", offset=12).reshape(B, 3, N, d).astype(np.float64)
q, k, v = x[:, 0], x[:, 1], x[:, 2]
out = np.empty((B, N, d))
for half in (slice(0, d // 2), slice(d // 2, d)):  # each half of the lanes sums its own dims
    s = q[..., half] @ k[..., half].transpose(0, 2, 1) / np.sqrt(d)
    p = np.exp(s - s.max(axis=2, keepdims=True)); p /= p.sum(axis=2, keepdims=True)
    out[..., half] = p @ v[..., half]
out.astype("<f4").tofile(sys.argv[2])
"""


def test_the_step_reads_a_program_whose_lanes_sum_half_the_dims(tmp_path):
    """LinearMap on a stand-in program (NumPy, the course's format): one run of N*d + 2 batches,
    the two sets of columns named, with their dims."""
    q, k = qk()
    v = RNG.uniform(-3, 3, size=(2, N, D)).astype(np.float32)
    inp = ProbeInput(np.stack([q, q]), np.stack([k, k]), v)
    # the source fa would have: the line that splits the lanes is shown
    ctx = stand_in_context(tmp_path, HALF_LANES, "int main() {\n  // each lane's dims\n"
                           "  for (int o = 8; o > 0; o >>= 1) s += __shfl_xor_sync(~0u, s, o);\n}\n", inp)
    step = linear_map.LinearMap()
    assert step.applies(ctx)
    found = step.run(ctx)
    # 3 runs: the step's two, and its last two batches alone once (wrong within it: step.run_many)
    assert ctx.runs == 3 and ctx.facts.named and found[0].kind == "measured"
    assert "the weights differ by output column: 2 sets" in found[0].lines[0]
    assert any("dims 0-15 at 1/sqrt(d); dims 16-31 not at all" in line for line in found[0].lines)
    assert found[0].lines[-1] == ("lines with shuffles in hw4.cu: 3 `for (int o = 8; o > 0; o >>= 1) s += "
                                  "__shfl_xor_sync(~0u, s, o);`")


def test_lanes_measured_apart_are_said_beside_a_butterfly_line_that_reduces_another_values_shuffle(tmp_path):
    """The same stand-in, its source with a second value's butterfly copied from the first's (set50's
    s10): the crossed line is said after the sets the map measured."""
    q, k = qk()
    inp = ProbeInput(np.stack([q, q]), np.stack([k, k]), RNG.uniform(-3, 3, size=(2, N, D)).astype(np.float32))
    ctx = stand_in_context(tmp_path, HALF_LANES, "s0 += __shfl_xor(s0, off);\ns1 += __shfl_xor(s0, off);\n", inp)
    lines = linear_map.LinearMap().run(ctx)[0].lines
    assert "the weights differ by output column: 2 sets" in lines[0]
    assert lines[-2].startswith("the source's line 2 (`s1 += __shfl_xor(s0, off);`) reduces the shuffle of s0 into "
                                "s1"), lines


def test_a_v_tile_loaded_from_another_tiles_start_is_named_with_the_rows_no_key_meets():
    """Key k's weight meets V's row (k div 32)*16 + k mod 32 (a V tile of 32 keys loaded from row
    j*16): V rows meet the sums of the keys that land on them, rows past the last start none."""
    s = np.random.default_rng(5).uniform(-3, 3, (64, 64))
    P = np.exp(s - s.max(axis=1, keepdims=True))
    P /= P.sum(axis=1, keepdims=True)
    keys = np.arange(64)
    W = np.zeros_like(P)
    np.add.at(W, (slice(None), (keys // 32) * 16 + keys % 32), P)  # a tile of 32 loaded from row j*16
    said = pairing.tiles_moved(W, P)
    assert said and "key k's weight meets V's row (k div 32)*16 + k mod 32" in said, said
    assert said.endswith("V's rows 48-63 meet no key"), said
    assert pairing.tiles_moved(P, P) is None


def test_layouts_of_the_block_are_named_by_their_formula():
    """The block read column by column, transposed twice the same way (a real student's earlier
    version: a d x N result transposed back as though it were N x d), and 8 x 8 tiles transposed in
    place: each is named by the formula of its layout."""
    q, k = qk()
    P = weights(q, k)

    def t(f):
        return f % N * D + f // N

    def read(source):
        return linear_map.read_map(moved_map(P, source), P, q, k)[0]
    by_columns = read(lambda r, c: divmod((r * D + c) % D * N + (r * D + c) // D, D))
    assert "flat position c*N + r (the block read column by column" in by_columns
    said = read(lambda r, c: divmod(t(t(r * D + c)), D))
    assert "flat position t(t(r*d + c)), t(f) = (f mod N)*d + f div N: the block transposed twice" in said
    assert "e.g. row 0, column 1 holds row" in said
    said = read(lambda r, c: (8 * (r // 8) + c % 8, 8 * (c // 8) + r % 8))
    assert "each 8 x 8 tile transposed in place" in said
    # a lane's two columns computed at lane*2 + y and stored at lane + 16*y: the two indices swapped
    said = read(lambda r, c: (r, (c % 16) * 2 + c // 16))
    assert "column c0 + (i mod 16)*2 + i div 16 (i = c - c0, each block of 32 columns from c0)" in said, said
    assert "a thread's columns indexed lane*2 + y where lane + 16*y belongs" in said
    # float4 loads of V started at column i where 4*i belongs: column c holds column c div 4 + c mod 4
    said = read(lambda r, c: (r, c // 4 + c % 4))
    assert "column c div 4 + c mod 4: the 4 floats of vector i (columns 4*i ..) taken from column i on" in said, said


TRANSPOSED_BACK_AS_N_BY_D = """#!{python}
import sys
import numpy as np
raw = np.fromfile(sys.argv[1], dtype="<i4", count=3); B, N, d = (int(x) for x in raw)
x = np.fromfile(sys.argv[1], dtype="<f4", offset=12).reshape(B, 3, N, d).astype(np.float64)
q, k, v = x[:, 0], x[:, 1], x[:, 2]
s = q @ k.transpose(0, 2, 1) / np.sqrt(d)
p = np.exp(s - s.max(axis=2, keepdims=True)); p /= p.sum(axis=2, keepdims=True)
o_t = (p @ v).transpose(0, 2, 1)  # the result kept d x N, then 'transposed back' as though it were N x d
out = o_t.reshape(B, N, d).transpose(0, 2, 1).reshape(B, N, d)
out.astype("<f4").tofile(sys.argv[2])
"""


def test_the_step_names_a_result_transposed_back_with_its_sizes_swapped(tmp_path):
    """A real student's earlier version, as a stand-in: O computed as d x N, then transposed by a
    kernel given (N, d) where its buffer is d x N. The map is named by its formula, with the line
    that writes the output."""
    q, k = qk()
    v = RNG.uniform(-3, 3, size=(2, N, D)).astype(np.float32)
    inp = ProbeInput(np.stack([q, q]), np.stack([k, k]), v)
    ctx = stand_in_context(tmp_path, TRANSPOSED_BACK_AS_N_BY_D, "__global__ void t(float *in, float *output) {\n"
                           "  output[out_idx] = tile[threadIdx.x][threadIdx.y];\n}\n", inp)
    found = linear_map.LinearMap().run(ctx)
    assert found and found[0].kind == "measured", found
    assert "the block transposed twice the same way" in found[0].lines[0]
    assert found[0].lines[-1].startswith("lines with the output's index in hw4.cu: 2 `output[out_idx] = tile")


def test_a_sum_each_lane_keeps_of_its_own_keys_is_named_with_its_lanes():
    """Lane c of 16 keeps l over the keys j = c mod 16 only and divides its output column by it
    (modelled here from exp of the scores, not from fa's P): each column's weights are P's times
    a factor a row, the lanes' formula named."""
    q, k = qk()
    s = logits(q[None], k[None])[0]
    p = np.exp(s - s.max(axis=1, keepdims=True))
    keys = np.arange(N)
    T = diagonal_map([p / p[:, keys % 16 == c % 16].sum(axis=1, keepdims=True) for c in range(D)])
    said = linear_map.read_map(T, weights(q, k), q, k)
    assert said[0].startswith("every column's weights are P's times a factor of its own for each row")
    assert "column c's is P summed over the keys j = c mod 16 alone" in said[0]
    assert linear_map.look_for(said) == "sums"


def test_a_sum_by_column_shows_the_sums_reduction_across_lanes_before_other_sum_lines(tmp_path):
    """The lines under "divided by another sum in each column": the sum's shuffle first (where a lane
    adds its own weight at each step), not the lane's index or the sum's declaration."""
    from types import SimpleNamespace
    from fa_cli.judge.diagnose import source_lines
    source = tmp_path / "hw4.cu"
    source.write_text("const int lane = threadIdx.x & 31;\nfloat m = -INFINITY, l = 0.f;\n"
                      "for (int off = 16; off > 0; off >>= 1) psum += __shfl_xor_sync(FULL, p, off);\n"
                      "l = l * alpha + psum;\n")
    what, pattern = linear_map.first_found(SimpleNamespace(source=source), linear_map.LOOK["sums"])
    assert what == "the row's sum summed across lanes" and [n for n, _ in source_lines(source, pattern)] == [3]
    plain = tmp_path / "plain.cu"
    plain.write_text("const int lane = threadIdx.x & 31;\nfloat m = -INFINITY, l = 0.f;\nl = l * alpha + s;\n")
    what, pattern = linear_map.first_found(SimpleNamespace(source=plain), linear_map.LOOK["sums"])
    assert what == "the row's sum" and [n for n, _ in source_lines(plain, pattern)] == [2, 3]  # not the lane's line
    plain.write_text(plain.read_text() + "out[i * D + t] = acc / ls;\n")  # each column divided by its own sum
    what, pattern = linear_map.first_found(SimpleNamespace(source=plain), linear_map.LOOK["sums"])
    assert what == "the output's division" and [n for n, _ in source_lines(plain, pattern)] == [4]


NAN_LAST_ROWS = HALF_LANES.replace("out.astype", "out[:, -2:] = np.nan  # two rows whose sums overflow\nout.astype")


RIGHT_PLUS_K_ROW = """#!{python}
import sys
import numpy as np
raw = np.fromfile(sys.argv[1], dtype="<i4", count=3); B, N, d = (int(x) for x in raw)
x = np.fromfile(sys.argv[1], dtype="<f4", offset=12).reshape(B, 3, N, d).astype(np.float64)
q, k, v = x[:, 0], x[:, 1], x[:, 2]
s = q @ k.transpose(0, 2, 1) / np.sqrt(d)
p = np.exp(s - s.max(axis=2, keepdims=True)); p /= p.sum(axis=2, keepdims=True)
out = p @ v + p[..., :1] * k[:, :1]  # key 0's weight also meets K's row 0, whatever V is
out.astype("<f4").tofile(sys.argv[2])
"""


def test_values_made_of_no_v_beside_the_right_map_are_said_alone(tmp_path):
    """set36's s01: key 0's weight times a row of K added to the right P V: the part V does not make
    is said, with no reading of the map (which is P's), and no error of fa's own."""
    q, k = qk()
    v = RNG.uniform(-3, 3, size=(2, N, D)).astype(np.float32)
    inp = ProbeInput(np.stack([q, q]), np.stack([k, k]), v)
    ctx = stand_in_context(tmp_path, RIGHT_PLUS_K_ROW, "int main() {}\n", inp)
    [finding] = linear_map.LinearMap().run(ctx)
    assert finding.lines[0].startswith("probe: the output read as a linear map of V (") and \
        "with V all zero the output is not: up to " in finding.lines[0], finding.lines
    assert "it is the sum over keys 0 of P[r, j] times K's row j: those keys' weights meet K's rows where V's " \
        "belong" in finding.lines[0], finding.lines


def test_values_made_of_no_v_are_read_as_rows_of_k_or_q_met_by_some_keys_weights():
    """set36's s01 (a walk of a ballot's bits off by one): key 32t's weight meets K's row 32t; Q's rows
    met by every key's weight at a factor are said with it; values of no buffer keep the plain words."""
    q, k = qk()
    P = softmax_rows(logits(q[None], k[None]))[0]
    tiles = np.arange(0, N, 32)
    constant = P[:, tiles] @ k[tiles].astype(np.float64)
    said = linear_map.without_v(constant, P, q, k)[0]
    assert f"it is the sum over keys {linear_map.spans(tiles)} of P[r, j] times K's row j:" in said, said
    said = linear_map.without_v(0.5 * P @ q.astype(np.float64), P, q, k)[0]
    assert f"it is the sum over keys 0-{N - 1} of P[r, j] times Q's row j times 0.5:" in said, said
    drawn = RNG.uniform(-1, 1, (N, D))
    assert linear_map.without_v(drawn, P, q, k)[0].endswith("values made of no V (memory never written, or another "
                                                             "buffer's)")
    # set38's s02: the upper half of the dims takes keys 0..7 of every 16 from the K tile: fitted on those columns
    keys = np.flatnonzero(np.arange(N) % 16 < 8)
    half = np.zeros((N, D))
    half[:, D // 2:] = P[:, keys] @ k[keys, D // 2:].astype(np.float64)
    said = linear_map.without_v(half, P, q, k)[0]
    assert f"it is the sum over keys {linear_map.spans(keys)} of P[r, j] times K's row j in columns {D // 2}-{D - 1}:" \
        in said, said


def test_an_output_with_nan_is_not_read_as_a_map_and_says_so(tmp_path):
    q, k = qk()
    v = RNG.uniform(-3, 3, size=(2, N, D)).astype(np.float32)
    inp = ProbeInput(np.stack([q, q]), np.stack([k, k]), v)
    ctx = stand_in_context(tmp_path, NAN_LAST_ROWS, "int main() {}\n", inp)
    [finding] = linear_map.LinearMap().run(ctx)
    said = " ".join(finding.lines)
    assert f"holds NaN or inf in {N * D + 2} batches: not read as a map of V" in said, said


def test_v_rows_weighed_with_another_keys_weight_are_said_by_their_map():
    """One set of weights where V's row k takes key f(k)'s: a lane read at a quarter of its place
    (ds_bpermute given a lane where a byte address belongs), and the upper keys of a tile all given
    one key's weight (a lane index that counts only the lower lanes), l counted over those keys."""
    n = 64
    q, k = (RNG.uniform(-3, 3, size=(n, D)).astype(np.float32) for _ in range(2))
    P = softmax_rows(logits(q[None], k[None]))[0]
    kk = np.arange(n)
    quarter = P[:, kk - kk % 32 + (kk % 32) // 4]
    said = linear_map.pairing.rows_weighed(quarter, P)
    assert said.startswith("one set of weights for every column; V's row k weighed with key f(k)'s weight: key k0 + "
                           "(k - k0) div 4 of its tile of 32"), said
    upper = np.minimum(kk, 32)
    e = np.exp(logits(q[None], k[None])[0].astype(np.float64))
    shared = e[:, upper] / e[:, upper].sum(axis=1, keepdims=True)  # l over the keys weighed: key 32 32 times
    said = linear_map.pairing.rows_weighed(shared, P)
    assert "key k0 + min(k - k0, 32) of its tile of 64" in said and "weights sum to 1: l is summed over the weights as given" in said, said
    assert linear_map.pairing.rows_weighed(P, P) is None


def test_weights_all_alike_are_said_as_equal_scores_not_as_a_map_of_keys():
    """Every score 0 (a scale copied to the device after the launch that reads it: held-out set33's
    s05): every weight 1/N, which any key's weight would give; said as equal scores, no map f."""
    n = 64
    q, k = (RNG.uniform(-3, 3, size=(n, D)).astype(np.float32) for _ in range(2))
    P = softmax_rows(logits(q[None], k[None]))[0]
    said = linear_map.pairing.rows_weighed(np.full((n, n), 1 / n), P)
    assert said.startswith("one set of weights for every column: every key weighed alike in every row (each weight "
                           "0.0156, 1/64 is 0.0156): every score of a row equal"), said
    assert "f(k)" not in said


def test_v_rows_met_with_the_tile_befores_keys_are_said_by_their_map():
    """A K tile loaded one tile late (a register prefetch of the current tile where the next belongs:
    held-out set24's y07): from the second tile of 32 on, key k is scored with K's row k - 32 and
    meets V's row k; l over those weights."""
    n = 128
    q, k = (RNG.uniform(-3, 3, size=(n, D)).astype(np.float32) for _ in range(2))
    P = softmax_rows(logits(q[None], k[None]))[0]
    kk = np.arange(n)
    late = np.where(kk < 32, kk, kk - 32)
    e = np.exp(logits(q[None], k[None])[0].astype(np.float64))
    said = linear_map.pairing.rows_weighed(e[:, late] / e[:, late].sum(axis=1, keepdims=True), P)
    assert "V's row k weighed with key f(k)'s weight: key k - 32 from the second tile of 32 on" in said, said
    assert "a prefetch of the current tile where the next belongs" in said and "fits as well" not in said
    P64, late64 = P[:64, :64] / P[:64, :64].sum(axis=1, keepdims=True), late[:64]  # at N = 64 a width-32 shuffle agrees
    e64 = e[:64, :64]
    said = linear_map.pairing.rows_weighed(e64[:, late64] / e64[:, late64].sum(axis=1, keepdims=True), P64)
    assert "; at N = 64 it fits as well key k - 32 from the second tile of 32 on" in said, said


def test_columns_left_undivided_by_l_are_said_by_their_columns():
    """A warp per row whose lane stores o0 / l for dim lane and o1 (never divided) for dim lane + 32:
    at d = 64, columns 32..63 hold P times l, columns 0..31 are right."""
    n, d = 64, 64
    q, k = (RNG.uniform(-3, 3, size=(n, d)).astype(np.float32) for _ in range(2))
    P = softmax_rows(logits(q[None], k[None]))[0]
    l = 1 / P.max(axis=1)
    weights = np.stack([P * (l[:, None] if c >= 32 else 1.0) for c in range(d)])
    [said] = linear_map.lane_sums(weights, P)
    assert said == ("every column's weights are P's times a factor of its own for each row: in columns 32-63 the "
                    "row's sum l itself (relative to its max), so those columns are never divided by l; columns 0-31 "
                    "are right"), said


@pytest.mark.parametrize("M", [2, 4])
def test_a_sum_over_part_of_the_lanes_is_said_by_the_lanes_each_column_adds(M):
    """A warp per row, key j at lane j mod 32, lane c keeps dims c and c + 32: a xor butterfly for l
    that leaves out offset 1 (and 2) sums at lane c only the lanes of c's residue mod 2 (mod 4), as
    two (four) threads a row that never add their sums would: both readings said, neither chosen."""
    n, d = 128, 64
    q, k = (RNG.uniform(-3, 3, size=(n, d)).astype(np.float32) for _ in range(2))
    P = softmax_rows(logits(q[None], k[None]))[0]
    keys = np.arange(n)
    weights = np.stack([P / P[:, keys % M == c % M].sum(axis=1, keepdims=True) for c in range(d)])
    [said] = linear_map.lane_sums(weights, P)
    assert said.endswith(f"column c's is P summed over the keys j = c mod {M} alone: l added over only the lanes or "
                         f"threads whose index is c mod {M} (a xor butterfly over a warp's 32 lanes missing its "
                         f"offsets below {M}, or {M} threads a row whose sums are never added); look at the sum's "
                         "shuffle loop (its start and bound) or the threads that share a row"), said


def test_keys_whose_weights_meet_the_k_tile_past_v_are_said_with_the_pitches():
    """set38's s02: in columns 16-31, the partner lane's keys 0..7 of each 16-key tile meet rows 16..23
    of a 16-row V tile, which are the K tile stored after it at a pitch of 33: their weights, right,
    meet K's elements read at V's pitch of 32 (the pad column holds whatever the memory held)."""
    rng = np.random.default_rng(5)
    n = 64
    q, k = (rng.uniform(-3, 3, size=(n, D)).astype(np.float32) for _ in range(2))
    P = softmax_rows(logits(q[None], k[None]))[0]
    gone = np.arange(n) % 16 < 8
    T = np.zeros((n, D, n, D))
    for c in range(D):
        T[:, c, :, c] = np.where(gone[None] & (c >= 16), 0.0, P)
    j, c = np.meshgrid(np.flatnonzero(gone), np.arange(16, D), indexing="ij")
    element = pairing_free_element(j, c, k, rng)
    constant = np.zeros((n, D))
    constant[:, 16:] = P[:, gone] @ element
    said = linear_map.read_map(T, P, q, k, constant)
    assert said[:2] == ["the weights differ by output column: 2 sets", "columns 0-15: right"], said
    assert said[2].startswith("columns 16-31: keys whose weights meet no row of V: the keys j with j mod 16 in "
                              "{0-7} (32 of 64) have 0 weight on every row of V"), said[2]
    assert "they fit K's tile of 16 keys stored at a pitch of 33 floats a row and read at 32" in said[2], said[2]
    assert "(512 of the 512 values fitted, key by key and column by column): key 0's weight meets K[0, 16] in column " \
        "16" in said[2], said[2]
    assert linear_map.look_for(said) == "rows of V"
    # values of no input: the keys still said, and the values said to be no element of K or Q
    constant[:, 16:] = P[:, gone] @ rng.uniform(-3, 3, size=element.shape)
    said = linear_map.read_map(T, P, q, k, constant)
    assert said[2].endswith("that are no element of K or Q"), said[2]


def pairing_free_element(j, c, k, rng):
    """K's element that key j's weight meets in column c where the 16-key K tile, stored at a pitch
    of 33, is read at 32; the pad column's slots hold drawn values."""
    place = (j % 16) * 32 + c
    key, dim = j - j % 16 + place // 33, place % 33
    return np.where(dim < D, k[np.minimum(key, k.shape[0] - 1), np.minimum(dim, D - 1)], rng.uniform(-3, 3, j.shape))


def test_keys_scored_but_left_out_of_p_v_are_said_as_a_loop_that_stops_short():
    """set38's s11 on 64 lanes: the P V loop runs over 32 keys of each 64-key tile while l holds all
    64: keys 32..63 of each tile have 0 weight, the others P's exactly, and V all zero gives 0."""
    rng = np.random.default_rng(6)
    n = 128
    q, k = (rng.uniform(-3, 3, size=(n, D)).astype(np.float32) for _ in range(2))
    P = softmax_rows(logits(q[None], k[None]))[0]
    W = np.where(np.arange(n)[None] % 64 >= 32, 0.0, P)
    T = np.zeros((n, D, n, D))
    T[:, np.arange(D), :, np.arange(D)] = W
    said = linear_map.read_map(T, P, q, k, np.zeros((n, D)))
    assert said == ["keys whose weights meet no row of V: the keys j with j mod 64 in {32-63} (64 of 128) have 0 "
                    "weight on every row of V, the other keys P's weights exactly (so theirs are in l)"
                    + linear_map.unmet_keys.NOTHING_MET], said
    assert linear_map.look_for(said) == "weights met"
    # a mask that renormalises the keys kept is not this reading (their weights are no longer P's)
    assert linear_map.unmet_keys.unmet(W / W.sum(axis=1, keepdims=True), P, None, np.arange(D), {}) is None


def test_the_map_is_read_after_a_32_lane_build_named_the_wavefront_width():
    """The 32-lane build names the class (a 32-lane assumption); the map still reads what the 64-lane
    build computes, to say which mechanism; any other name stops it."""
    ctx = Context(program=None, launcher=None, work=None, budget=None, say=print, tol=5e-3,
                  probe=ProbeInput(*(np.zeros((1, 8, 32), np.float32) for _ in range(3)), "p"), case_label="t01")
    ctx.facts.out = np.ones((1, 8, 32), np.float32)
    ctx.facts.named, ctx.facts.lanes_named = True, True
    assert linear_map.LinearMap().applies(ctx)
    ctx.facts.lanes_named = False
    assert not linear_map.LinearMap().applies(ctx)


def test_keys_never_scored_are_said_with_the_softmax_over_the_others_and_the_key_count_lines(tmp_path):
    """set39's s10 on 64 lanes at N = 97: the last tile's keys counted as N % 32 = 1 of its 33: keys
    65-96 left out of the max, the sum and the output; the others the softmax over them alone."""
    rng = np.random.default_rng(9)
    n = 97
    q, k = (rng.uniform(-3, 3, size=(n, D)).astype(np.float32) for _ in range(2))
    P = softmax_rows(logits(q[None], k[None]))[0]
    W = masked_weights(q, k, np.broadcast_to(np.arange(n) < 65, (n, n)))
    T = np.zeros((n, D, n, D))
    T[:, np.arange(D), :, np.arange(D)] = W
    assert linear_map.read_map(T, P, q, k, np.zeros((n, D))) == []  # KeysWithoutWeight's, at the probe's whole N
    said = linear_map.read_map(T, P, q, k, np.zeros((n, D)), keys_said_here=True)
    assert said == ["keys left out of the softmax: keys 65-96 (32 of 97) have 0 weight in every row, the others the "
                    "right scores' softmax over them alone: those keys were left out of the sum and the output alike "
                    "(a loop's bound or a tile's count of keys that stops short of them)"]
    assert linear_map.look_for(said) == "key count"
    source = tmp_path / "hw4.hip"
    source.write_text("const int tail = N % BC;  // keys in a short last tile\nfor (int j = 0; j < kn; ++j) {}\n")
    assert linear_map.source_lines(source, linear_map.LOOK["key count"][0][1]) == [
        (1, "const int tail = N % BC;")]  # comments left out


def test_lanes_merged_by_a_butterfly_that_never_updates_the_max_are_said_by_the_column_each_lane_writes():
    """set39's s02: a warp a row, key j on lane j mod 32, the (m, l, o) partials merged by an xor
    butterfly that never sets m to the merged max: the lanes end with weights of their own, and
    lane c writes columns 2c and 2c + 1 (d = 64 over 32 lanes; the last step leaves lanes g and g xor 1
    alike, so columns 0-3 are lanes 0 and 1's)."""
    from fa_cli.judge.probes import softmax_steps
    rng = np.random.default_rng(12)
    n, d = 64, 64
    q, k = (rng.uniform(-3, 3, size=(n, d)).astype(np.float32) for _ in range(2))
    s = logits(q[None], k[None])[0]
    lanes = stale_butterfly(s, 32)  # (N, 32, N), the program's loops written here
    weights = np.stack([lanes[:, c // 2] for c in range(d)])
    said = softmax_steps.lanes_by_column(weights, s)
    assert said is not None and said.startswith("each output column's weights are one lane's own: 32 lanes' online "
                                                "softmaxes (key j on lane j mod 32) merged by an xor butterfly "
                                                + softmax_steps.STALE_MAX), said
    assert "(columns 0-3: lanes 0-1's; columns 4-7: lanes 2-3's; columns 8-11: lanes 4-5's ...)" in said, said
    right = np.stack([lanes[:, 0]] * d)  # one lane's weights in every column: no split by lane to say
    assert softmax_steps.lanes_by_column(right, s) is None
    assert softmax_steps.lanes_by_column(np.stack([softmax_rows(s[None])[0]] * d), s) is None


def stale_butterfly(s, G):
    """Each lane's weights, row by row: lane g's online softmax over keys g, g + G, ..., then an xor
    butterfly whose merge rescales l and o to M = max(m, m') and keeps m as it was."""
    N = s.shape[1]
    out = np.zeros((s.shape[0], G, N))
    for r in range(s.shape[0]):
        m = np.array([s[r, g::G].max() for g in range(G)])
        o = np.zeros((G, N))
        for g in range(G):
            o[g, g::G] = np.exp(s[r, g::G] - m[g])
        l, off = o.sum(axis=1), G // 2
        while off:
            partner = np.arange(G) ^ off
            M = np.maximum(m, m[partner])
            a, c = np.exp(m - M), np.exp(m[partner] - M)
            o, l = o * a[:, None] + o[partner] * c[:, None], l * a + l[partner] * c  # m never set to M
            off //= 2
        out[r] = o / l[:, None]
    return out


LAST_PARTIAL_TILE_ONLY = """#!{python}
import sys
import numpy as np
B, N, d = (int(x) for x in np.fromfile(sys.argv[1], dtype="<i4", count=3))
x = np.fromfile(sys.argv[1], dtype="<f4", offset=12).reshape(B, 3, N, d).astype(np.float64)
s = x[:, 0] @ x[:, 1].transpose(0, 2, 1) / np.sqrt(d)
p = np.exp(s - s.max(axis=2, keepdims=True)); p /= p.sum(axis=2, keepdims=True)
p[..., :N - N % 32] = 0  # set41's s06: the P V loop runs on the partial last tile alone
(p @ x[:, 2]).astype("<f4").tofile(sys.argv[2])
"""


def test_a_map_of_zeros_at_whole_tiles_is_said_and_leaves_the_probes_own_n_to_the_readings(tmp_path, monkeypatch):
    """At the map's N (whole tiles of 32) the output is 0 whatever V is, while the probe's own N
    (a partial last tile) gives values: said as observed (no claim), so that the readings of W at the
    probe's N name it; never as every key weighed alike."""
    rows = 64 + 8
    q, k, v = (RNG.uniform(-3, 3, size=(1, rows, 16)).astype(np.float32) for _ in range(3))
    ctx = stand_in_context(tmp_path, LAST_PARTIAL_TILE_ONLY, "int main() {}\n", ProbeInput(q, k, v))
    ctx.kind = "cuda"
    monkeypatch.setattr(linear_map, "MAX_BATCHES", 64 * 16)  # the map cut to 64 rows: whole tiles
    [finding] = linear_map.LinearMap().run(ctx)
    assert finding.kind == Kind.OBSERVED and "the output is 0 whatever V is: no row of V reaches it at 64 keys, " \
        "where the probe's 72 give values" in finding.lines[0], finding.lines
    assert not ctx.facts.named
