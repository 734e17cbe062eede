"""fa_cli/judge/probes/pairing.py: which weight meets which element of V. Maps built in NumPy from
the right weights paired as a GPU program's mechanics pair them (lanes exchanging weights by an
xor, a V tile stored transposed) are read back as that pairing, by formula; the right map, and a
map whose values are no weights of P, say nothing."""
import numpy as np
import pytest

from fa_cli.judge.probes import linear_map, pairing
from fa_cli.judge.probes.step import logits, softmax_rows

RNG = np.random.default_rng(5)


def weights(N, d):
    q, k = (RNG.uniform(-3, 3, size=(N, d)).astype(np.float32) for _ in range(2))
    return q, k, softmax_rows(logits(q[None], k[None]))[0]


def paired_map(P, d, key_row, column):
    """T whose column c takes key j's weight (rounded to float32, as a program computes it) on
    V[key_row(c, j), column(c, j)]."""
    N = P.shape[0]
    c, j = np.meshgrid(np.arange(d), np.arange(N), indexing="ij")
    T = np.zeros((N, d, N, d))
    np.add.at(T, (slice(None), c, key_row(c, j), column(c, j)), P[:, j].astype(np.float32))
    return T


def test_weights_exchanged_between_lanes_by_an_xor_are_named_with_the_formula_and_examples():
    q, k, P = weights(64, 32)
    T = paired_map(P, 32, lambda c, j: j ^ (c % 32), lambda c, j: c)
    said = linear_map.read_map(T, P, q, k)
    assert len(said) == 1 and said[0].startswith(pairing.LEAD + "V's row j xor (c mod 32), column c")
    assert "column 1, key 0: V[1, 1]; column 1, key 1: V[0, 1]" in said[0]
    assert pairing.look(said[0], None) == pairing.SHUFFLES


@pytest.mark.parametrize("d", [32, 64])
def test_a_v_tile_stored_with_an_xor_swizzle_and_read_plain_is_named_with_the_tiles_lines(d, tmp_path):
    """Key j's weight meets V[j, c xor (j mod 32)]: a tile stored at (r, c xor r), read at (r, c)."""
    q, k, P = weights(64, d)
    T = paired_map(P, d, lambda c, j: j, lambda c, j: c ^ (j % 32))
    said = linear_map.read_map(T, P, q, k)
    assert said[0].startswith(pairing.LEAD + "V[j, c xor (j mod 32)]: the V tile of 32 keys stored with an XOR "
                              "swizzle"), said
    assert "column 0, key 1: V[1, 1]" in said[0]
    source = tmp_path / "hw4.cu"
    source.write_text("__shared__ float Ks[32 * 64];\n__shared__ float Vs[32 * 64];\nVs[r * D + (c ^ r)] = v[i];\n")
    assert pairing.look(said[0], source)[0] == "the shared tile's index"  # not the shuffles


