"""A larger input's wrong batches that hold another batch's right output, or 0: where each chunk of
batches was written. Chunks launched with their input's offset and not their output's each write at
the output's start, the last chunk's winning there, the batches past the first chunk never written
(set47's s12)."""
from __future__ import annotations

import math

import numpy as np

from .probes.step import spans

SHOWN = 3  # runs of batches said, each with the batches whose output it holds


def other_batchs_output(got: np.ndarray, correct: np.ndarray, wrong: np.ndarray, tol: float) -> str | None:
    """Where every wrong batch's values checked are either all 0 or another batch's right values,
    and at least one holds another's: which batches hold whose, as runs of one offset each, and the
    chunk of batches those offsets share; None otherwise."""
    bad = np.flatnonzero(wrong.any(axis=(1, 2)))
    if not bad.size:
        return None
    zeros = bad[(got[bad] == 0).all(axis=(1, 2))]
    moved = np.setdiff1d(bad, zeros)
    if not moved.size:
        return batches_skipped(zeros, bad, got.shape[0])
    order = np.argsort(correct[:, 0, 0])  # one value a batch, sorted, to find the candidates of each moved batch
    key = correct[order, 0, 0]
    held = {}
    for b in moved:
        lo, hi = np.searchsorted(key, [got[b, 0, 0] - tol, got[b, 0, 0] + tol])
        match = [int(c) for c in order[lo:hi] if c != b and (np.abs(got[b] - correct[c]) <= tol).all()]
        if len(match) != 1:
            return None
        held[int(b)] = match[0]
    runs = []  # (first, last, offset) of consecutive batches holding batch + offset
    for b in sorted(held):
        if runs and runs[-1][1] == b - 1 and runs[-1][2] == held[b] - b:
            runs[-1][1] = b
        else:
            runs.append([b, b, held[b] - b])
    said = "; ".join(f"batches {a}-{z} hold the right output of batches {a + o}-{z + o}" if z > a else
                     f"batch {a} holds the right output of batch {a + o}" for a, z, o in runs[:SHOWN])
    more = f"; {len(runs) - SHOWN} more runs" if len(runs) > SHOWN else ""
    chunk = math.gcd(*(abs(o) for _, _, o in runs))
    empty = f"; batches {spans(zeros)} hold 0 (never written)" if zeros.size else ""
    return f"{said}{more}{empty}" + chunk_words(runs, chunk, zeros.size > 0)


def chunk_words(runs: list, chunk: int, zeros: bool) -> str:
    """What the offsets say of chunks: later batches' outputs at the start and batches never written
    (an output base without the chunk's offset); earlier batches' outputs where each batch's own
    belongs, nothing unwritten (an input base without it); else no mechanism."""
    if chunk < 2:
        return ": outputs found at other batches' places (no chunk of batches fits the offsets)"
    if all(o > 0 for _, _, o in runs) and zeros:
        return (f": every offset a multiple of {chunk} batches: a chunk of {chunk} batches writing its output at the "
                "output's start (or another chunk's place), its output base without the chunk's offset where its "
                "input has it")
    if all(o < 0 for _, _, o in runs) and not zeros:
        return (f": every offset a multiple of {chunk} batches, each batch holding an earlier batch's output: a "
                f"chunk of {chunk} batches computed from the first chunk's input (or another's), its input base "
                "without the chunk's offset where its output has it")
    return f": every offset a multiple of {chunk} batches (chunks of batches written or read at other chunks' places)"


def batches_skipped(zeros: np.ndarray, bad: np.ndarray, B: int) -> str | None:
    """Where every wrong batch holds 0 and they are no one run to the last batch (a count that stops
    short says that): batches the grid's map never reaches, in words; None otherwise."""
    if zeros.size != bad.size or not zeros.size or np.array_equal(zeros, np.arange(zeros[0], B)):
        return None
    runs = spans(zeros).split(", ")
    shown = ", ".join(runs[:SHOWN * 2]) + (f", ... ({len(runs)} runs)" if len(runs) > SHOWN * 2 else "")
    return (f"{zeros.size} of the {B} batches hold 0 in every value checked (never written), the others right, and "
            f"not one run to the last: batches {shown}: the blocks' map onto batches misses some (a batch index made "
            "of two grid axes with the other axis's size: blockIdx.z * gridDim.z + blockIdx.y where gridDim.y "
            "belongs; a stride over batches), or the launches or copies over batches skip them")

