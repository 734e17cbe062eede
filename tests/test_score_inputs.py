"""fa_cli/judge/probes/score_inputs.py: the scores a program used, read back with Q one-hot by dim
and K coded. Programs written in NumPy read K their own (wrong) way: each is named by its formula,
a tile of keys read at the wrong pitch with its pad slots; the right program says nothing. Then
the step end to end on a stand-in program in the course's format."""
import numpy as np
import pytest
from helpers import stand_in_context

from fa_cli.judge.probes import key_patterns, score_inputs
from fa_cli.judge.probes.step import ProbeInput

N, D = 128, 32


def attention(inp: ProbeInput, read_k) -> np.ndarray:
    """Attention of each batch with its K as read_k(K) reads it, in float32."""
    q, v = inp.q.astype(np.float64), inp.v.astype(np.float64)
    k = np.stack([read_k(kb) for kb in inp.k.astype(np.float64)])
    s = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1])
    p = np.exp(s - s.max(axis=2, keepdims=True))
    return ((p / p.sum(axis=2, keepdims=True)) @ v).astype(np.float32)


def padded_tile_read_unpadded(k: np.ndarray, pad_value: float = 0.0, tile: int = 32) -> np.ndarray:
    """Each tile of keys stored at a pitch of d + 1 floats (a pad slot a key, never written) and read at d."""
    n, d = k.shape
    read = np.empty_like(k)
    for j0 in range(0, n, tile):
        floats = np.full(tile * (d + 1), pad_value)
        for r in range(min(tile, n - j0)):
            floats[r * (d + 1):r * (d + 1) + d] = k[j0 + r]
        for jj in range(min(tile, n - j0)):
            read[j0 + jj] = floats[jj * d:jj * d + d]
    return read


def read_back(read_k, N=N, d=D):
    k = score_inputs.coded_keys(N, d)
    inp = score_inputs.design(N, d, k)
    terms, spread = score_inputs.read_terms(score_inputs.weights_by_dim(attention(inp, read_k).astype(np.float64), N, d))
    return score_inputs.sources(terms, k), spread


@pytest.mark.parametrize("n", [N, 65])  # 65: a last batch of one key, whose own constant nothing fixes
def test_a_right_program_reads_every_term_from_its_own_element(n):
    found, spread = read_back(lambda k: k, N=n)
    assert spread < 1e-4 and (found == np.arange(n * D).reshape(n, D)).all()


def test_weights_that_are_no_softmax_of_k_elements_are_read_as_none_of_k_and_named_by_no_formula():
    """Scores sqrt(d) times too large (no 1/sqrt(d)): the log ratios are no differences of K's
    values; the terms land on K only by chance, and no formula is said of them."""
    found, _ = read_back(lambda k: k * np.sqrt(D))
    assert (found >= 0).mean() < score_inputs.OF_K and score_inputs.fitting(found, N, D) is None


def test_keys_taken_from_k_itself_where_a_formula_places_none_are_not_that_formula():
    """Key j reads K[j + 1] and the last key K[0] (a wrap no formula has): not called keys shifted
    with the last ones past K's end."""
    found, _ = read_back(lambda k: np.roll(k, -1, axis=0))
    assert score_inputs.fitting(found, N, D) is None


@pytest.mark.parametrize("pad_value", [0.0, 1.2345])
def test_a_padded_tile_read_at_the_unpadded_pitch_is_named_with_its_pitches_and_pad_slots(pad_value):
    found, _ = read_back(lambda k: padded_tile_read_unpadded(k, pad_value))
    said = score_inputs.fitting(found, N, D)
    assert said.startswith("a tile of 32 keys written at a pitch of 33 floats a key and read at 32"), said
    assert said.endswith("(124 terms on the tile's pad slots, never written)")  # 31 keys of each of 4 tiles


