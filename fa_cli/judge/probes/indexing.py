"""Which elements of the input the program read: a search over small families of index formulas.

The input holds Q_0 K_0 V_0 Q_1 ... (each N x d, row-major). A program that reads a matrix with
another formula reads element (i, x) of Q_b, K_b or V_b at base_b + i * row_stride + x *
col_stride of the payload. The search computes softmax(Q' K'^T / sqrt(d)) V' for each reading
in the families below (one matrix changed at a time, or the whole layout) and names the one that
gives the program's output on the probe input:

  strides   (d, 1) as it should; (1, N): read as d x N (transposed); (N, 1): a row stride of N;
            (P, 1): rows of a pitch fixed at 16, 32, 64 or 128 (one matrix, or all three)
  bases     Q_b, K_b, V_b swapped with each other; batch 0 for every batch; a batch stride of N*d
            (not 3*N*d); the batch before or after; all Q first, then all K, then all V; the
            matrix's start one row early or late; b*N rows past it (the flat row b*N + i)
  rows      row j read as j +- 1, 2, 4, ..., 64, or within tiles of any T from 2 to 128: j % T (the
            tile's start left out), j // T + j % T (the tile's number for its start), j - j % T
            (the tile's first row), (j - j % T) * d + j % T floats (the place in the tile counted
            in floats); each reading tried on a few rows first, then on the whole probe
  whole     the input cut with B and N swapped; each batch read as rows of [q k v]; the whole input
            read 3 floats early (the header taken as data); read by a kernel built for another d (a dispatch on
            d that launches another kernel), on the whole input or batch by batch, the output it
            does not write said as it is; Q's or K's dims past a warp read modulo 16 or 32; each
            row's scores from q summed over a group of rows
"""
from __future__ import annotations

import itertools

import numpy as np

from ..findings import Finding
from .readings import measured
from .step import Context, Probe, guard_payload, logits, softmax_rows

MATCH_SHARE = 0.99
ROLES = ("Q", "K", "V")
MAX_TILE = 128  # row maps are tried within tiles of every size from 2 to this
ROW_SHIFTS = (2, 4, 8, 16, 32, 64)  # rows read this many rows off, besides 1
SCREEN_ROWS = 24  # query rows of batch 0 a reading is tried on first, before the whole probe


def strides(N: int, d: int) -> dict[str, tuple[int, int]]:
    """The strides tried, by name; a stride two names give (4*d = N) is said with both."""
    float4 = "a float4 pointer indexed with a row's length in floats, j*d, where j*d/4 belongs"
    if 4 * d == N:  # one reading, two mistakes: said as both
        return {"": (d, 1), "read as d x N (element (i, x) at x*N + i)": (1, N),
                f"read with a row stride of {N} floats (element (i, x) at i*{N} + x): N, or 4*d ({float4}): "
                "4*d = N on this input, which cannot tell them apart": (N, 1)}
    found = {"": (d, 1), "read as d x N (element (i, x) at x*N + i)": (1, N),
             "read with a row stride of N (element (i, x) at i*N + x)": (N, 1),
             f"read with a row stride of 4*d (element (i, x) at i*4*d + x: {float4})": (4 * d, 1)}
    for P in FIXED_PITCHES:
        if P not in (d, N, 4 * d):
            found[fixed_pitch(P)] = (P, 1)
    return found


FIXED_PITCHES = (16, 32, 64, 128)  # a row pitch fixed in the source (an array's size, a head dimension)


def fixed_pitch(P: int) -> str:
    return f"read with rows of {P} floats (element (i, x) at i*{P} + x: a row pitch fixed at {P}, e.g. an array's " \
        "size or another head dimension, where d belongs)"


def bases(B: int, N: int, d: int, role: int) -> dict[str, np.ndarray]:
    """Each batch's base offset of one matrix, by name; the right one is named ''."""
    b = np.arange(B)
    nd = N * d
    found = {"": b * 3 * nd + role * nd,
             "from batch 0 in every batch (no batch offset)": np.full(B, role * nd),
             "with a batch stride of N*d, not 3*N*d": b * nd + role * nd,
             "from the batch after (b + 1)": (b + 1) * 3 * nd + role * nd,
             "from the batch before (b - 1)": (b - 1) * 3 * nd + role * nd,
             "from the planar layout (all Q, then all K, then all V)": role * B * nd + b * nd,
             "at its batch's place plus b*N rows (the flat row b*N + i, the output's row index, used where the "
             "batch's own row i belongs)": b * 3 * nd + role * nd + b * nd,
             "starting one row late (+d)": b * 3 * nd + role * nd + d,
             "starting one row early (-d)": b * 3 * nd + role * nd - d}
    for other in range(3):
        if other != role:
            found[f"from {ROLES[other]}'s place"] = b * 3 * nd + other * nd
    if role > 0:  # a pointer to the matrix before it advanced by N floats, not N rows
        found[f"N floats after {ROLES[role - 1]}_b's start (a pointer advanced by N where N*d belongs)"] = \
            b * 3 * nd + (role - 1) * nd + N
    return found


