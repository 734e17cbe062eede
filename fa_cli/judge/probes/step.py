"""The probes' inputs and what their steps share.

A probe (Probe, a step of the investigation: ..steps.Step) asks one question of the program, runs
it on inputs of its own design (ProbeInput, through Context.run), and answers in Findings whose
every sentence states what was measured. Probes read what earlier ones measured from Context.facts
(the judged probe output, the weights W, ...) and leave there what later ones may use.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...cases.format import HEADER_BYTES, Shape, header_bytes
from .. import reference
from ..steps import Context, Step

__all__ = ["Context", "Probe", "ProbeInput", "fmt", "guard_payload", "logits", "softmax_rows", "read_payload"]


GUARD_SEED = 20261129  # the guard batches' values (ProbeInput.write)


def guard_payload(guard: int, N: int, d: int) -> np.ndarray:
    """The values of `guard` batches written after a probe input's own (Context.guard): (guard, 3, N, d)."""
    return np.random.default_rng(GUARD_SEED).uniform(-3, 3, size=(guard, 3, N, d)).astype("<f4")


def fmt(x: float) -> str:
    """A measured figure in the probes' words: three significant digits."""
    return f"{x:.3g}"


@dataclass
class ProbeInput:
    """Q, K, V of a probe (B, N, d) float32, with the true output and weights it should give."""

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    label: str = "the probe input"

    @property
    def shape(self) -> Shape:
        B, N, d = self.q.shape
        return Shape(B, N, d)

    def flat(self) -> np.ndarray:
        """The payload as the file holds it: Q_0 K_0 V_0 Q_1 ... (float32)."""
        return np.stack([self.q, self.k, self.v], axis=1).astype("<f4").ravel()

    def write(self, path: Path, guard: int = 0) -> None:
        """The input file, a batch at a time (a probe of thousands of batches is never copied whole),
        with `guard` batches of values drawn uniform in [-3, 3] after its own (Context.guard)."""
        B, N, d = self.q.shape
        with open(path, "wb") as f:
            f.write(header_bytes(Shape(B + guard, N, d)))
            for b in range(B):
                f.write(np.stack([self.q[b], self.k[b], self.v[b]]).astype("<f4").tobytes())
            f.write(guard_payload(guard, N, d).tobytes())

    def weights(self) -> np.ndarray:
        """(B, N, N) float64 P = softmax(Q K^T / sqrt(d))."""
        return softmax_rows(logits(self.q, self.k))

    def output(self) -> np.ndarray:
        return reference.attention(self.q, self.k, self.v)

    def with_v(self, v: np.ndarray, label: str) -> "ProbeInput":
        return ProbeInput(self.q, self.k, v.astype(np.float32), label)


APART_ABOVE = 8  # a designed input of more batches than this: its last two batches also run alone, where wrong


def run_many(ctx: Context, inp: ProbeInput) -> tuple[np.ndarray | None, str | None]:
    """The output on a designed input of many batches (each its own question), and, where its last
    two batches are wrong within it and right run as the only two, words that say so (the input's
    reading is then left out): what the program computes depends on a batch's place among many (a
    grid or a persistent kernel's items that stop short of the work, a chunk), not on what it holds."""
    got, B = ctx.run(inp), inp.shape.B
    if got is None or B <= APART_ABOVE:
        return got, None
    tail = ProbeInput(inp.q[-2:], inp.k[-2:], inp.v[-2:], "its last 2 batches")
    true = tail.output()
    with np.errstate(invalid="ignore"):
        within = np.abs(got[-2:] - true)
        if (within <= ctx.tol).all():
            return got, None
        alone = ctx.run(tail)
        if alone is None or not (np.abs(alone - true) <= ctx.tol).all():
            return got, None
        again = ctx.run(inp)  # the many batches once more: a place, not timing, if they give the same
        if again is None or not np.array_equal(again, got, equal_nan=True):
            return got, None
    worst = float(np.nanmax(np.where(np.isnan(within), np.inf, within)))
    return None, (f"batches {B - 2} and {B - 1} are wrong within this {B}-batch input (by up to {fmt(worst)}) and "
                  "right run as the only two: what the program computes depends on a batch's place among many (a "
                  "grid or a persistent kernel's items that stop short of the work, a chunk), not on what the batch "
                  "holds; this input's reading is left out")


def logits(q: np.ndarray, k: np.ndarray, scale: float | None = None) -> np.ndarray:
    """(B, N, M) float64 Q K^T * scale (1/sqrt(d) by default)."""
    d = q.shape[-1]
    scale = 1.0 / np.sqrt(d) if scale is None else scale
    return np.matmul(q.astype(np.float64), k.astype(np.float64).transpose(0, 2, 1)) * scale


def softmax_rows(s: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        p = np.exp(s - s.max(axis=-1, keepdims=True))
        return p / p.sum(axis=-1, keepdims=True)


class Probe(Step):
    """A step that measures the program on probe inputs of its own design (ctx.probe, ctx.run):
    it applies to a wrong answer or an output of the wrong size that no step before it explained,
    while the probes have something left to measure."""

    measures = True

    def applies(self, ctx: Context) -> bool:
        return True


def read_payload(path: Path, shape: Shape, batches: int, rows: int) -> tuple[np.ndarray, ...]:
    """Q, K, V of the first `batches` batches of an input file, each cut to its first `rows` rows."""
    values = np.memmap(path, dtype="<f4", mode="r", offset=HEADER_BYTES, shape=(shape.B, 3, shape.N, shape.d))
    block = np.array(values[:batches, :, :rows], dtype=np.float32)
    return block[:, 0], block[:, 1], block[:, 2]


def spans(indices) -> str:
    """0 1 2 5 6 -> 0-2, 5-6."""
    values = [int(x) for x in indices]
    out, start = [], None
    for i, x in enumerate(values):
        if start is None:
            start = x
        if i + 1 == len(values) or values[i + 1] != x + 1:
            out.append(str(start) if start == x else f"{start}-{x}")
            start = None
    return ", ".join(out)


def column_owners(lanes, columns, close, tried: np.ndarray | None = None) -> list[int] | None:
    """Each output column's lane: the first lane g (of tried[c] where given, a column's candidates,
    else every lane) with close(lanes[g], column); None where some column is no lane's, or where
    every column is one lane's (no lanes of their own)."""
    owner = [next((int(g) for g in (range(len(lanes)) if tried is None else np.flatnonzero(tried[c]))
                   if close(lanes[g], column)), None) for c, column in enumerate(columns)]
    return None if None in owner or len(set(owner)) < 2 else owner


def columns_by_lane(owner: list[int], shown: int = 3) -> str:
    """Each column's lane (owner[c]) in words, the first `shown` lanes: "columns 0, 32: lane 0's; ...",
    with " ..." where there are more."""
    lanes = np.array(owner)
    said = "; ".join(f"columns {spans(np.flatnonzero(lanes == g))}: lane {g}'s" for g in sorted(set(owner))[:shown])
    return said + (" ..." if len(set(owner)) > shown else "")
