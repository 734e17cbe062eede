"""One step of the measurement of a failing program, and what the steps share.

A step (Probe) asks one question of the program, runs it on inputs of its own design (through
Context.run), and answers in Findings whose every sentence states what was measured. Steps read
what earlier steps measured from Context.facts (the judged probe output, the weights W, ...) and
leave there what later steps may use.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from ...cases.format import HEADER_BYTES, Shape, header_bytes, open_output
from ...programs import programs
from ...programs.programs import Launcher, Program
from .. import reference
from ..findings import Finding
from ..tool_logs import Budget

RUN_TIMEOUT_S = 30.0  # one probe run at most (a probe input is small: seconds even for a slow program)


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

    def write(self, path: Path) -> None:
        """The input file, a batch at a time (a probe of thousands of batches is never copied whole)."""
        with open(path, "wb") as f:
            f.write(header_bytes(self.shape))
            for b in range(self.shape.B):
                f.write(np.stack([self.q[b], self.k[b], self.v[b]]).astype("<f4").tobytes())

    def weights(self) -> np.ndarray:
        """(B, N, N) float64 P = softmax(Q K^T / sqrt(d))."""
        return softmax_rows(logits(self.q, self.k))

    def output(self) -> np.ndarray:
        return reference.attention(self.q, self.k, self.v)

    def with_v(self, v: np.ndarray, label: str) -> "ProbeInput":
        return ProbeInput(self.q, self.k, v.astype(np.float32), label)


def logits(q: np.ndarray, k: np.ndarray, scale: float | None = None) -> np.ndarray:
    """(B, N, M) float64 Q K^T * scale (1/sqrt(d) by default)."""
    d = q.shape[-1]
    scale = 1.0 / np.sqrt(d) if scale is None else scale
    return np.matmul(q.astype(np.float64), k.astype(np.float64).transpose(0, 2, 1)) * scale


def softmax_rows(s: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        p = np.exp(s - s.max(axis=-1, keepdims=True))
        return p / p.sum(axis=-1, keepdims=True)


@dataclass
class Context:
    """What every step of one investigation shares: the program, how it runs, the time left, the
    case's probe input, and the facts measured so far."""

    program: Program
    launcher: Launcher | None
    work: Path
    budget: Budget
    say: Callable[[str], None]
    tol: float
    probe: ProbeInput  # the case's own Q and K (and V) at the probe's size
    case_label: str  # the failing case, as fa names it
    case_path: Path | None = None  # its input file and shape: a probe of another size is cut from it
    case_shape: Shape | None = None
    kind: str = "cpu"  # cpu, cuda or hip: what the program runs its kernels on
    facts: dict = field(default_factory=dict)
    runs: int = 0
    raw: np.ndarray | None = None  # the last run's output, where it had the wrong size (float32 values)

    @property
    def source(self) -> Path | None:
        return self.program.source

    def run(self, inp: ProbeInput, program: Program | None = None) -> np.ndarray | None:
        """The program's output on inp (B, N, d) float32, or None where it wrote none of the right
        size, crashed or ran out of time."""
        self.runs += 1
        path, out = self.work / "probe.in", self.work / "probe.out"
        inp.write(path)
        out.unlink(missing_ok=True)
        timeout = min(RUN_TIMEOUT_S, max(1.0, self.budget.left))
        result = programs.run(program or self.program, path, out, self.launcher, timeout=timeout, timed=False)
        self.raw = None
        if result.timed_out or result.returncode != 0 or not out.exists():
            return None
        if out.stat().st_size != inp.shape.output_bytes:
            size = out.stat().st_size
            if size % 4 == 0 and 0 < size <= 4 * inp.shape.output_bytes:  # kept for the layout's search
                self.raw = np.fromfile(out, dtype="<f4")
            return None
        return np.array(open_output(out, inp.shape), dtype=np.float32)


class Probe:
    """A step of the measurement: one question, its inputs, its measurement and its words."""

    name = "probe"  # as the progress line says it

    def applies(self, ctx: Context) -> bool:
        """Whether the step has something to measure, from the facts gathered so far."""
        return True

    def run(self, ctx: Context) -> list[Finding]:
        raise NotImplementedError


def read_payload(path: Path, shape: Shape, batches: int, rows: int) -> tuple[np.ndarray, ...]:
    """Q, K, V of the first `batches` batches of an input file, each cut to its first `rows` rows."""
    values = np.memmap(path, dtype="<f4", mode="r", offset=HEADER_BYTES, shape=(shape.B, 3, shape.N, shape.d))
    block = np.array(values[:batches, :, :rows], dtype=np.float32)
    return block[:, 0], block[:, 1], block[:, 2]