def row_maps(N: int, d: int) -> dict[str, np.ndarray]:
    """Where a program reads row j of a matrix, in floats from the matrix's start, by name: a row
    off by one, or within tiles of T rows or keys (any T from 2 to 128) the tile's start left out,
    the tile's number where its start belongs, every row read as the tile's first, or the row's
    place in its tile counted in floats, not rows (the right map, j * d, left out)."""
    j = np.arange(N)
    found = {"row j + 1": (j + 1) * d, "row j - 1": (j - 1) * d}
    for s in ROW_SHIFTS:  # a warp's or tile's offset added where it was already in the row (or left out)
        found[f"row j + {s} (past the matrix's end into the next one)"] = (j + s) * d
        found[f"row j - {s}"] = (j - s) * d
    for T in range(2, min(MAX_TILE, N - 1) + 1):
        start, within = j - j % T, j % T
        found[f"row j % {T} (the tile's start left out of the row index, tiles of {T})"] = within * d
        found[f"row j // {T} + j % {T} (the tile's number where its start j - j % {T} belongs)"] = \
            (j // T + within) * d
        found[f"row j - j % {T} (every row of a tile of {T} read as its first)"] = start * d
        found[f"row j - j % {T} at offset j % {T} (the row's place in its tile of {T} counted in floats, "
              "not rows: (j - j % T) * d + j % T)"] = start * d + within
    return found


def gather(flat: np.ndarray, base: np.ndarray, stride: tuple[int, int], N: int, d: int,
           offsets: np.ndarray | None = None):
    """(B, N, d) read with these bases and strides (row j read from offsets[j], in floats, where
    given), and which batches stay inside the payload."""
    offsets = np.arange(N) * stride[0] if offsets is None else offsets
    idx = base[:, None, None] + offsets[None, :, None] + np.arange(d)[None, None, :] * stride[1]
    inside = ((idx >= 0) & (idx < flat.size)).all(axis=(1, 2))
    return flat[np.clip(idx, 0, flat.size - 1)].astype(np.float64), inside


def readings(flat: np.ndarray, B: int, N: int, d: int):
    """(words, Q', K', V', batches inside) for every reading of the families, the right one left out."""
    right = [gather(flat, bases(B, N, d, r)[""], (d, 1), N, d)[0] for r in range(3)]
    for role in range(3):
        for (bw, base), (sw, stride) in itertools.product(bases(B, N, d, role).items(), strides(N, d).items()):
            if not bw and not sw:
                continue
            m, inside = gather(flat, base, stride, N, d)
            mats = list(right)
            mats[role] = m
            words = f"{ROLES[role]}_b " + " and ".join(w if w.startswith("read") else f"read {w}"
                                                        for w in (bw, sw) if w)
            yield words, *mats, inside
    for role in range(3):
        for words, offsets in row_maps(N, d).items():
            m, inside = gather(flat, bases(B, N, d, role)[""], (d, 1), N, d, offsets)
            mats = list(right)
            mats[role] = m
            yield f"{ROLES[role]}_b's row j read as {words}", *mats, inside
    for order in itertools.permutations(range(3)):
        if order == (0, 1, 2):
            continue
        moved = [ROLES[r] for r in range(3) if order[r] != r]
        words = " and ".join(f"{ROLES[r]}_b read from {ROLES[order[r]]}'s place" for r in range(3) if order[r] != r)
        yield f"{' and '.join(moved)} swapped ({words})", right[order[0]], right[order[1]], right[order[2]], \
            np.ones(B, dtype=bool)
    for bw in ("from batch 0 in every batch (no batch offset)", "with a batch stride of N*d, not 3*N*d",
               "from the planar layout (all Q, then all K, then all V)"):
        got = [gather(flat, bases(B, N, d, r)[bw], (d, 1), N, d) for r in range(3)]
        inside = np.logical_and.reduce([g[1] for g in got])
        yield f"Q_b, K_b and V_b all read {bw}", got[0][0], got[1][0], got[2][0], inside
    for P in FIXED_PITCHES:
        if P != d:
            got = [gather(flat, bases(B, N, d, r)[""], (P, 1), N, d) for r in range(3)]
            inside = np.logical_and.reduce([g[1] for g in got])
            yield f"Q_b, K_b and V_b all {fixed_pitch(P)}", got[0][0], got[1][0], got[2][0], inside


ROW_GROUPS = (2, 4, 8)  # rows a reduction's lanes may span where they should span one


def whole_readings(flat: np.ndarray, B: int, N: int, d: int):
    """(words, output) of readings that are no index formula of one matrix: the whole input cut with
    B and N swapped (a launch or call given (N, B) for (B, N)), written on as the right sizes' is;
    each row's scores from the sum of q over an aligned group of G rows (a reduction across lanes
    that spans G rows where it should span one: every row of a group gets the same output)."""
    with np.errstate(over="ignore", invalid="ignore"):
        if B != N:
            qkv = flat.reshape(N, 3, B, d).astype(np.float64)
            o = np.matmul(softmax_rows(logits(qkv[:, 0], qkv[:, 1])), qkv[:, 2])
            yield ("the sizes B and N swapped (the input cut as N batches of B rows: a kernel or function given N "
                   "for B and B for N)"), o.reshape(B, N, d)
        packed = flat.reshape(B, N, 3, d).transpose(0, 2, 1, 3)  # each row's q, k, v side by side
        yield ("each batch read as N rows of [q k v], 3*d floats a row (q_i at 3*i*d, k_j at 3*j*d + d, v_j at "
               "3*j*d + 2*d), where the input holds Q, K and V as three N x d matrices"), attend(packed)
        header = np.array([B, N, d], dtype="<i4").view("<f4")  # the file's first 12 bytes, read as floats
        early = np.concatenate([header, flat.ravel()[:-3]]).reshape(B, 3, N, d)
        yield ("the whole input read 3 floats early: the file's 12-byte header (B, N, d) taken as the first values "
               "(the data given from the file's start where it begins after the header)"), attend(early)
        qkv = flat.reshape(B, 3, N, d).astype(np.float64)
        for lanes in (16, 32):  # a dim past the lanes read as dim x mod lanes: a lane index that wraps
            if d > lanes:
                for role in (0, 1):
                    read = qkv[:, :3].copy()
                    read[:, role] = read[:, role][..., np.arange(d) % lanes]
                    o = np.matmul(softmax_rows(logits(read[:, 0], read[:, 1])), read[:, 2])
                    yield (f"{ROLES[role]}'s dim x read as dim x mod {lanes} (its first {lanes} dims again in dims "
                           f"{lanes} on: a lane or shuffle source that wraps at {lanes}, e.g. __shfl_sync(mask, v, x) "
                           f"with x past the warp, or a lane's registers of dims lane, lane + {lanes}, ... read at "
                           "the first where a later one belongs)"), o
        for G in ROW_GROUPS:
            if N % G == 0 and N > G:
                q = np.repeat(qkv[:, 0].reshape(B, N // G, G, d).sum(axis=2), G, axis=1)
                yield (f"each row's scores taken from the sum of q over its aligned group of {G} rows (rows "
                       f"{G}i .. {G}i + {G - 1} alike: a reduction across lanes that spans {G} rows' lanes where it "
                       "should span one row's, e.g. a butterfly that starts at an offset too large)"), \
                    np.matmul(softmax_rows(logits(q, qkv[:, 1])), qkv[:, 2])


OTHER_DIMS = (16, 32, 64, 128)  # the head dimensions a kernel may be built for
KNOWN_SHARE = 0.25  # a reading that says less of the output than this is not tried


UNWRITTEN = "which that kernel does not write"  # the output a reading does not say (known False): why


def other_d_readings(flat: np.ndarray, B: int, N: int, d: int):
    """(words, output, known, what the rest is) of the input read by a kernel built for another head dimension d2 (a
    dispatch on d that launches the d2 kernel, or d fixed at d2): rows of d2 floats, the whole input
    as one call or each batch's from its start, the output written from the start at d2 floats a
    row; known: the values it writes."""
    per_call = 3 * N
    for d2 in OTHER_DIMS:
        if d2 == d:
            continue
        fit = min(B, flat.size // (per_call * d2))  # batches of d2-float rows inside the input
        if fit:
            o, known = np.zeros(B * N * d), np.zeros(B * N * d, dtype=bool)
            whole = attend(flat[:fit * per_call * d2].reshape(fit, 3, N, d2)).ravel()[:o.size]
            o[:whole.size], known[:whole.size] = whole, True
            yield (f"the input read by a kernel for d = {d2} (rows of {d2} floats, a batch every 3*N*{d2}: a "
                   f"dispatch on d that launches the d = {d2} kernel, or d fixed at {d2}), its values written from "
                   f"the output's start at {d2} a row"), o.reshape(B, N, d), known.reshape(B, N, d), UNWRITTEN
        if d2 < d:
            blocks = flat.reshape(B, per_call * d)[:, :per_call * d2].reshape(B, 3, N, d2)
            o, known = np.zeros((B, N * d)), np.zeros((B, N * d), dtype=bool)
            o[:, :N * d2], known[:, :N * d2] = attend(blocks).reshape(B, N * d2), True
            yield (f"each batch's input read by a kernel for d = {d2} from the batch's start (rows of {d2} floats: a "
                   f"dispatch on d that launches the d = {d2} kernel for each batch or group of batches), its "
                   f"N*{d2} values written at the start of the batch's output"), o.reshape(B, N, d), \
                known.reshape(B, N, d), UNWRITTEN


ROW_PLACED = {  # which matrices row i reads from its own place on: (K, V)
    (True, True): "K_b and V_b read from the query row's own place: row i's key j is the row i + j from K_b's start "
                  "and its value the row i + j from V_b's start, past their ends into the next matrix (K and V "
                  "pointers made from row i's Q pointer, which holds i*d already: q + N*d where the batch's "
                  "base belongs)",
    (True, False): "K_b read from the query row's own place: row i's key j is the row i + j from K_b's start, past "
                   "its end into V_b (a K pointer made from row i's Q pointer, which holds i*d already: q + N*d "
                   "where the batch's base belongs); V_b right",
    (False, True): "V_b read from the query row's own place: row i's value j is the row i + j from V_b's start, past "
                   "its end into the next batch's Q (a V pointer made from row i's Q pointer, which holds i*d "
                   "already: q + 2*N*d where the batch's base belongs); K_b right",
}


def row_placed_readings(flat: np.ndarray, B: int, N: int, d: int):
    """(words, output, known, what the rest is) of K, V or both read from each query row's own
    place (ROW_PLACED); flat: the payload and whatever follows it in the input; known: the rows
    whose reads stay in it. Row i's N rows from its own place are a sliding window (no copy)."""
    rows = flat.size // d
    payload = np.concatenate([flat[:rows * d].reshape(rows, d), np.zeros((2 * N, d))]).astype(np.float64)

    def read(start: int, placed: bool) -> tuple[np.ndarray, np.ndarray]:
        """(N, d, N): row i's N rows (from start + i where placed, else start), and which rows stay inside."""
        if not placed:
            return np.broadcast_to(payload[start:start + N].T, (N, d, N)), np.full(N, start + N <= rows)
        window = np.lib.stride_tricks.sliding_window_view(payload[start:start + 2 * N - 1], N, axis=0)
        return window, start + np.arange(N) + N <= rows
    for (k_placed, v_placed), words in ROW_PLACED.items():
        o, known = np.zeros((B, N, d)), np.zeros((B, N, d), dtype=bool)
        for b in range(B):
            q_row = b * 3 * N
            (keys, k_inside), (values, v_inside) = read(q_row + N, k_placed), read(q_row + 2 * N, v_placed)
            with np.errstate(over="ignore", invalid="ignore"):
                s = np.einsum("ix,ixj->ij", payload[q_row:q_row + N], keys) / np.sqrt(d)
                o[b] = np.einsum("ij,ixj->ix", softmax_rows(s), values)
            known[b, k_inside & v_inside] = True
        yield words, o, known, "whose rows read past the input"


def attend(qkv: np.ndarray) -> np.ndarray:
    """(B, N, d) float64 attention of a (B, 3, N, d) block."""
    qkv = qkv.astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        return np.matmul(softmax_rows(logits(qkv[:, 0], qkv[:, 1])), qkv[:, 2])


def says(close: np.ndarray, known: np.ndarray, wrong: np.ndarray) -> bool:
    """Whether a reading close to the output on these values says it: on MATCH_SHARE of the values
    it knows, and of the wrong values among them (at least one): a reading that is the right one
    where it can be checked (a batch offset of b*N rows in batch 0 alone) says nothing."""
    return (close[known].mean() >= MATCH_SHARE and (wrong & known).any()
            and close[wrong & known].mean() >= MATCH_SHARE)


def search(ctx_out: np.ndarray, flat: np.ndarray, B: int, N: int, d: int, tol: float, after: np.ndarray | None = None):
    """The first reading whose output agrees with the program's on MATCH_SHARE of the values of the
    batches it can say (at least one), and on the batches the right reading gets wrong. A whole
    reading may say part of the output (known): the rest is said as it is. after: what the input
    holds past the payload (its guard batches), for the readings that run past it."""
    got = ctx_out.astype(np.float64)
    right = attend(flat.reshape(B, 3, N, d))
    with np.errstate(invalid="ignore"):
        wrong = ~(np.abs(right - got) <= tol)  # the values a reading must say: the right reading does not
    whole = [(words, o, np.ones(o.shape, dtype=bool), "") for words, o in whole_readings(flat, B, N, d)]
    placed = row_placed_readings(flat if after is None else np.concatenate([flat, after.ravel()]), B, N, d)
    for words, o, known, rest_is in (*whole, *other_d_readings(flat, B, N, d), *placed):
        if known.mean() < KNOWN_SHARE:
            continue
        with np.errstate(invalid="ignore"):
            close = np.abs(o - got) <= tol / 5 + 1e-3 * np.abs(o)
        if says(close, known, wrong):
            rest = got[~known]
            if rest.size:
                words += f"; the other {rest.size} values of the output, {rest_is}, hold " + \
                    ("0" if not rest.any() else "other values")
            return words, B
    rows = np.unique(np.r_[np.arange(min(SCREEN_ROWS // 2, N)), np.arange(max(0, N - SCREEN_ROWS // 2), N)])
    wrong_batches = wrong.any(axis=(1, 2))  # a reading must say one of these
    for words, q, k, v, inside in readings(flat, B, N, d):
        if not (inside & wrong_batches).any():
            continue
        first = int(np.argmax(inside & wrong_batches))  # a quick look on a few rows of a wrong batch, then all
        with np.errstate(over="ignore", invalid="ignore"):
            o = np.matmul(softmax_rows(logits(q[first:first + 1, rows], k[first:first + 1])), v[first:first + 1])
        if np.mean(np.abs(o - got[first:first + 1, rows]) <= tol / 5 + 1e-3 * np.abs(o)) < MATCH_SHARE:
            continue
        with np.errstate(over="ignore", invalid="ignore"):
            o = np.matmul(softmax_rows(logits(q[inside], k[inside])), v[inside])
        close = np.zeros(got.shape, dtype=bool)
        close[inside] = np.abs(o - got[inside]) <= tol / 5 + 1e-3 * np.abs(o)
        if says(close, np.broadcast_to(inside[:, None, None], got.shape), wrong):
            return words, int(inside.sum())
    return None


class InputReading(Probe):
    """Whether the program's output is attention of other elements of the input."""

    name = "index formulas for Q, K and V"

    def applies(self, ctx: Context) -> bool:
        return ctx.facts.out is not None and not ctx.facts.named

    def run(self, ctx: Context) -> list[Finding]:
        B, N, d = ctx.probe.shape.B, ctx.probe.shape.N, ctx.probe.shape.d
        found = search(ctx.facts.out, ctx.probe.flat(), B, N, d, ctx.tol, guard_payload(ctx.guard, N, d))
        if not found:
            return []
        words, batches = found
        said = "" if batches == B else f" (in the {batches} of {B} batches whose reading stays inside the input)"
        wraps = next((look for role, look in WRAP_LOOK.items() if words.startswith(f"{role}'s dim x read as")), None)
        return measured(ctx, [f"measured: the output is attention with {words}{said}: the output on {ctx.probe.label} "
                              "is that, value for value; look at that index expression"], look=wraps, reading=words)


# where a lane reads its own dims of q or k (`qr[0]`, `q[lane]`, `Ks[jj][lane]`; not a declaration such as
# `float q[4];`), or a shuffle that may take them from another lane
DECLARED = r"(?<!float )(?<!half )(?<!int )(?<!__shared__ float )"
WRAP_LOOK = {"Q": ("Q's elements a lane reads, or its shuffles",
                   DECLARED + r"\b[qQ]\w*\s*\[\s*(?:\d+|lane)\s*\]|__shfl\w*\s*\("),
             "K": ("K's elements a lane reads, or its shuffles",
                   DECLARED + r"\b[kK]\w*\s*(?:\[[^\]]*\]\s*)?\[\s*(?:\d+|lane)\s*[\]+]|__shfl\w*\s*\(")}
