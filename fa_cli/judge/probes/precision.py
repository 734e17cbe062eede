"""Whether a wrong output is a lower precision's rounding rather than a wrong formula: the probe's
output against float64 attention with one part rounded to fp16, bf16 or tf32 (the inputs, Q and K
of the scores' product, K and V (tiles kept in the format), Q alone, Q after its 1/sqrt(d) scale, K
alone, V alone,
each score once it is summed and scaled, P before P V, the output, the row max the weights use; an
online softmax's running sum or accumulator, rounded key after key; the scores' dot product summed in the
format dim after dim, by fused multiply-adds or by products rounded and added, q scaled before or
the sum after); or the scores kept in an int (each truncated, or summed in an int). A rounding
that gives the output to a fraction of its error against float64 is
named; where none does but the error is the size of a format's rounding (its median relative error
within a factor of 4 of the unit roundoff, and all but a few values within 64 of them), that is
said as measured."""
from __future__ import annotations

import itertools

import numpy as np

from ..findings import Finding, Kind
from .partial_sums import tile_maxima
from .readings import measured
from .step import Context, Probe, fmt, logits, softmax_rows

# The formats a GPU program may compute in, by their unit roundoff (half an ulp of 1).
UNIT_ROUNDOFF = {"fp16": 2.0 ** -11, "bf16": 2.0 ** -8, "tf32": 2.0 ** -11}
MATCH = 0.2  # a rounding is named where the output misses it by at most this share of its error against float64
TYPICAL_MATCH = 0.02  # and its median miss by at most this share of the median error: a rounding that is the
# program's matches nearly every value to float32's noise (a few may differ: a truncation flipped at a boundary)
# Where a source computes in a lower precision: its types, conversions and tensor-core fragments.
LOOK = r"\b(__half2?|half|__nv_bfloat16|bfloat16|_Float16|__float2half\w*|__float2bfloat16\w*|wmma|tf32)\b"
SIZE_FACTOR = 4.0  # an error "the size of a format's rounding": median relative error within this factor
WORST_SHARE, WORST = 0.999, 64  # all but 0.1% of the values within this many unit roundoffs: no few far off


def rounded(x: np.ndarray, form: str) -> np.ndarray:
    """x (float64) rounded to the format, to nearest even, back in float64: from float32, as a
    program converts a float it computed (float64 to float32 to the format: a tie of the format
    that float32 already rounded away is decided as the program decides it)."""
    if form == "fp16":
        return x.astype(np.float32).astype(np.float16).astype(np.float64)
    drop = {"bf16": 16, "tf32": 13}[form]  # float32 mantissa bits the format does not keep
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    half, keep = 1 << (drop - 1), ~((1 << drop) - 1) & 0xFFFFFFFF
    bits = (bits + half - 1 + ((bits >> drop) & 1)) & keep
    return bits.astype(np.uint32).view(np.float32).astype(np.float64)


def attention(q, k, v, form: str, part: str) -> np.ndarray:
    """float64 attention with `part` rounded to the format."""
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    if part == "inputs":
        q, k, v = rounded(q, form), rounded(k, form), rounded(v, form)
    if part == "scores":
        q, k = rounded(q, form), rounded(k, form)
    if part == "keys and values":
        k, v = rounded(k, form), rounded(v, form)
    if part == "query":
        q = rounded(q, form)
    if part == "keys":
        k = rounded(k, form)
    if part == "values":
        v = rounded(v, form)
    if part == "scaled query":  # q * (1/sqrt(d)) in float32, then kept in the format: the scale is in q
        scale = np.float32(1.0 / np.sqrt(q.shape[-1]))
        q = rounded((q.astype(np.float32) * scale).astype(np.float64), form) / np.float64(scale)
    s = logits(q, k)
    if part == "row max":  # m stored in the format for the weights, l summed against the exact m
        m = s.max(axis=-1, keepdims=True)
        return np.matmul(np.exp(s - rounded(m, form)) / np.exp(s - m).sum(axis=-1, keepdims=True), v)
    p = softmax_rows(rounded(s, form) if part == "score values" else s)
    if part == "weights":
        p, v = rounded(p, form), rounded(v, form)
    out = np.matmul(p, v)
    return rounded(out, form) if part == "output" else out


