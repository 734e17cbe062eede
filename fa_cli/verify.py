"""Compare an output with the float64 reference (full or sampled rows) or with an expected file.

A value counts as wrong when |out - ref| > tol; NaN and infinity are always wrong.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from . import reference
from .format import AttentionInput, Shape

COURSE_TOL = 5e-3
# Inputs with B*N*N*d up to this are checked in full by default (about 4 GFLOP of float64).
FULL_CHECK_LIMIT = 4 * 4096 * 4096 * 64
DEFAULT_SAMPLE_ROWS = 32
# Bytes of float64 K and V converted at once when batches are grouped (small N, large B).
GROUP_BUDGET = 64 << 20

Progress = Callable[[int], None]


@dataclass
class WrongMap:
    """Where the values over tolerance are: for every checked row its batch, its row and how many
    of its values are over; for every column how many are over. What a diagnosis reads."""

    d: int
    batch_ids: list[np.ndarray] = field(default_factory=list)
    row_ids: list[np.ndarray] = field(default_factory=list)
    bad_counts: list[np.ndarray] = field(default_factory=list)
    column_bad: np.ndarray | None = None

    def add(self, batches: np.ndarray, rows: np.ndarray, over: np.ndarray) -> None:
        """over: (rows, d) booleans of one block of checked rows."""
        self.batch_ids.append(np.asarray(batches, dtype=np.int64))
        self.row_ids.append(np.asarray(rows, dtype=np.int64))
        self.bad_counts.append(np.count_nonzero(over, axis=1).astype(np.int32))
        column = np.count_nonzero(over, axis=0)
        self.column_bad = column if self.column_bad is None else self.column_bad + column

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(batch, row, values over tolerance) of every checked row, as three flat arrays."""
        if not self.batch_ids:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty, empty
        return np.concatenate(self.batch_ids), np.concatenate(self.row_ids), np.concatenate(self.bad_counts)


@dataclass
class VerifyResult:
    mode: str  # "full", "R rows/batch" (sampled) or "expected" (an expected output file)
    tol: float
    checked: int = 0  # values compared
    bad: int = 0  # values over tol (non-finite included)
    nonfinite: int = 0
    max_err: float = 0.0
    where: tuple = field(default_factory=tuple)  # (batch, row, column), or (index,) when shapeless
    got: float | None = None  # the output's value and the correct one at `where`
    expected: float | None = None
    wrong: WrongMap | None = None  # where the wrong values are, when the shape is known

    @property
    def passed(self) -> bool:
        return self.bad == 0 and self.checked > 0

    def add(self, out: np.ndarray, ref: np.ndarray, locate: Callable[[int], tuple]) -> None:
        """Fold in one block of values; locate maps a flat index in the block to `where`."""
        err = self._fold(out, ref)
        i = int(np.argmax(err))
        if err.flat[i] > self.max_err or not self.where:
            self.max_err = float(err.flat[i])
            self.where = locate(i)
            self.got, self.expected = float(out.flat[i]), float(ref.flat[i])

    def add_rows(self, out: np.ndarray, ref: np.ndarray, batches: np.ndarray, rows: np.ndarray) -> None:
        """Fold in whole rows: out and ref shaped (rows, d), with each row's batch and row index."""
        err = self._fold(out, ref)
        if self.wrong is None:
            self.wrong = WrongMap(out.shape[1])
        self.wrong.add(batches, rows, err > self.tol)
        r, c = np.unravel_index(int(np.argmax(err)), err.shape)
        if err[r, c] > self.max_err or not self.where:
            self.max_err = float(err[r, c])
            self.where = (int(batches[r]), int(rows[r]), int(c))
            self.got, self.expected = float(out[r, c]), float(ref[r, c])

    def _fold(self, out: np.ndarray, ref: np.ndarray) -> np.ndarray:
        """|out - ref| with non-finite values as infinity; counts folded into the totals."""
        err = np.abs(out.astype(np.float64) - ref)
        finite = np.isfinite(err)
        nonfinite = err.size - int(np.count_nonzero(finite))
        if nonfinite:
            err = np.where(finite, err, np.inf)
        self.checked += err.size
        self.nonfinite += nonfinite
        self.bad += int(np.count_nonzero(err > self.tol))
        return err

    def describe_where(self) -> str:
        if len(self.where) == 3:
            return "batch {}, row {}, column {}".format(*self.where)
        return f"value #{self.where[0]}" if self.where else "-"


