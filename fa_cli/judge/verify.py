"""Compare an output with an expected output file, or with the float64 reference (every row or sampled rows).

A value counts as wrong when |out - ref| > tol; NaN and infinity are always wrong. The course's
judge compares every value, and so does fa by default: against the expected output, computed
once per input and cached (expected.py), at memory speed.
"""
from __future__ import annotations

import functools
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..cases import generate
from ..cases.format import AttentionInput, Shape
from . import reference

COURSE_TOL = 5e-3
DEFAULT_SAMPLE_ROWS = 32  # fa bench's check of every run (a benchmark is no judge)
# Values compared at once against an expected file: small enough to stay in the CPU's caches.
COMPARE_BLOCK = 1 << 18
# A block whose largest difference, computed in float32, is at most tol * (1 - SAFE) holds no
# value over tol: float32 rounds a difference by at most 2^-24 of it.
SAFE = 2.0**-20
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
    N: int = 0  # rows per batch, for clean_rows
    clean_rows: list[tuple[int, int]] = field(default_factory=list)  # flat row ranges checked, none wrong

    def add(self, batches: np.ndarray, rows: np.ndarray, over: np.ndarray) -> None:
        """over: (rows, d) booleans of one block of checked rows."""
        self.batch_ids.append(np.asarray(batches, dtype=np.int64))
        self.row_ids.append(np.asarray(rows, dtype=np.int64))
        self.bad_counts.append(np.count_nonzero(over, axis=1).astype(np.int32))
        column = np.count_nonzero(over, axis=0)
        self.column_bad = column if self.column_bad is None else self.column_bad + column

    def add_clean(self, row0: int, row1: int) -> None:
        """Flat rows row0..row1-1 (batch * N + row) were checked and none is wrong: kept as a range,
        spelled out only when a diagnosis asks."""
        if self.clean_rows and self.clean_rows[-1][1] == row0:
            row0 = self.clean_rows.pop()[0]
        self.clean_rows.append((row0, row1))

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(batch, row, values over tolerance) of every checked row, as three flat arrays."""
        batches, rows, counts = list(self.batch_ids), list(self.row_ids), list(self.bad_counts)
        for r0, r1 in self.clean_rows:
            flat = np.arange(r0, r1, dtype=np.int64)
            batches.append(flat // self.N)
            rows.append(flat % self.N)
            counts.append(np.zeros(r1 - r0, dtype=np.int32))
        if not batches:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty, empty
        return np.concatenate(batches), np.concatenate(rows), np.concatenate(counts)


@dataclass
class VerifyResult:
    mode: str  # "every value" (against an expected file), "full" (every row against float64 now) or
    # "R rows/batch, sampled"
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
    def sampled(self) -> bool:
        """Only some rows were looked at: a quick look, not the course's verdict."""
        return self.mode.endswith("sampled")

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
        self.wrong_map(None, out.shape[1]).add(batches, rows, err > self.tol)
        r, c = np.unravel_index(int(np.argmax(err)), err.shape)
        if err[r, c] > self.max_err or not self.where:
            self.max_err = float(err[r, c])
            self.where = (int(batches[r]), int(rows[r]), int(c))
            self.got, self.expected = float(out[r, c]), float(ref[r, c])

    def wrong_map(self, shape: Shape | None, d: int = 0) -> WrongMap:
        if self.wrong is None:
            self.wrong = WrongMap(shape.d if shape else d, column_bad=np.zeros(shape.d if shape else d, dtype=np.int64),
                                  N=shape.N if shape else 0)
        return self.wrong

    def _fold(self, out: np.ndarray, ref: np.ndarray) -> np.ndarray:
        """|out - ref| with non-finite values as infinity; counts folded into the totals."""
        with np.errstate(invalid="ignore"):  # a signalling NaN a program left (garbage bits) is wrong, not a warning
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
    """How an output is checked, as asked on the command line: by default (neither option) every
    value against the input's expected output (expected.py), as the course's judge does; `full`:
    every row against float64 attention computed now; `sample`: seeded random rows per batch
    against float64 (always the first and the last, where partial tiles live), a quick look
    whose verdict is labelled sampled."""

    sample: int | None = None
    full: bool = False
    seed: int = 0

    @property
    def is_default(self) -> bool:
        return self.sample is None and not self.full

    def rows(self, shape: Shape) -> int | None:
        """Rows per batch to sample for this shape; None: every row."""
        if self.sample is not None and self.sample < shape.N:
            return self.sample
        return None


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
    mode = "full" if sample_rows is None else f"{sample_rows} rows/batch, sampled"
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
    """Check every value of out against an expected output of the same size. Blocks whose values
    are all well within tol are settled in float32 at memory speed; a block with a value near or
    over tol (or not finite) is checked again in float64 and its wrong values mapped by row."""
    result = VerifyResult(mode="every value", tol=tol)
    flat_out, flat_exp = out.reshape(-1), expected.reshape(-1)
    block = COMPARE_BLOCK - (COMPARE_BLOCK % shape.d if shape is not None else 0)  # whole rows
    diff = np.empty(block, dtype=np.float32)
    safe = tol * (1 - SAFE)
    starts = range(0, flat_out.size, block)
    worsts = _worst_per_block(flat_out, flat_exp, block)
    for i0, worst in zip(starts, worsts):
        got, exp = flat_out[i0 : i0 + block], flat_exp[i0 : i0 + block]
        if worst <= safe:  # NaN compares false: such a block takes the careful way
            result.checked += got.size
            if shape is not None:
                result.wrong_map(shape).add_clean(i0 // shape.d, (i0 + got.size) // shape.d)
            if worst > result.max_err or not result.where:
                d = _abs_difference(got, exp, diff[: got.size])
                i = int(np.argmax(d))
                result.max_err = float(worst)
                result.where = locate(i0 + i, shape)
                result.got, result.expected = float(got[i]), float(exp[i])
        elif shape is None:
            result.add(got, exp.astype(np.float64), lambda i, i0=i0: (i0 + i,))
        else:
            row = np.arange(i0 // shape.d, (i0 + got.size) // shape.d)
            result.wrong_map(shape)
            result.add_rows(got.reshape(-1, shape.d), exp.reshape(-1, shape.d).astype(np.float64), row // shape.N,
                            row % shape.N)
        if progress:
            progress(got.size)
    return result


def _abs_difference(got: np.ndarray, exp: np.ndarray, into: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):  # a signalling NaN in the output: counted as wrong, never a warning
        np.subtract(got, exp, out=into)
    return np.abs(into, out=into)


# Blocks compared by one task of the pool: enough work between two takings of the GIL.
BLOCKS_PER_TASK = 16


@functools.lru_cache(maxsize=1)
def _pool() -> ThreadPoolExecutor:
    """Threads that compare blocks at once (numpy lets go of the GIL while it subtracts)."""
    return ThreadPoolExecutor(generate.workers(), thread_name_prefix="fa-compare")


def _worst_per_block(flat_out: np.ndarray, flat_exp: np.ndarray, block: int) -> np.ndarray:
    """max |out - expected| of each block of `block` values, in float32 (NaN where one is NaN),
    the blocks compared on every core: the whole of a case's check where its values are right."""
    count = -(-flat_out.size // block)

    def task(first: int) -> np.ndarray:
        scratch = np.empty(block, dtype=np.float32)
        worst = np.empty(min(BLOCKS_PER_TASK, count - first), dtype=np.float32)
        for j in range(worst.size):
            i0 = (first + j) * block
            got, exp = flat_out[i0 : i0 + block], flat_exp[i0 : i0 + block]
            worst[j] = _abs_difference(got, exp, scratch[: got.size]).max()
        return worst
    firsts = range(0, count, BLOCKS_PER_TASK)
    if count <= BLOCKS_PER_TASK:
        return task(0)
    return np.concatenate(list(_pool().map(task, firsts)))


def locate(index: int, shape: Shape | None) -> tuple:
    """(batch, row, column) of a flat output index, or (index,) where the shape is not known."""
    if shape is None:
        return (index,)
    row, column = divmod(index, shape.d)
    return (row // shape.N, row % shape.N, column)