def online(q, k, v, form: str, part: str) -> np.ndarray:
    """float64 online softmax, key after key as one thread of a row adds them, with the running sum
    l ("sum") or the output accumulator ("accumulator") kept in the format: rounded at every step.
    The part not kept is exact, so only the kept one is carried key by key."""
    s = logits(q.astype(np.float64), k.astype(np.float64))  # (B, N, N)
    v = v.astype(np.float64)
    last = s.max(axis=2)
    m = np.maximum.accumulate(s, axis=2)  # the running max after each key
    before = np.concatenate([np.full(s.shape[:2] + (1,), -np.inf), m[:, :, :-1]], axis=2)
    alpha, p = np.exp(before - m), np.exp(s - m)  # the rescale of what was kept, and key j's weight
    if part == "sum":
        l = np.zeros(s.shape[:2])
        for j in range(s.shape[2]):
            l = rounded(l * alpha[:, :, j] + p[:, :, j], form)
        return np.matmul(np.exp(s - last[..., None]), v) / l[..., None]  # l is relative to the last max too
    acc = np.zeros(s.shape[:2] + v.shape[-1:])
    for j in range(s.shape[2]):
        acc = rounded(acc * alpha[:, :, j, None] + p[:, :, j, None] * v[:, j, None, :], form)
    return acc / np.exp(s - last[..., None]).sum(axis=2)[..., None]


def dot_in(q, k, v, form: str, part: str) -> np.ndarray:
    """float64 attention whose scores' dot product runs in the format, dim after dim, as one thread
    sums it: q scaled by 1/sqrt(d) before (or the sum after); each step either a fused multiply-add
    of rounded q and k rounded once ("fma"), or the float product rounded and then added ("sum")."""
    d = q.shape[-1]
    scale = 1.0 / np.sqrt(d)
    before = part.endswith("before")
    # q scaled and each product taken in float32, as the program does before it converts: a tie of the
    # format decided in float64 instead would move a score by a unit in one of every few thousand
    q, k = q.astype(np.float32) * np.float32(scale if before else 1.0), k.astype(np.float32)
    halves = 2 if part.startswith("fma2") else 1  # __hfma2: even and odd dims in a pair's two halves, added last
    s = np.zeros((halves,) + q.shape[:2] + k.shape[1:2])
    for x in range(d):
        qx, kx = q[:, :, None, x], k[:, None, :, x]
        step = rounded(qx, form) * rounded(kx, form) if part.startswith("fma") else rounded(qx * kx, form)
        s[x % halves] = rounded(s[x % halves] + step, form)
    return np.matmul(softmax_rows(s.sum(axis=0) * (1.0 if before else scale)), v.astype(np.float64))


def whole_scores(q, k, v, part: str) -> np.ndarray:
    """float64 attention with the scores kept in an int: each score truncated toward zero
    ("scores"), or the dot product summed in an int, every partial sum truncated (q scaled first,
    or the sum scaled after); the products themselves in float32, as a float times a float is."""
    d = q.shape[-1]
    scale = 1.0 / np.sqrt(d)
    if part == "scores":
        return np.matmul(softmax_rows(np.trunc(logits(q.astype(np.float64), k.astype(np.float64)))),
                         v.astype(np.float64))
    before = part == "int sum before"
    q, k = q.astype(np.float32) * np.float32(scale if before else 1.0), k.astype(np.float32)
    s = np.zeros(q.shape[:2] + k.shape[1:2])
    for x in range(d):
        s = np.trunc(s + (q[:, :, None, x] * k[:, None, :, x]).astype(np.float64))
    return np.matmul(softmax_rows(s * (1.0 if before else scale)), v.astype(np.float64))


def cut(x: np.ndarray, form: str) -> np.ndarray:
    """x (float64) taken to float32, then to the format toward zero (the low bits dropped, as a
    program that keeps a float's high 16 bits for bf16 does), back in float64."""
    x32 = x.astype(np.float32)
    if form == "fp16":
        near = x32.astype(np.float16)
        over = np.abs(near.astype(np.float32)) > np.abs(x32)
        return np.where(over, np.nextafter(near, np.float16(0)), near).astype(np.float64)
    drop = {"bf16": 16, "tf32": 13}[form]
    bits = x32.view(np.uint32) & np.uint32(~((1 << drop) - 1) & 0xFFFFFFFF)
    return bits.view(np.float32).astype(np.float64)