@pytest.mark.parametrize("d", [32, 64])
def test_a_v_tile_stored_transposed_and_read_row_by_row_is_named_for_either_d(d):
    """Key j0 + jj meets the tile's element jj*d + c of a tile stored d x 32: for d = 64, V[j0 + c mod
    32, 2*jj + c div 32]."""
    q, k, P = weights(64, d)
    T = paired_map(P, d, lambda c, j: j - j % 32 + (j % 32 * d + c) % 32, lambda c, j: (j % 32 * d + c) // 32)
    said = linear_map.read_map(T, P, q, k)
    assert said[0].startswith(pairing.LEAD + "element jj*d + c of its tile of 32 keys read from a tile stored "
                              "column by column")
    assert f"column 0, key 1: V[0, {d // 32}]" in said[0]  # element 1*d + 0 of a tile stored 32 to a column


def test_a_pairing_that_no_formula_fits_is_said_with_examples():
    N, d = 32, 8
    q, k, P = weights(N, d)
    swap = np.arange(N)
    swap[[3, 17]] = swap[[17, 3]]  # column 2 takes key 3's weight on V row 17 and the reverse
    T = paired_map(P, d, lambda c, j: np.where(c == 2, swap[j], j), lambda c, j: c)
    said = pairing.said(*pairing.read_pairs(T, P))
    assert "no formula of those tried fits" in said and "column 2, key 3: V[17, 2]" in said and "(2 of 256" in said


def test_the_right_map_and_values_that_are_no_weights_say_nothing():
    N, d = 32, 8
    q, k, P = weights(N, d)
    assert pairing.read_pairs(paired_map(P, d, lambda c, j: j, lambda c, j: c), P) is None
    assert pairing.read_pairs(RNG.uniform(0.01, 0.5, size=(N, d, N, d)), P) is None


def test_the_lines_shown_under_a_tile_are_the_shared_tile_of_v(tmp_path):
    source = tmp_path / "hw4.cu"
    source.write_text("__shared__ float Ks[32 * 33];\n__shared__ float Vs[32 * 32];\nextern __shared__ float sm[];\n"
                      "float* vt = sm + 64;\nKs[r * 33 + c] = k[i];\nVs[c * 32 + r] = v[i];\n")
    what, pattern = pairing.look("the V tile stored transposed", source)
    assert what == "the shared tile's index"
    import re
    assert re.search(pattern, "Vs[c * 32 + r] = v[i];") and re.search(pattern, "vt[3] = 1;")
    assert not re.search(pattern, "Ks[r * 33 + c] = k[i];")


def test_a_v_row_taken_from_the_lanes_own_key_is_named_by_its_tile_and_lane():
    """A warp scores a tile of 32 keys a lane each, then adds p_jj * V[j][c] with j the lane's own key
    (j0 + lane) where j0 + jj belongs: column c holds each tile's whole weight on V row j0 + c."""
    N, d = 64, 32
    q, k, P = weights(N, d)
    T = np.zeros((N, d, N, d))
    for c in range(d):
        for j0 in range(0, N, 32):
            T[:, c, j0 + c % 32, c] = P[:, j0:j0 + 32].sum(axis=1)
    said = linear_map.read_map(T, P, q, k)
    assert said == ["the weights differ by output column: each tile of 32 keys' whole weight meets one row of V in "
                    "column c, row j0 + (c mod 32): a V row indexed by the lane's own key (c mod 32) where the key "
                    "of the loop over the tile belongs"]
    assert linear_map.look_for(said) == "rows of V"


def test_keys_in_another_order_the_same_in_every_column_are_said_as_either_side():
    """A K tile loaded one row off gives the same map as V's rows rotated: fa says the keys' order
    differs between scores and V rows, on either side, and shows every shared tile's lines."""
    N, d = 64, 8
    q, k, P = weights(N, d)
    T = paired_map(P, d, lambda c, j: j - j % 32 + (j % 32 + 1) % 32, lambda c, j: c)
    said = pairing.said(*pairing.read_pairs(T, P))
    assert said.startswith(pairing.LEAD + "V's row p(j), the same in every column") and "or V's" in said
    assert "column 0, key 0: V[1, 0]" in said


def test_at_t_equal_to_d_both_directions_of_a_transposed_tile_are_said():
    N, d = 64, 32
    q, k, P = weights(N, d)
    T = paired_map(P, d, lambda c, j: j - j % 32 + c, lambda c, j: j % 32)
    said = pairing.said(*pairing.read_pairs(T, P))
    assert "stored one way and read the other" in said


def test_a_broadcast_shuffle_of_width_16_is_said_set_by_set_of_columns():
    """A warp scores a tile of 32 keys a lane each, then broadcasts key jj's weight with
    __shfl_sync(mask, p, jj, 16): lanes 0-15 (columns c mod 32 < 16) get lane jj mod 16's, lanes
    16-31 lane 16 + jj mod 16's; l is the right sum. Each set of columns is said by its map."""
    N, d = 64, 32
    q, k, P = weights(N, d)
    T = np.zeros((N, d, N, d))
    kk = np.arange(N)
    for c in range(d):
        segment = (c % 32) // 16 * 16
        T[:, c, kk, c] = P[:, kk - kk % 32 + segment + kk % 16]
    said = linear_map.read_map(T, P, q, k)
    assert said[0].startswith("the weights differ by output column: 2 sets"), said
    assert said[1].startswith("columns 0-15; V's row k weighed with key f(k)'s weight: key k0 + (k - k0) mod 16 of "
                              "its tile of 32"), said
    assert said[2].startswith("columns 16-31; V's row k weighed with key f(k)'s weight: key k0 + 16 + (k - k0) mod "
                              "16 of its tile of 32") and "a shuffle of width 16" in said[2], said


def test_a_v_tile_stored_at_d_and_read_at_a_fixed_pitch_is_named_with_its_pitch():
    """d = 32, a tile of 64 keys stored at 32 floats a row and read at 64 (an array's fixed width):
    key j0 + jj meets V[j0 + 2*jj, c], keys 32..63 of each tile read past it (zeros: no weight met).
    The map is the same in every column, so K's rows in that order are said to fit as well."""
    N, d = 128, 32
    q, k, P = weights(N, d)
    c, j = np.meshgrid(np.arange(d), np.arange(N), indexing="ij")
    f = j % 64 * 64 + c
    inside = f < 64 * d
    T = np.zeros((N, d, N, d))
    np.add.at(T, (slice(None), c[inside], (j - j % 64 + f // d)[inside], (f % d)[inside]),
              P[:, j[inside]].astype(np.float32))
    said = pairing.said(*pairing.read_pairs(T, P))
    assert said.startswith(pairing.LEAD + "element jj*64 + c of its tile of 64 keys stored at d = 32 floats a row"), said
    assert "(the V tile stored at a pitch of d and read at 64, an array's fixed width)" in said
    assert "(or K's rows loaded in that order)" in said and "column 0, key 1: V[2, 0]" in said
