"""The scores behind a set of measured weights W, read back: log W[r, j] as a weighted sum of the
terms q[r, x] k[j, x] over the dims, plus a constant a row (least squares); where none fits, the
terms of a partner row r' (r xor m, r + 1, r - 1) beside the row's own: another row's partial
score added to the row's (a partner thread taken as the neighbouring one)."""
from __future__ import annotations

import numpy as np

from .step import fmt, spans

FIT_RESIDUAL = 1e-3  # log W read back as a . (q * k) + row constant: the largest residual that fits
TINY_WEIGHT = 1e-20  # weights below this carry no readable log


def score_terms(W: np.ndarray, q: np.ndarray, k: np.ndarray) -> str:
    fit = score_fit(W, q, k)
    if fit and fit[1] > FIT_RESIDUAL and (partner := partner_fit(W, q, k)):
        return partner
    return score_words(*fit) if fit else ""


def score_fit(W: np.ndarray, q: np.ndarray, k: np.ndarray) -> tuple[np.ndarray, float] | None:
    """The scores behind W read back: log W[r, j] = sum_x a_x q[r, x] k[j, x] + b_r, fitted where
    W is readable: a, and the largest residual; None where too few weights are readable."""
    N, d = q.shape
    rows, keys = np.nonzero(W > TINY_WEIGHT)
    if rows.size < d + N or np.bincount(rows, minlength=N).min() < 2:
        return None
    terms = q[rows].astype(np.float64) * k[keys]  # (entries, d)
    design = np.concatenate([terms, np.eye(N)[rows]], axis=1)
    fit, *_ = np.linalg.lstsq(design, np.log(W[rows, keys]), rcond=None)
    return fit[:d], float(np.abs(design @ fit - np.log(W[rows, keys])).max())


def score_words(a: np.ndarray, residual: float) -> str:
    """a said as the dims it takes at 1/sqrt(d), at 0, and at other factors."""
    d = a.size
    if residual > FIT_RESIDUAL:
        return ("its scores are no weighted sum of q[r, x] k[j, x] over the row's and the key's dims "
                f"(residual {fmt(residual)})")
    scale = 1 / np.sqrt(d)
    full = np.isclose(a, scale, rtol=1e-2, atol=1e-4)
    none = np.isclose(a, 0, atol=1e-3 * scale)
    if full.all():
        return "its scores are q . k / sqrt(d)"
    parts = []
    if full.any():
        parts.append(f"dims {spans(np.flatnonzero(full))} at 1/sqrt(d)")
    if none.any():
        parts.append(f"dims {spans(np.flatnonzero(none))} not at all")
    other = ~(full | none)
    if other.any():
        values = distinct(a[other])
        parts.append(f"dims {spans(np.flatnonzero(other))} at {', '.join(map(fmt, values[:4]))}"
                     f"{' ...' if len(values) > 4 else ''} (1/sqrt(d) = {fmt(scale)})")
    return "its scores take q[r, x] k[j, x] of " + "; ".join(parts)


def distinct(values: np.ndarray, rtol: float = 1e-2) -> list[float]:
    """The values, those within rtol of a smaller one said once (by their median)."""
    groups: list[list[float]] = []
    for x in sorted(float(v) for v in values):
        if groups and abs(x - groups[-1][0]) <= rtol * abs(groups[-1][0]):
            groups[-1].append(x)
        else:
            groups.append([x])
    return [float(np.median(g)) for g in groups]


def partners(N: int):
    """(words, the partner row of each row) tried beside a row's own terms."""
    r = np.arange(N)
    for m in (2 ** e for e in range(N.bit_length()) if 2 ** e < N):
        yield f"r xor {m}", r ^ m
    yield "r + 1", (r + 1) % N
    yield "r - 1", (r - 1) % N


def partner_fit(W: np.ndarray, q: np.ndarray, k: np.ndarray) -> str | None:
    """Where log W[r, j] = sum_x a_x q[r, x] k[j, x] + b_x q[r', x] k[j, x] + c_r for a partner r'
    of a formula, b not 0: the words; None where no partner fits."""
    N, d = q.shape
    rows, keys = np.nonzero(W > TINY_WEIGHT)
    if rows.size < 2 * d + N or np.bincount(rows, minlength=N).min() < 2:
        return None
    own = q[rows].astype(np.float64) * k[keys]
    target = np.log(W[rows, keys])
    for words, partner in partners(N):
        design = np.concatenate([own, q[partner[rows]].astype(np.float64) * k[keys], np.eye(N)[rows]], axis=1)
        fit, *_ = np.linalg.lstsq(design, target, rcond=None)
        if np.abs(design @ fit - target).max() > FIT_RESIDUAL or np.abs(fit[d:2 * d]).max() < 1e-3 / np.sqrt(d):
            continue
        theirs = score_words(fit[d:2 * d], 0.0).replace("its scores take q[r, x] k[j, x] of ", "")
        mine = score_words(fit[:d], 0.0).replace("its scores take q[r, x] k[j, x] of ", "").replace(
            "its scores are q . k / sqrt(d)", "every dim at 1/sqrt(d)")
        return (f"its scores take q[r, x] k[j, x] of {mine}, and row {words}'s q[{words}, x] k[j, x] of {theirs}: "
                "another row's partial score added to the row's (a partner thread or lane taken as a neighbouring "
                "row's where the row's own other part belongs)")
    return None