@pytest.mark.parametrize("read_k, words", [
    (lambda k: k.ravel()[np.arange(D)[None, :] * N + np.arange(N)[:, None]],
     "K read as if stored d x N: k[j, x] taken from K[x*N + j]"),
    (lambda k: np.concatenate([k[1:], np.full((1, D), 7.0)]),  # past K's last key: what follows it, not K
     "keys shifted: k[j, x] taken from K[j + 1, x] (32 terms past K's last element)"),
    (lambda k: np.roll(k, -2, axis=1), "dims shifted: k[j, x] taken from K[j, (x + 2) mod d]"),
    # half-warps of 16 lanes: q's dims loaded 2 in a row a lane (lane h: 2h, 2h + 1), K's every 16th (h, h + 16)
    (lambda k: k[:, [h + 16 * t for h in range(16) for t in range(2)]],
     "dims in another order: k[j, x] taken from K[j, x div 2 + 16*(x mod 2)]"),
    (lambda k: np.concatenate([k.ravel(), np.zeros(N)])[np.arange(N)[:, None] * (D + 1) + np.arange(D)[None, :]],
     "rows read at a pitch of 33 floats (d +1): k[j, x] taken from K's flat element j*33 + x"),
    # a tile of 32 keys stored swizzled (element (r, c) at c xor r) and read plain
    (lambda k: k[KEY, DIM ^ (KEY % 32)], "dims swizzled: k[j, x] taken from K[j, x xor (j mod 32)]"),
    # K transposed to d x N by the host, then read with rows of d: element x*d + j of the transpose
    (lambda k: k[(DIM * D + KEY) % N, (DIM * D + KEY) // N],
     "K transposed (d x N: a row of N keys a dim) and read with rows of 32: k[j, x] taken from the transpose's "
     "flat element x*32 + j"),
])
def test_other_readings_of_k_are_named_by_their_formula(read_k, words):
    found, _ = read_back(read_k)
    said = score_inputs.fitting(found, N, D)
    assert said is not None and said.startswith(words), said


KEY, DIM = np.meshgrid(np.arange(N), np.arange(D), indexing="ij")


def test_a_float4_component_read_for_another_is_named_as_one_map_of_dims_for_every_key():
    """q's .w meets k's .z in every float4 (x mod 4 = 3 reads x - 1): every key's terms come from
    its own row, through one map of dims that no formula has."""
    f = np.where(np.arange(D) % 4 == 3, np.arange(D) - 1, np.arange(D))
    found, _ = read_back(lambda k: k[:, f])
    assert score_inputs.fitting(found, N, D) is None
    said = key_patterns.dim_map(found, N, D)
    assert said.startswith("every key's dim x read from another dim of its row, the same for every key: dims "
                           "3, 7, 11"), said
    assert "(3 from 2, 7 from 6, 11 from 10, 15 from 14, ...); dims 3, 7, 11" in said, said
    assert said.endswith("component .w of each float4 of K read as .z (a vector load whose components are paired "
                         "wrong)"), said
    assert key_patterns.dim_map(read_back(lambda k: k)[0], N, D) is None


def halves_merged_unscaled(inp: ProbeInput) -> np.ndarray:
    """Even and odd keys summed apart, each against its own running max, and added as they are."""
    q, k, v = (a.astype(np.float64) for a in (inp.q, inp.k, inp.v))
    s = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1])
    o, l = 0.0, 0.0
    for part in (slice(0, None, 2), slice(1, None, 2)):
        p = np.exp(s[:, :, part] - s[:, :, part].max(axis=2, keepdims=True))
        o, l = o + p @ v[:, part], l + p.sum(axis=2, keepdims=True)
    return (o / l).astype(np.float32)


