"""NaN with a single key, read as weights that underflow: the probe's first batch again with Q,
then K, scaled down step by step, every scale a batch of one run. Where each row is NaN above a
scale and finite below it, every exp(s - m) of that row underflows to 0 at the larger scales
(l = 0, o / l = 0 / 0): what the program subtracts from the scores is far above their max. That
value, per row, is bracketed by the scales around its threshold and set against a few bounds a
program may subtract in place of the running max (each linear in q; K's own scaling tells a norm
of K from its square)."""
from __future__ import annotations

import numpy as np

from ..mistakes import EXP_LINES
from .step import Context, ProbeInput, fmt, logits

SCALES = 2.0 ** (-np.arange(32) / 4)  # 1 down to 1/215, a quarter of an octave apart
# exp(x) is 0 in float below these: __expf (2^x, flushed to zero under 2^-126) and expf (denormals to 2^-149)
UNDER_FAST, UNDER_FULL = 126 * np.log(2), 150 * np.log(2)
FIT_SHARE = 0.95  # of the rows a bound is said to fit


def scaled_batches(inp: ProbeInput) -> ProbeInput:
    """Batch 0 of the probe at every scale of SCALES: Q scaled (the first half), then K."""
    q, k, v = inp.q[0], inp.k[0], inp.v[0]
    n = SCALES.size
    qs = np.concatenate([SCALES[:, None, None] * q[None], np.broadcast_to(q, (n, *q.shape))]).astype(np.float32)
    ks = np.concatenate([np.broadcast_to(k, (n, *k.shape)), SCALES[:, None, None] * k[None]]).astype(np.float32)
    return ProbeInput(qs, ks, np.broadcast_to(v, qs.shape).astype(np.float32),
                      f"batch 0 of {inp.label}, Q then K scaled by 1 to 1/{1 / SCALES[-1]:.0f}")