@dataclass(frozen=True)
class RowCheck:
    """Which rows of each batch are checked against float64, as asked on the command line:
    `sample` seeded random rows per batch (always the first and the last, where partial tiles
    live), every row (`full`), or by default (neither) every row of inputs up to
    FULL_CHECK_LIMIT and DEFAULT_SAMPLE_ROWS rows of larger ones."""

    sample: int | None = None
    full: bool = False
    seed: int = 0

    @property
    def is_default(self) -> bool:
        return self.sample is None and not self.full

    def rows(self, shape: Shape) -> int | None:
        """Rows per batch to sample for this shape; None: every row."""
        if self.full:
            return None
        if self.sample is not None:
            return self.sample if self.sample < shape.N else None
        if shape.B * shape.N * shape.N * shape.d <= FULL_CHECK_LIMIT:
            return None
        return DEFAULT_SAMPLE_ROWS if DEFAULT_SAMPLE_ROWS < shape.N else None


EVERY_ROW = RowCheck(full=True)


def sampled_rows(rng: np.random.Generator, groups: int, N: int, R: int) -> np.ndarray:
    """R distinct rows per batch, always including the first and the last (partial tiles)."""
    rows = np.argsort(rng.random((groups, N)), axis=1)[:, :R]
    rows[:, 0] = 0
    if R > 1:
        rows[:, 1] = N - 1
    return np.sort(rows, axis=1)


def against_reference(
    inp: AttentionInput,
    out: np.ndarray,
    tol: float = COURSE_TOL,
    check: RowCheck = EVERY_ROW,
    progress: Progress | None = None,
) -> VerifyResult:
    """Check out (B, N, d) against float64 attention of inp, on the rows `check` picks."""
    B, N, d = inp.shape.B, inp.shape.N, inp.shape.d
    sample_rows, seed = check.rows(inp.shape), check.seed
    mode = "full" if sample_rows is None else f"{sample_rows} rows/batch"
    result = VerifyResult(mode=mode, tol=tol)
    group = max(1, GROUP_BUDGET // (16 * N * d))
    for b0 in range(0, B, group):
        b1 = min(B, b0 + group)
        q, k, v = inp.qkv(b0, b1)
        if sample_rows is None:
            rows = np.broadcast_to(np.arange(N), (b1 - b0, N))
        else:
            rows = sampled_rows(np.random.default_rng([seed, b0]), b1 - b0, N, sample_rows)
        ref = reference.attention(q, k, v, None if sample_rows is None else rows)
        got = out[b0:b1][np.arange(b1 - b0)[:, None], rows]
        batches = np.repeat(np.arange(b0, b1), rows.shape[1])
        result.add_rows(got.reshape(-1, d), ref.reshape(-1, d), batches, np.asarray(rows).reshape(-1))
        if progress:
            progress(b1 - b0)
    return result


def against_expected(
    out: np.ndarray, expected: np.ndarray, tol: float = COURSE_TOL, shape: Shape | None = None,
    progress: Progress | None = None,
) -> VerifyResult:
    """Check out against an expected output of the same size, block by block."""
    result = VerifyResult(mode="expected", tol=tol)
    flat_out, flat_exp = out.reshape(-1), expected.reshape(-1)
    block = 1 << 22
    if shape is not None:
        block -= block % shape.d  # whole rows: the wrong values are mapped by row
    for i0 in range(0, flat_out.size, block):
        got, exp = flat_out[i0 : i0 + block], flat_exp[i0 : i0 + block].astype(np.float64)
        if shape is None:
            result.add(got, exp, lambda i, i0=i0: (i0 + i,))
        else:
            row = np.arange(i0 // shape.d, (i0 + got.size) // shape.d)
            result.add_rows(got.reshape(-1, shape.d), exp.reshape(-1, shape.d), row // shape.N, row % shape.N)
        if progress:
            progress(min(block, flat_out.size - i0))
    return result