def float4_tile_scrambled(k: np.ndarray, T: int = 32, w: int = 4, reverse: bool = False) -> np.ndarray:
    """A tile of T keys copied in float4s into a [T][d/4] array and read as [key][vector]: vector u of
    the tile (file order) stored at [u mod T][u div T] (set38's s03), or, reversed, vector (r, c)
    stored at flat c*T + r."""
    n, d = k.shape
    per = d // w
    read = np.empty_like(k)
    u = np.arange(T * per)
    for j0 in range(0, n, T):
        vectors = k[j0:j0 + T].reshape(T * per, w)
        memory = np.empty_like(vectors)
        where = (u // per) + (u % per) * T if reverse else (u % T) * per + u // T
        memory[where] = vectors[u]
        read[j0:j0 + T] = memory.reshape(T, d)
    return read


@pytest.mark.parametrize("reverse", [False, True])
def test_a_float4_tile_stored_by_one_decomposition_and_read_by_the_other_is_named(reverse):
    found, _ = read_back(lambda k: float4_tile_scrambled(k, reverse=reverse))
    said = score_inputs.fitting(found, N, D)
    assert said is not None and said.startswith("a tile of 32 keys moved in vectors of 4 floats, stored by one "
                                                 "decomposition of a vector's index and read by the other"), said


def test_two_sets_of_keys_merged_without_one_max_are_named_and_not_called_rows_never_loaded():
    k = score_inputs.coded_keys(N, D)
    terms, _ = score_inputs.read_terms(score_inputs.weights_by_dim(
        halves_merged_unscaled(score_inputs.design(N, D, k)).astype(np.float64), N, D))
    assert key_patterns.keys_in_part(terms, k) is None
    said = key_patterns.keys_apart(terms, k)
    assert said is not None and said.startswith(
        "with key 0 read right, the keys j with j mod 2 in {0} take their terms right, and the other 64 keys theirs "
        "too but for one constant a row"), said
    assert said.endswith("each part's l and o times exp(m_part - m) before the sum)"), said


def first_keys_of_parts_counted_twice(inp: ProbeInput, parts: int = 4) -> np.ndarray:
    """A key split into 4 ranges whose running state starts from the range's first key (m = s, l = 1,
    o = v) and whose loop then starts at that key again: keys 0, N/4, N/2, 3N/4 counted twice."""
    q, k, v = (a.astype(np.float64) for a in (inp.q, inp.k, inp.v))
    n = k.shape[1]
    slots = np.sort(np.concatenate([np.arange(n), np.arange(0, n, -(-n // parts))]))
    s = q @ k[:, slots].transpose(0, 2, 1) / np.sqrt(q.shape[-1])
    p = np.exp(s - s.max(axis=2, keepdims=True))
    return ((p @ v[:, slots]) / p.sum(axis=2, keepdims=True)).astype(np.float32)


def test_first_keys_of_a_split_counted_twice_are_said_counted_and_not_merged_without_one_max():
    k = score_inputs.coded_keys(N, D)
    terms, _ = score_inputs.read_terms(score_inputs.weights_by_dim(
        first_keys_of_parts_counted_twice(score_inputs.design(N, D, k)).astype(np.float64), N, D))
    said = key_patterns.keys_apart(terms, k)
    assert said is not None and "keys 0, 32, 64, 96 weigh 2 times what their scores give" in said, said
    assert "counted 2 times" in said and "one max" not in said, said


def clamped_last_tile(inp: ProbeInput, tile: int = 48) -> np.ndarray:
    """Tiles of 48 keys whose slots past N hold key N - 1 (min(j, N - 1)), every slot added."""
    q, k, v = (a.astype(np.float64) for a in (inp.q, inp.k, inp.v))
    n = k.shape[1]
    slots = np.minimum(np.arange(-(-n // tile) * tile), n - 1)
    s = q @ k[:, slots].transpose(0, 2, 1) / np.sqrt(q.shape[-1])
    p = np.exp(s - s.max(axis=2, keepdims=True))
    return ((p @ v[:, slots]) / p.sum(axis=2, keepdims=True)).astype(np.float32)


def test_a_last_key_counted_for_every_clamped_slot_is_named_with_its_count_and_tiles():
    k = score_inputs.coded_keys(N, D)
    terms, _ = score_inputs.read_terms(score_inputs.weights_by_dim(
        clamped_last_tile(score_inputs.design(N, D, k)).astype(np.float64), N, D))
    said = key_patterns.keys_counted(terms, k)
    assert said is not None and said.startswith(
        "every key is read right, but the last key's weight counts 17 times (its terms all its own plus log 17): key "
        "N - 1 added 16 times more, as where a last tile of T = 24, 48, 72, 144 keys reads its 16 slots past N as key "
        "N - 1"), said
    assert key_patterns.keys_counted(*terms_of(lambda k: k)) is None


def weights_of_a_quarter_lane(inp: ProbeInput, tile: int = 64) -> np.ndarray:
    """V row j0 + jj weighed with key j0 + jj / 4's weight (a lane number passed as a byte address
    to ds_bpermute), the sum l right."""
    q, k, v = (a.astype(np.float64) for a in (inp.q, inp.k, inp.v))
    s = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1])
    p = np.exp(s - s.max(axis=2, keepdims=True))
    j = np.arange(k.shape[1])
    return ((p[:, :, j - j % tile + (j % tile) // 4] @ v) / p.sum(axis=2, keepdims=True)).astype(np.float32)


def test_keys_that_take_another_keys_row_of_their_tile_are_not_called_rows_never_loaded():
    """Weights handed to the wrong V rows read back as keys taking other keys' rows of the same
    tile: no load left those rows as they were."""
    k = score_inputs.coded_keys(N, D)
    terms, _ = score_inputs.read_terms(score_inputs.weights_by_dim(
        weights_of_a_quarter_lane(score_inputs.design(N, D, k)).astype(np.float64), N, D))
    assert key_patterns.keys_in_part(terms, k) is None


def test_keys_read_right_in_half_their_dims_are_not_called_rows_never_loaded():
    """Odd keys whose dims 0-15 are right and 16-31 are not: rows written in part, not rows a load
    never wrote (which hold none of their own terms)."""
    stale = np.random.default_rng(7).uniform(-2, 2, size=(N, D))
    half = (np.arange(N)[:, None] % 2 == 1) & (np.arange(D)[None, :] >= 16)
    assert key_patterns.keys_in_part(*terms_of(lambda k: np.where(half, stale, k))) is None


def test_keys_whose_dims_are_swizzled_are_not_called_rows_never_loaded():
    assert key_patterns.keys_in_part(*terms_of(lambda k: k[KEY, DIM ^ (KEY % 32)])) is None


def test_keys_read_in_an_order_no_formula_gives_are_said_by_example_not_named():
    order = np.random.default_rng(3).permutation(N)
    found, _ = read_back(lambda k: k[order])
    assert score_inputs.fitting(found, N, D) is None
    right = found == np.arange(N * D).reshape(N, D)
    assert score_inputs.examples(found, right, D).startswith("wrong in keys ")


def test_keys_a_tile_load_never_wrote_are_named_by_the_pattern_they_repeat():
    """A load loop that reaches only rows j mod 8 in {0, 1} of every tile: the other rows hold what
    the memory held (here the same stale values every time); the keys read right repeat every 8."""
    stale = np.random.default_rng(5).uniform(-2, 2, size=(N, D))
    loaded = (np.arange(N) % 8 < 2)[:, None]
    said = key_patterns.keys_in_part(*terms_of(lambda k: np.where(loaded, k, stale)))
    assert said is not None and said.startswith("with key 0 read right, the keys j with j mod 8 in {0-1} (32 of 128) "
                                                "take every term from their own row of K"), said
    assert key_patterns.keys_in_part(*terms_of(lambda k: k)) is None
    assert key_patterns.keys_in_part(*terms_of(lambda k: k * np.sqrt(D))) is None
    assert key_patterns.keys_apart(*terms_of(lambda k: np.where(loaded, k, stale))) is None


def terms_of(read_k):
    k = score_inputs.coded_keys(N, D)
    inp = score_inputs.design(N, D, k)
    terms, _ = score_inputs.read_terms(score_inputs.weights_by_dim(attention(inp, read_k).astype(np.float64), N, D))
    return terms, k


PITCH_33_READ_32 = """#!{python}
import sys
import numpy as np
raw = np.fromfile(sys.argv[1], dtype="<i4", count=3); B, N, d = (int(x) for x in raw)
x = np.fromfile(sys.argv[1], dtype="<f4", offset=12).reshape(B, 3, N, d).astype(np.float64)
out = np.empty((B, N, d))
for b in range(B):
    q, k, v = x[b]
    read = np.empty_like(k)
    for j0 in range(0, N, 32):  # a tile of 32 keys stored at a pitch of d + 1 and read at d
        floats = np.zeros(32 * (d + 1))
        for r in range(min(32, N - j0)):
            floats[r * (d + 1):r * (d + 1) + d] = k[j0 + r]
        for jj in range(min(32, N - j0)):
            read[j0 + jj] = floats[jj * d:jj * d + d]
    s = q @ read.T / np.sqrt(d)
    p = np.exp(s - s.max(axis=1, keepdims=True))
    out[b] = (p / p.sum(axis=1, keepdims=True)) @ v
out.astype("<f4").tofile(sys.argv[2])
"""


def test_the_step_reads_a_program_whose_tile_pitches_differ(tmp_path):
    """ScoreInputs on a stand-in program: one run, the formula named, with the lines that index the
    tile at a pitch."""
    rng = np.random.default_rng(2)
    inp = ProbeInput(*(rng.uniform(-3, 3, size=(2, 96, D)).astype(np.float32) for _ in range(3)))
    ctx = stand_in_context(tmp_path, PITCH_33_READ_32, "__global__ void f() {\n  Ks[r * (D + 1) + c] = "
                           "k[(size_t)(j0 + r) * D + c];\n  for (int x = 0; x < D; ++x) s += qi[x] * Ks[jj * D + x];\n}\n",
                           inp)
    step = score_inputs.ScoreInputs()
    assert step.applies(ctx)
    found = step.run(ctx)
    # 3 runs: the step's two, and its last two batches alone once (wrong within it: step.run_many)
    assert ctx.runs == 3 and ctx.facts.named and found[0].kind == "measured", found
    assert "every term fits a tile of 32 keys written at a pitch of 33 floats a key and read at 32" in found[0].lines[0]
    assert found[0].lines[-1].startswith("lines with a tile's pitch in hw4.cu: 2 `Ks[r * (D + 1) + c]")
    assert "3 `for (int x = 0; x < D; ++x) s += qi[x] * Ks[jj * D + x];`" in found[0].lines[-1]


def test_a_tile_of_k_read_at_the_padded_pitch_past_ks_end_into_v_is_named():
    """A tile of 32 keys loaded from K's flat elements j0*d + jj*(d + 1) + x (a padded pitch given
    to the global read): the last key reads past K's end into V, whose values differ by batch, so
    the batches' softmax sums differ; each batch read with its own constant, the formula fits."""
    k = score_inputs.coded_keys(N, D)
    inp = score_inputs.design(N, D, k)
    j, x = np.arange(N)[:, None], np.arange(D)[None, :]
    kv = np.concatenate([inp.k.reshape(len(inp.k), -1), inp.v.reshape(len(inp.v), -1)], axis=1).astype(np.float64)
    taken = kv[:, (j - j % 32) * D + (j % 32) * (D + 1) + x]  # (B, N, d)
    s = inp.q.astype(np.float64) @ taken.transpose(0, 2, 1) / np.sqrt(D)
    p = np.exp(s - s.max(axis=2, keepdims=True))
    out = (p / p.sum(axis=2, keepdims=True)) @ inp.v.astype(np.float64)
    W = score_inputs.weights_by_dim(out, N, D)
    terms, spread = score_inputs.read_terms(W)
    assert spread < 1e-6 and score_inputs.fitting(score_inputs.sources(terms, k), N, D) is None  # one constant a dim
    assert score_inputs.fitting(score_inputs.read_by_batch(W, k, N, D), N, D) == (
        "a tile of 32 keys read at a pitch of 33 floats a key where K's rows are d = 32: key j0 + jj, dim x takes "
        "K's flat element j0*32 + jj*33 + x (31 terms past K's last element)")


def test_rows_never_written_are_left_out_and_the_rest_read_where_every_row_holds_none_it_is_said():
    """Every 2nd row never written (0): the written rows' scores are read as they are, every term
    from its own element. Where no row holds a value, or each row weighs keys of its own (its V
    read from the row's own place), no score is read, and the words say what was measured."""
    k = score_inputs.coded_keys(N, D)
    inp = score_inputs.design(N, D, k)
    out = attention(inp, lambda kb: kb).astype(np.float64)
    out[:, 1::2] = 0.0
    W = score_inputs.weights_by_dim(out, N, D)
    terms, _ = score_inputs.read_terms(W)
    assert (score_inputs.sources(terms, k) == np.arange(N * D).reshape(N, D)).all()
    assert score_inputs.unread(np.zeros_like(W)) == (f"the batches of {D} of the {D} dims of Q hold 0 everywhere "
                                                     "(never written, or computed as 0): no score is read")
    first_batch_only = W.copy()
    first_batch_only[1:] = 0.0
    said = score_inputs.unread(first_batch_only)
    assert said.startswith(f"the batches of {D - 1} of the {D} dims of Q hold 0 everywhere (never written, or "
                           f"computed as 0); {N // 2} of {N} rows hold 0"), said
    said = score_inputs.unread(np.full_like(W, np.nan))
    assert said == "100% of the values read are no weight (NaN, infinite or negative): no score is read", said
    whole = score_inputs.weights_by_dim(attention(inp, lambda kb: kb).astype(np.float64), N, D)
    shifted = np.zeros_like(whole)  # row r's weights moved r keys on, those past the last key lost
    for r in range(N):
        shifted[:, r, r:] = whole[:, r, :N - r]
    said = score_inputs.unread(shifted)
    assert said == (f"{N - 1} of {N} keys are not weighed by every row that holds weights, in every dim that does "
                    "(each row's weights fall on keys of their own): no score is read"), said


def test_half_of_every_keys_dims_read_at_a_constant_offset_are_named_with_it():
    """Thread h of a row's two holds dims h*d/2.., but reads K at h*32 + x (32 written where d / 2
    belongs): at d = 32 dims 16..31 of key j take K[j + 1]'s dims 0..15, the last key's past K's end."""
    def half_at_32(kb):
        flat = np.concatenate([kb.ravel(), np.zeros(D)])  # past K's end: what follows (V here, zeros)
        return np.stack([np.r_[flat[j * D:j * D + 16], flat[j * D + 32:j * D + 48]] for j in range(N)])
    found, _ = read_back(half_at_32)
    words = key_patterns.dims_shifted(found, N, D)
    assert words and words.startswith("dims 16..31 of every key read 16 floats past their place (K[j, x] at j*d + x "
                                      "+ 16 for x in 16..31"), words
    assert key_patterns.dims_shifted(read_back(lambda k: k)[0], N, D) is None


def test_wrong_dims_in_two_runs_are_no_run_of_dims_shifted():
    """Dims 0..1 and 16..28 wrong in every key (two runs apart): no one run of dims, no words (and
    no error of fa's own: arrays of other lengths are never compared)."""
    place = np.arange(N * D).reshape(N, D)
    found = place.copy()
    found[:, [0, 1, *range(16, 29)]] += 5
    assert key_patterns.dims_shifted(found, N, D) is None


def test_dims_read_a_whole_key_off_are_said_as_another_keys():
    """Dims 0..7 of key j taken from key j + 1 (an offset of d floats): said as another key's dims."""
    place = np.arange(N * D).reshape(N, D)
    found = place.copy()
    found[:, :8] += D
    found[-1, :8] = -1  # the last key's past K's end
    words = key_patterns.dims_shifted(found, N, D)
    assert words and words.startswith("dims 0..7 of every key j read from key j + 1's"), words


def masked_attention(inp: ProbeInput, scored) -> np.ndarray:
    """Attention whose softmax and output take only the keys j with scored(j) (the others never
    scored: a lane mask), in float32."""
    q, k, v = (a.astype(np.float64) for a in (inp.q, inp.k, inp.v))
    s = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1])
    s[:, :, ~scored(np.arange(k.shape[1]))] = -np.inf
    p = np.exp(s - s.max(axis=2, keepdims=True))
    return ((p / p.sum(axis=2, keepdims=True)) @ v).astype(np.float32)


def test_keys_never_scored_are_named_by_their_pattern_and_not_called_rows_never_loaded():
    """Lanes 32-63 of a 64-lane wavefront left out (key j scored by lane j mod 64): those keys get
    no weight for any Q. Not a load left in part: such keys would still be scored."""
    k = score_inputs.coded_keys(N, D)

    def read(scored):
        W = score_inputs.weights_by_dim(masked_attention(score_inputs.design(N, D, k), scored).astype(np.float64), N, D)
        return W, score_inputs.read_terms(W)[0]
    W, terms = read(lambda j: j % 64 < 32)
    said = key_patterns.keys_unweighed(W, terms, k, score_inputs.TINY_WEIGHT, wavefronts=True)
    assert said is not None and said.startswith("the keys j with j mod 64 in {32-63} (64 of 128) get no weight in "
                                                "any row for any Q"), said
    assert "lanes 32-63 are left out" in said
    assert "lanes 32-63" not in key_patterns.keys_unweighed(W, terms, k, score_inputs.TINY_WEIGHT)  # a hw4.cu
    assert key_patterns.keys_in_part(terms, k) is None
    W8, terms8 = read(lambda j: j % 8 != 3)
    said = key_patterns.keys_unweighed(W8, terms8, k, score_inputs.TINY_WEIGHT, wavefronts=True)
    assert said is not None and "j mod 8 in {3} (16 of 128)" in said and "lanes 32-63" not in said
    right = score_inputs.weights_by_dim(attention(score_inputs.design(N, D, k), lambda k: k).astype(np.float64), N, D)
    assert key_patterns.keys_unweighed(right, score_inputs.read_terms(right)[0], k, score_inputs.TINY_WEIGHT) is None
    v_unread = right.copy()  # scored (in each row's sum) but their V rows never read: no mask
    v_unread[:, :, np.arange(N) % 64 >= 32] = 0
    assert key_patterns.keys_unweighed(v_unread, score_inputs.read_terms(v_unread)[0], k,
                                       score_inputs.TINY_WEIGHT) is None


def test_keys_whose_v_rows_come_from_other_keys_are_not_called_never_scored():
    """A 64-key V tile loaded by 32 threads with no loop (row r holds V[j0 + r % 32]): every key is
    scored, keys 32-63 of each tile weigh no V row of their own; one-hot V reads them as keys with
    no weight and the keys 0-31 as taking both halves' weights. Their terms are not their own K's:
    no mask is named."""
    k = score_inputs.coded_keys(N, D)
    inp = score_inputs.design(N, D, k)
    j = np.arange(N)
    v_read = inp.v[:, j - j % 64 + j % 32]
    out = attention(score_inputs.ProbeInput(inp.q, inp.k, v_read, "t"), lambda k: k)
    W = score_inputs.weights_by_dim(out.astype(np.float64), N, D)
    terms, _ = score_inputs.read_terms(W)
    assert key_patterns.keys_unweighed(W, terms, k, score_inputs.TINY_WEIGHT, wavefronts=True) is None


def test_k_transposed_in_blocks_whose_insides_stay_as_they_were_is_named_by_its_formula():
    """A tiled transpose of K that moves each 32 x 32 block and writes it back untransposed, read as
    K^T: key j's dim x is K[j - j % 32 + x % 32, x - x % 32 + j % 32]."""
    j, x = np.meshgrid(np.arange(N), np.arange(D), indexing="ij")
    found, _ = read_back(lambda k: k[j - j % 32 + x % 32, x - x % 32 + j % 32])
    said = score_inputs.fitting(found, N, D)
    assert said is not None and said.startswith("each 32 x 32 block of K read transposed in place: k[j, x] taken "
                                                 "from K[j - j mod 32 + x mod 32, x - x mod 32 + j mod 32]"), said


def tile_stored_and_read_at_pitches(k: np.ndarray, stored: int, read_at: int, tile: int = 32) -> np.ndarray:
    """Each tile of keys stored at a pitch of `stored` floats a key (pad slots 0, never written) and
    read at `read_at`: a static array's pitch for the widest d on one side, the d at hand on the other."""
    n, d = k.shape
    out = np.empty_like(k)
    for j0 in range(0, n, tile):
        floats = np.zeros(tile * max(stored, read_at) + d)
        for r in range(min(tile, n - j0)):
            floats[r * stored:r * stored + d] = k[j0 + r]
        for jj in range(min(tile, n - j0)):
            out[j0 + jj] = floats[jj * read_at:jj * read_at + d]
    return out


def test_a_tile_stored_at_one_pitch_and_read_at_another_is_named_with_both_not_as_rows_never_loaded():
    """Stored at 65 floats a key (the d = 64 array's padded pitch) and read at 33 (d = 32's): key 0
    of each tile right, the others take K's elements at other dims in runs, or a pad slot's 0."""
    k = score_inputs.coded_keys(64, D)
    inp = score_inputs.design(64, D, k)
    terms, _ = score_inputs.read_terms(score_inputs.weights_by_dim(
        attention(inp, lambda kb: tile_stored_and_read_at_pitches(kb, 65, 33)).astype(np.float64), 64, D))
    said = key_patterns.keys_in_part(terms, k)
    assert said is not None and "other elements of K, at other dims, in runs along K's rows (e.g. key 2, dim 0 took " \
        "K[1, 1]" in said, said
    assert "every one fits a tile of 32 keys stored at a pitch of 65 floats a row and read at 33" in said, said
    assert "rows of a tile of K that its load never wrote (a cooperative" not in said, said


def stale_max_tiles(inp: ProbeInput, tile: int = 64) -> np.ndarray:
    """set40's s11: a tiled online softmax whose weights are exp(s - m) against the max before the tile
    (the first tile's own max for the first), while l and o are rescaled to the new max."""
    q, k, v = (a.astype(np.float64) for a in (inp.q, inp.k, inp.v))
    s = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1])
    m = s[..., :tile].max(axis=2, keepdims=True)
    l, o = np.zeros(m.shape), np.zeros(q.shape)
    for j0 in range(0, s.shape[2], tile):
        m_new = np.maximum(m, s[..., j0:j0 + tile].max(axis=2, keepdims=True))
        p = np.exp(s[..., j0:j0 + tile] - m)
        alpha = np.exp(m - m_new)
        l, o, m = l * alpha + p.sum(axis=2, keepdims=True), o * alpha + p @ v[:, j0:j0 + tile], m_new
    return (o / l).astype(np.float32)


def test_weights_off_by_a_factor_a_tile_are_said_as_right_scores_and_not_as_other_elements():
    k = score_inputs.coded_keys(N, D)
    terms, _ = score_inputs.read_terms(score_inputs.weights_by_dim(
        stale_max_tiles(score_inputs.design(N, D, k)).astype(np.float64), N, D))
    said = key_patterns.keys_by_tile(terms, k)
    assert said is not None and said.startswith(
        "with key 0 read right, every term takes its own element of K but for one constant a dim and tile of 64 keys "
        "(tiles 1 of 2;"), said
    assert "the scores are right" in said, said
    right = score_inputs.read_terms(score_inputs.weights_by_dim(
        attention(score_inputs.design(N, D, k), lambda kb: kb).astype(np.float64), N, D))[0]
    assert key_patterns.keys_by_tile(right, k) is None


def groups_merged_unscaled(inp: ProbeInput, m: int = 64, G: int = 16) -> np.ndarray:
    """set43's s04: 4 warps split each 64-key tile, warp u the keys j mod 64 in [16u, 16u + 16), each
    with its own max and sum, the partials merged without their factors exp(m_u - M)."""
    q, k, v = (a.astype(np.float64) for a in (inp.q, inp.k, inp.v))
    s = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1])
    group = (np.arange(k.shape[1]) % m) // G
    o, l = 0.0, 0.0
    for u in range(m // G):
        su = np.where(group == u, s, -np.inf)
        p = np.exp(su - su.max(axis=2, keepdims=True))
        o, l = o + p @ v, l + p.sum(axis=2, keepdims=True)
    return (o / l).astype(np.float32)


def test_groups_of_keys_merged_otherwise_are_said_by_group_and_not_called_rows_never_loaded():
    k = score_inputs.coded_keys(N, D)
    terms, _ = score_inputs.read_terms(score_inputs.weights_by_dim(
        groups_merged_unscaled(score_inputs.design(N, D, k)).astype(np.float64), N, D))
    said = key_patterns.keys_by_group(terms, k)
    assert said is not None and said.startswith(
        "with key 0 read right, the keys j with j mod 64 in {0-15} take their terms right, and each other group of "
        "16 (j mod 64 in 16-31, 32-47, 48-63) theirs too but for one constant a dim and group"), said
    assert key_patterns.keys_by_group(*score_inputs.read_terms(score_inputs.weights_by_dim(
        halves_merged_unscaled(score_inputs.design(N, D, k)).astype(np.float64), N, D))[:1], k) is None