def thresholds(finite: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """finite (scales, rows), scales falling: each row's last NaN scale and first finite one below
    it (NaN above, finite below, for every row); None where a row is finite at scale 1, NaN at the
    smallest, or turns back."""
    if finite[0].any() or not finite[-1].all():
        return None
    first = finite.argmax(axis=0)  # the first finite scale of each row
    if not all(finite[f:, r].all() for r, f in enumerate(first)):
        return None
    return SCALES[first - 1], SCALES[first]


EXPONENTIAL = ("the exponential", EXP_LINES)  # the lines shown: where the weights are made
ROW_MAX = ("the row's max", r"\bfmaxf?\s*\(|\bmax\s*\(")  # or where the max subtracted is taken


def bounds(q: np.ndarray, k: np.ndarray) -> dict[str, tuple[np.ndarray, int, tuple[str, str]]]:
    """Values a program may subtract from each row's scores, at scale 1, with K's power in them and
    the lines to show for each."""
    d = q.shape[-1]
    qn = np.linalg.norm(q.astype(np.float64), axis=1) / np.sqrt(d)  # the scaled q's norm
    kn = np.linalg.norm(k.astype(np.float64), axis=1)
    s = logits(q[None], k[None])[0]
    return {
        "sqrt(d) max_j s_j, the row's max of q . k not scaled by 1/sqrt(d): the max taken from unscaled scores":
            (np.sqrt(d) * s.max(axis=1), 1, ROW_MAX),
        "|q| max_j |k_j|^2: a squared norm of K where its norm belongs (a square root left out)":
            (qn * (kn ** 2).max(), 2, EXPONENTIAL),
        "|q| max_j |k_j| with q not scaled by 1/sqrt(d): the bound's scale left out":
            (qn * np.sqrt(d) * kn.max(), 1, EXPONENTIAL),
        "|q| sum_j |k_j|: a sum of K's norms where their max belongs": (qn * kn.sum(), 1, EXPONENTIAL),
        "sum_j |s_j|: the sum of the scores' sizes where their max belongs": (np.abs(s).sum(axis=1), 1, EXPONENTIAL),
    }


def fits(value: np.ndarray, power: int, s_max: np.ndarray, k_finite: np.ndarray) -> bool:
    """Whether subtracting `value` (at scale 1) gives the thresholds K's scaling showed: at each
    scale b the row is surely finite where b^power value - b s_max < UNDER_FAST, surely NaN past
    UNDER_FULL; FIT_SHARE of the sure ones as seen."""
    b = SCALES[:, None]
    gap = b ** power * value[None] - b * s_max[None]
    sure = (gap < UNDER_FAST) | (gap > UNDER_FULL)
    return bool(sure.any() and ((gap < UNDER_FAST) == k_finite)[sure].mean() >= FIT_SHARE)


def reading(ctx: Context) -> tuple[str, tuple[str, str]] | None:
    """The words where the rows' NaN comes and goes with the scores' size, with the lines to show;
    None where it does not (or the program gave no output on the scaled batches)."""
    inp = scaled_batches(ctx.probe)
    got = ctx.run(inp)
    if got is None:
        return None
    n = SCALES.size
    finite = np.isfinite(got).all(axis=2)  # (2 n, rows)
    q_side = thresholds(finite[:n])
    if q_side is None:
        return None
    nan_at, finite_at = q_side
    s_max = logits(ctx.probe.q[:1], ctx.probe.k[:1])[0].max(axis=1)
    low, high = s_max + UNDER_FAST / nan_at, s_max + UNDER_FULL / finite_at  # what is subtracted, at scale 1
    said = (f"measured: with Q scaled down ({inp.label}: {n} scales, a batch each), every row is NaN above a scale "
            f"and finite below it (from {fmt(finite_at.min())} to {fmt(nan_at.max())} over the rows): each weight "
            "exp(s - m) underflows to 0 (under -87 in float) while the scores are large, l = 0 and o / l = 0 / 0: "
            f"what is subtracted from the scores is far above their max (by {fmt(np.median(low - s_max))} to "
            f"{fmt(np.median(high - s_max))} at scale 1, the median row), not the row's running max")
    for name, (value, power, look) in bounds(ctx.probe.q[0], ctx.probe.k[0]).items():
        inside = ((value >= low * 0.98) & (value <= high * 1.02)).mean()
        if inside >= FIT_SHARE and fits(value, power, s_max, finite[n:]):
            return (f"{said}; it is {name} (inside each row's bracket in {inside:.0%} of the rows, and the thresholds "
                    "of K's own scaling follow it)"), look
    return said + ("; none of the bounds fa tried fits it (max q . k unscaled, |q| max |k|^2, |q| max |k| unscaled, "
                   "|q| sum |k|, sum |s|)"), EXPONENTIAL


# exp(x) overflows past these: a half's largest finite value 65504, a float's 3.4e38 (__expf and expf alike)
OVERFLOWS = (("a half (fp16, largest finite 65504)", float(np.log(65504.0))),
             ("a float (largest finite 3.4e38)", float(np.log(np.finfo(np.float32).max))))
CHECK_SCALES = (1.1, 1.25, 1.5, 2.0)  # Q scaled by the first that moves rows over the threshold: the reading's check


def overflow_cut(out: np.ndarray, inp: ProbeInput) -> tuple[str, float, str, float] | None:
    """Where the rows with NaN or inf are exactly those whose largest score passes one format's exp
    overflow (ln of its largest finite value), scaled or not, and the others finite: (what score,
    its factor on the scaled logits, the format, its threshold); else None."""
    bad = ~np.isfinite(out).all(axis=2)
    if not bad.any() or bad.all():
        return None
    s_max = logits(inp.q, inp.k).max(axis=2)  # (B, N), at 1/sqrt(d)
    for what, factor in (("q . k / sqrt(d)", 1.0), ("q . k, not scaled", float(np.sqrt(inp.q.shape[-1])))):
        lo, hi = (factor * s_max)[~bad].max(), (factor * s_max)[bad].min()
        hits = [(name, t) for name, t in OVERFLOWS if lo < t <= hi]
        if lo < hi and len(hits) == 1:
            return what, factor, *hits[0]
    return None


def overflow(ctx: Context) -> str | None:
    """The words where the rows with NaN or inf are those overflow_cut names, and a run with Q
    scaled up (the first of CHECK_SCALES that moves rows over the threshold, some staying under)
    has NaN or inf in exactly the rows it predicts: the weights are exp of scores not shifted by
    the row's max, in that format; else None."""
    out, inp = ctx.facts.out, ctx.probe
    found = overflow_cut(out, inp)
    if found is None:
        return None
    what, factor, name, t = found
    bad = ~np.isfinite(out).all(axis=2)
    for g in CHECK_SCALES:
        scaled = ProbeInput(inp.q * np.float32(g), inp.k, inp.v, f"{inp.label} with Q times {g:g}")
        predicted = factor * logits(scaled.q, scaled.k).max(axis=2) > t
        if predicted.sum() > bad.sum() and not predicted.all():
            break
    else:
        return None
    got = ctx.run(scaled)
    if got is None or not np.array_equal(~np.isfinite(got).all(axis=2), predicted):
        return None
    right = (np.abs(out - ctx.facts.true) <= ctx.tol).all(axis=2)[~bad].mean()
    return (f"measured: the {int(bad.sum())} rows with NaN or inf on {inp.label} are exactly those whose largest "
            f"score {what} is over ln of {name} = {t:.2f}, and {right:.0%} of the other rows are right; with Q "
            f"times {g:g} the rows with NaN or inf are again exactly those over it ({int(predicted.sum())} rows): its "
            f"weights are exp of the scores not shifted by the row's max, overflowing {name.split(' (')[0]} "
            "(exp(s - m) is at most 1)")


def negative_rows(ctx: Context) -> str | None:
    """The words where the rows with NaN or inf are exactly those whose scores are all negative (the
    others right), and with Q negated exactly the rows whose scores are all positive then: a max that
    keeps its start on a row of negative scores; else None."""
    out, inp = ctx.facts.out, ctx.probe
    bad = ~np.isfinite(out).all(axis=2)
    s_max = logits(inp.q, inp.k).max(axis=2)
    if not bad.any() or bad.all() or not np.array_equal(bad, s_max < 0):
        return None
    flipped = ProbeInput(-inp.q, inp.k, inp.v, f"{inp.label} with Q negated")
    predicted = logits(flipped.q, flipped.k).max(axis=2) < 0
    got = ctx.run(flipped)
    if got is None or not predicted.any() or not np.array_equal(~np.isfinite(got).all(axis=2), predicted):
        return None
    return (f"measured: the {int(bad.sum())} rows with NaN or inf on {inp.label} are exactly those whose scores are "
            f"all negative, and with Q negated again exactly those ({int(predicted.sum())} rows): the row's max keeps "
            "its start where every score is under 0: a max taken on a float's bits as signed integers (atomicMax on "
            "__float_as_int: a negative float's bits order below -inf's), or one started at 0 and then used as -inf; "
            "exp(s - m) with m = -inf is inf; look at how the row's max is taken")