# The weights p = exp(s - m) kept in a format for P V: m the running max as far as each key's tile
# (key tiles of 1, 16, 32, 64 or the whole row), rounded to nearest or cut toward zero, and l summed
# from the weights so kept or from the floats before.
KEPT_TILES = (1, 16, 32, 64, None)


def kept_weights(q, k, v):
    """((format, how), float64 attention whose weights are kept in the format) for each way of
    keeping them, how = (tile, cut, l from the kept weights); each tile's weights brought to the
    row's last max exactly (a rescale). The scores and the running max are taken once a tile."""
    s = logits(q.astype(np.float64), k.astype(np.float64))
    v = v.astype(np.float64)
    keys = s.shape[-1]
    for tile in KEPT_TILES:
        size = tile or keys
        _, running, final, _ = tile_maxima(s, size)
        m = running[:, :, np.arange(keys) // size]  # the running max each key's weight is taken against
        p, to_last = np.exp(s - m), np.exp(m - final)
        for form, toward_zero in itertools.product(("bf16", "fp16"), (False, True)):
            kept = (cut if toward_zero else rounded)(p, form)
            out = np.matmul(kept * to_last, v)
            for l_kept in (False, True):
                l = ((kept if l_kept else p) * to_last).sum(axis=-1, keepdims=True)
                yield (form, (tile, toward_zero, l_kept)), out / l


def kept_words(form: str, how: tuple) -> str:
    tile, toward_zero, l_kept = how
    against = ("the running max as far as each key" if tile == 1 else
               f"the running max as far as each key tile of {tile}" if tile else "the row's max")
    return (f"the weights p = exp(s - m), m {against}, {'cut toward zero' if toward_zero else 'rounded'} to {form} "
            f"{'(the low bits dropped) ' if toward_zero else ''}for P V, V in float32, and l summed from "
            f"{'those kept weights' if l_kept else 'the float weights before'}")


WHOLE = {"scores": "the scores truncated to whole numbers (an int)",
         "int sum before": "the scores' dot product summed in an int, each partial sum truncated (q scaled first)",
         "int sum after": "the scores' dot product summed in an int, each partial sum truncated (scaled after)"}


def simulated(q, k, v, form: str, part: str) -> np.ndarray:
    if form == "int":
        return whole_scores(q, k, v, part)
    if part in RUNNING:
        return online(q, k, v, form, part)
    return dot_in(q, k, v, form, part) if part in DOT else attention(q, k, v, form, part)


PARTS = {"inputs": "Q, K and V", "scores": "Q and K of the scores' product",
         "keys and values": "K and V (tiles of keys and values kept in it, Q not)",
         "query": "Q (the query row kept in it, K and V not)",
         "keys": "K (the key tiles kept in it, Q and V not: the scores' other operand)",
         "values": "V (the value tiles kept in it, Q and K not)",
         "score values": "each score q . k / sqrt(d) (a scores buffer or register kept in it, the sum in float32)",
         "scaled query": "Q scaled by 1/sqrt(d) (the query row kept in it after its scale, K and V not)",
         "weights": "P and V of the product P V",
         "output": "the output",
         "row max": "the row's max m as the weights use it (l summed against the exact max, as where m is stored "
                    "for a later kernel or pass)",
         "sum": "the softmax's running sum l, key after key,",
         "accumulator": "the output's running accumulator, key after key,",
         "fma before": "the scores' dot product, dim after dim (q scaled first; q, k and each fused multiply-add",
         "sum before": "the scores' dot product, dim after dim (q scaled first; each product and each sum",
         "fma after": "the scores' dot product, dim after dim (scaled after; q, k and each fused multiply-add",
         "sum after": "the scores' dot product, dim after dim (scaled after; each product and each sum",
         "fma2 before": "the scores' dot product in pairs of dims, even and odd dims summed apart and added last, as "
                        "__hfma2 does (q scaled first; q, k and each fused multiply-add",
         "fma2 after": "the scores' dot product in pairs of dims, even and odd dims summed apart and added last, as "
                       "__hfma2 does (scaled after; q, k and each fused multiply-add"}
# the scores summed in the format, one dim at a time (or a pair of dims at a time)
DOT = ("fma before", "sum before", "fma after", "sum after", "fma2 before", "fma2 after")
RUNNING = ("sum", "accumulator")  # kept in the format as they run, not rounded once
SOME_ROWS = RUNNING + DOT  # simulated step by step: on the first ONLINE_ROWS rows of each batch
ONLINE_ROWS = 64  # rows of each batch a part kept key after key is simulated on


class Precision(Probe):
    """The probe's output against float64 attention with one part rounded to a lower precision."""

    name = "a lower precision's rounding"

    def applies(self, ctx: Context) -> bool:
        return not ctx.facts.named and ctx.facts.out is not None and bool(np.isfinite(ctx.facts.out).all())

    def run(self, ctx: Context) -> list[Finding]:
        said, named = read(ctx.facts.out.astype(np.float64), ctx.facts.true, ctx.probe)
        if said is None:
            return []
        if named:
            return measured(ctx, [f"probe: {said}"], look=("a lower precision", LOOK))
        return [Finding(Kind.OBSERVED, [f"probe: {said}"])]


def miss_of(out: np.ndarray, true: np.ndarray, model: np.ndarray) -> float:
    """How far out is from a rounding's model: its largest miss, or inf where its median miss is
    more than TYPICAL_MATCH of the median error (a model that is the program's fits nearly every
    value; one that only lands nearer than float64, as any near-uniform weights may, fits few)."""
    gap = np.nan_to_num(np.abs(out - model), nan=np.inf)
    return float(gap.max()) if np.median(gap) <= TYPICAL_MATCH * np.median(np.abs(out - true)) else np.inf


def read(out: np.ndarray, true: np.ndarray, inp) -> tuple[str | None, bool]:
    """(what to say, whether it names the rounding) of an output against its true value. A part kept
    key after key (or dim after dim) is simulated on the first ONLINE_ROWS rows of each batch (its keys all): its cost
    grows with N * N * d, one key at a time."""
    rows = slice(0, ONLINE_ROWS)
    misses = {}  # (format, part): (its miss, float64's miss on the same rows)
    for form in UNIT_ROUNDOFF:
        for part in PARTS:
            q, o, t = (inp.q[:, rows], out[:, rows], true[:, rows]) if part in SOME_ROWS else (inp.q, out, true)
            with np.errstate(over="ignore", invalid="ignore"):  # a format's range passed: its miss is inf
                misses[(form, part)] = (miss_of(o, t, simulated(q, inp.k, inp.v, form, part)), np.abs(o - t).max())
    for part in WHOLE:
        q, o, t = (inp.q[:, rows], out[:, rows], true[:, rows]) if part != "scores" else (inp.q, out, true)
        misses[("int", part)] = (miss_of(o, t, simulated(q, inp.k, inp.v, "int", part)), np.abs(o - t).max())
    with np.errstate(over="ignore", invalid="ignore"):
        for key, model in kept_weights(inp.q, inp.k, inp.v):
            misses[key] = (miss_of(out, true, model), np.abs(out - true).max())
    (form, part), (miss, against) = min(misses.items(), key=lambda item: item[1][0] / max(item[1][1], 1e-30))
    if miss <= MATCH * against and form == "int":
        some = part != "scores" and out.shape[1] > ONLINE_ROWS
        on = f" (on the first {ONLINE_ROWS} rows of each batch)" if some else ""
        return (f"the output is float64 attention with {WHOLE[part]}: it misses that by at most {fmt(miss)}, "
                f"float64's by {fmt(against)}{on}"), True
    if miss <= MATCH * against and isinstance(part, tuple):
        return (f"the output is float64 attention with {kept_words(form, part)}: it misses that by at most "
                f"{fmt(miss)}, float64's by {fmt(against)}"), True
    if miss <= MATCH * against:
        # formats that give the output as closely (fp16 and tf32 keep the same bits in range): the
        # first of them in the table's order is named, the others said as the same here
        forms = [f for f in UNIT_ROUNDOFF if misses[(f, part)][0] <= max(1.5 * miss, 1e-9)]
        also = f" (or {', '.join(forms[1:])}: the same here)" if forms[1:] else ""
        how = "kept in" if part in RUNNING + ("row max",) else "in" if part in DOT else "rounded to"
        closing = ")" if part in DOT else ""
        some = part in SOME_ROWS and out.shape[1] > ONLINE_ROWS
        on = f" (on the first {ONLINE_ROWS} rows of each batch)" if some else ""
        words = PARTS[part]
        other = {"query": "scaled query", "scaled query": "query"}.get(part)
        if other and misses[(forms[0], other)][0] <= max(1.5 * miss, 1e-9):  # 1/sqrt(d) a power of 2: alike
            words = "Q, before or after its 1/sqrt(d) scale (the query row kept in it, K and V not; the two give the " \
                "same output at this d)"
        return (f"the output is float64 attention with {words} {how} {forms[0]}{closing}{also}: it misses that "
                f"by at most {fmt(misses[(forms[0], part)][0])}, float64's by {fmt(against)}{on}"), True
    if made := operand_fit(out, true, inp):
        return made, True
    scale = np.maximum(np.abs(true), np.abs(true).mean())
    relative = np.abs(out - true) / scale
    typical, worst = float(np.median(relative)), float(np.quantile(relative, WORST_SHARE))
    sizes = [f for f, u in UNIT_ROUNDOFF.items()
             if u / SIZE_FACTOR <= typical <= u * SIZE_FACTOR and worst <= u * WORST]
    if not sizes:
        return None, False
    return (f"the error is the size of {' or '.join(sorted(set(sizes)))} rounding (median relative error "
            f"{fmt(typical)}; unit roundoff {', '.join(f'{f} {fmt(UNIT_ROUNDOFF[f])}' for f in sorted(set(sizes)))}), "
            "but no rounding fa simulated (inputs, Q and K, K and V, Q alone or scaled, K alone, V alone, the scores, "
            "P and V, the "
            "output, the row max, the running sum, the accumulator, "
            "the scores' dot product summed in the format, the weights kept for P V rounded or cut against a running "
            "max, l from them or from the floats) "
            "gives the output"), False


# The operands of the two products, each rounded alone: Q as read, after 1/sqrt(d), after log2(e)/sqrt(d)
# (a base-2 softmax folds it into q), K, P before its division by l (as the product P V meets it), V.
QUERY_SCALES = {"Q": 1.0, "Q / sqrt(d)": None, "Q log2(e) / sqrt(d)": np.log2(np.e)}
FIT_SHARE = 0.2  # the fit's largest miss against the largest error: what MATCH asks of one rounding
WHOLE_FACTOR = 0.15  # a factor this close to a whole number is said as that number
FIT_ROWS = 128  # rows of each batch the operands' fit is made on
SPLIT_REVERSED = ("a hi/lo split (3xTF32 or 2xBF16) whose low part carries the rounding error with its sign "
                  "reversed: hi + lo = 2 hi - x, twice the error of plain rounding where none was meant (lo = x - hi, "
                  "written hi - x)")


def operand_errors(q, k, v, form: str, moved: tuple[str, float, float] | None = None) -> dict[str, np.ndarray]:
    """Each operand rounded to the format alone: the output's change against float64 attention.
    moved (Q's scaling, Q's factor, K's): P's rounding taken at the scores Q and K give with their
    rounding errors times those factors (P's rounding error depends on the very scores it rounds)."""
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    d = q.shape[-1]
    scaled = {name: (factor or 1.0) / (np.sqrt(d) if factor != 1.0 else 1.0) for name, factor in QUERY_SCALES.items()}
    changes, qk = {}, (q, k)
    s = logits(q, k)
    true = np.matmul(softmax_rows(s), v)
    for name, c in scaled.items():
        changes[name] = np.matmul(softmax_rows(logits(rounded(q * c, form) / c, k)), v) - true
    changes["K"] = np.matmul(softmax_rows(logits(q, rounded(k, form))), v) - true
    if moved:
        name, a_q, a_k = moved
        c = scaled[name]
        qk = (q + a_q * (rounded(q * c, form) / c - q), k + a_k * (rounded(k, form) - k))
    s = logits(*qk)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    l = p.sum(axis=-1, keepdims=True)
    changes["P"] = np.matmul(rounded(p, form) - p, v) / l
    changes["V"] = np.matmul(softmax_rows(logits(q, k)), rounded(v, form) - v)
    return changes


def fitted(error: np.ndarray, changes: dict, names: list[str]) -> tuple[float, float, np.ndarray]:
    """(largest miss, median miss, factors) of the error fitted as the named changes times factors."""
    X = np.stack([changes[n].ravel() for n in names], axis=1)
    factors = np.linalg.lstsq(X, error, rcond=None)[0]
    miss = np.abs(error - X @ factors)
    return float(miss.max()), float(np.median(miss)), factors


def operand_fit(out: np.ndarray, true: np.ndarray, inp) -> str | None:
    """Where no one rounding gives the output: its error as a sum of each operand's own rounding
    error times a factor, fitted (least squares) for each format and each way Q is scaled, then
    again with P's rounding taken at the scores the first fit gives, or without P (an online
    softmax rounds p against a running max, which moves its rounding); said where a fit leaves at
    most FIT_SHARE of the error and a median miss of at most FIT_SHARE of the median error, the
    factors whole numbers and one of them 2 or more (a factor of 2 on every operand: a split's low
    part reversed; 0s and 1s alone are a single rounding's, which the models before say). On the
    first FIT_ROWS rows of each batch: the fit's cost grows with them."""
    rows = slice(0, FIT_ROWS)
    error = (out[:, rows] - true[:, rows]).ravel()
    if not np.isfinite(error).all() or np.abs(error).max() == 0:
        return None
    q, k, v = inp.q[:, rows], inp.k, inp.v
    fits = {}  # format: (miss, typical, names, factors, changes), its best way of scaling Q
    for form in ("tf32", "bf16", "fp16"):
        changes = operand_errors(q, k, v, form)
        for query in QUERY_SCALES:
            miss, typical, factors = fitted(error, changes, names := [query, "K", "P", "V"])
            if form not in fits or miss < fits[form][0]:
                fits[form] = (miss, typical, names, factors, changes)
    form = min(fits, key=lambda f: fits[f][0] * (0.9 if f == "tf32" else 1.0))  # tf32 first where fp16 ties
    _, _, names, factors, changes = fits[form]
    moved = (names[0], *np.round(factors[:2]))  # the scores with whole factors: P rounded where the program has it
    with_p = fitted(error, operand_errors(q, k, v, form, moved), names)
    without_p = fitted(error, changes, names := [names[0], "K", "V"])
    if with_p[0] < 0.5 * without_p[0]:  # P's rounding read: the fit far better with it
        names, without_p = [names[0], "K", "P", "V"], with_p
    miss, typical, factors = without_p
    whole = np.round(factors)
    if miss > FIT_SHARE * np.abs(error).max() or typical > FIT_SHARE * np.median(np.abs(error)) or \
            (np.abs(factors - whole) > WHOLE_FACTOR).any() or not (np.abs(whole) >= 2).any():
        return None  # no fit, no whole factors, or a single rounding's 0s and 1s
    terms = ", ".join(f"{n} x {fmt(f)}" for n, f in zip(names, factors) if round(f) != 0)
    unread = "" if "P" in names else "; P's own rounding not read: an online softmax rounds p against a running max, " \
        "which moves what it rounds"
    alike = " (or fp16's: the same bits in this range)" if form == "tf32" and fits["fp16"][0] <= 1.5 * fits["tf32"][0] \
        else ""
    why = f": {SPLIT_REVERSED}" if set(whole[whole != 0]) == {2} else ""
    return (f"the output's error is each operand's own {form} rounding error{alike} times a whole factor ({terms}; "
            f"the operands rounded alone, the factors fitted: the fit misses the error by at most {fmt(miss)} of "
            f"{fmt(np.abs(error).max())}{unread}){why}")
