"""Which batches each case got right, read together against what a host-side mistake leaves
unwritten: a pattern no single case tells apart ("batch 2 of 3 is zero" may be a grid, a split of
the batches or a copy), that the cases together pin down.

A mistake here predicts, from a case's B and N alone, each batch's first wrong row (N: none):

  grid      the launch grid's axes swapped (dim3(B, tiles) for a kernel that takes blockIdx.x as
            the query tile of Br rows and blockIdx.y as the batch): tiles t < B of batches
            b < ceil(N / Br) are computed, the rest of their rows and every later batch not
  halves    the batches split in two halves of B / 2 (rounded down) each: the last batch left out
            where B is odd
  quarter   a copy given a count of floats as its bytes: only the first quarter of the input
            reaches the GPU (or of the output comes back), batches b < B / 4 right
  third     the input copied with the output's count of floats (B*N*d of its 3*B*N*d): batches
            b < B / 3 right, those whose Q, K and V lie in the first third

It is named where every case whose every value was checked agrees with it, passing cases
included, at least two failing ones among them, and one failing case has wrong batches of its own
(not every batch, nor every batch after the first, which the catalogue says already).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..cases.format import Shape
from ..report.tables import one_of
from .diagnose import first_wrong_rows, quoted, source_lines
from .findings import Finding, Kind
from .steps import Context, Step

GRID_TILES = (16, 32, 64, 128, 256)  # query-tile heights a grid's tile axis may count in


@dataclass(frozen=True)
class Coverage:
    words: str
    first_wrong: Callable[[Shape], np.ndarray]  # (B,) each batch's first wrong row (N: none), from the shape
    look: tuple[str, ...]  # the source lines it is written in: the first line of each pattern
    grid_tile: int = 0  # a grid's query tile, for the grids: those that fit said in one sentence


GRID_WORDS = ("what a launch grid with its axes swapped leaves unwritten: dim3(B, tiles) for a kernel that takes "
              "blockIdx.x as the query tile (of {br} rows) and blockIdx.y as the batch, or the reverse: only tiles "
              "t < B of batches b < ceil(N / Br) computed")


def grid_swapped(br: int) -> Coverage:
    def wrong(s: Shape) -> np.ndarray:
        tiles = -(-s.N // br)
        return np.where(np.arange(s.B) < tiles, min(s.B * br, s.N), 0)
    return Coverage(GRID_WORDS.format(br=br), wrong, (r"\bdim3\b", r"<<<|hipLaunchKernelGGL"), br)


def halves(s: Shape) -> np.ndarray:
    return np.where((np.arange(s.B) == s.B - 1) & bool(s.B % 2), 0, s.N)


def quarter(s: Shape) -> np.ndarray:
    return np.where(np.arange(s.B) < s.B // 4, s.N, 0)


def third(s: Shape) -> np.ndarray:
    return np.where(np.arange(s.B) < s.B // 3, s.N, 0)


COVERAGES = (*(grid_swapped(br) for br in GRID_TILES),
             Coverage("the last batch left out where B is odd: B / 2 rounded down where B - B / 2 belongs (the batches "
                      "split in two halves of B / 2 each, or blocks of two batches over B / 2 blocks)", halves,
                      (r"/\s*2\b|>>\s*1\b",)),
             Coverage("only the first quarter of the input reaching the GPU (or of the output coming back): batches "
                      "b < B / 4 right; a copy given a count of floats as its bytes (sizeof(float) left out)", quarter,
                      (r"Memcpy\w*\s*\(",)),
             Coverage("only the first third of the input reaching the GPU: batches b < B / 3 right, those whose Q, K "
                      "and V lie in the input's first B * N * d floats; the input copied (or read) with the output's "
                      "count of floats, B * N * d where it holds 3 * B * N * d", third,
                      (r"Memcpy\w*\s*\([^;]*HostToDevice", r"Memcpy\w*\s*\(")))


def told(results: list) -> list[tuple[Shape, np.ndarray]]:
    """(shape, each batch's first wrong row) of each case whose every row was checked: N for a batch
    with none wrong, and for every batch of a passing case."""
    cases = []
    for r in results:
        if r.verdict == "PASS" and r.check is not None and not r.check.sampled:
            cases.append((r.target.shape, np.full(r.target.shape.B, r.target.shape.N)))
        elif r.verdict == "WRONG" and (first := first_wrong_rows(r.check, r.target.shape)) is not None:
            cases.append((r.target.shape, first))
    return cases


def fits(coverage: Coverage, cases: list[tuple[Shape, np.ndarray]]) -> bool:
    """Every case agrees, two fail, one fails in batches of its own; a grid also needs a case whose
    rows it predicts wrong from a row past 0 (a grid whose batch axis counts tiles leaves whole
    batches as the swapped one does: only the rows past B tiles tell them apart)."""
    failing = [(s, first) for s, first in cases if (first < s.N).any()]
    own = [s for s, first in failing if (first < s.N).sum() < s.B and not (first[0] == s.N and (first[1:] < s.N).all())]
    told_rows = not coverage.grid_tile or any(((0 < coverage.first_wrong(s)) & (coverage.first_wrong(s) < s.N)).any()
                                              for s, _ in failing)
    return len(failing) >= 2 and bool(own) and told_rows and \
        all(agrees(coverage.first_wrong(s), first, s.N) for s, first in cases)


def agrees(predicted: np.ndarray, first: np.ndarray, N: int) -> bool:
    """A batch predicted wrong throughout may have right rows before its first wrong one (a batch
    whose data came in part: a row whose weight sits on the keys it has is right by chance); a
    batch predicted right, or wrong from a row on, must be just that."""
    return bool(np.all(np.where(predicted == 0, first < N, first == predicted)))


class BatchesCovered(Step):
    """The wrong batches of every case, against COVERAGES."""

    name = "the batches each case got right"

    def applies(self, ctx: Context) -> bool:
        return any(r.verdict == "WRONG" for r in ctx.results)

    def run(self, ctx: Context) -> list[Finding]:
        cases = told(ctx.results)
        found = [c for c in COVERAGES if fits(c, cases)]
        if not found:
            return []
        shown = "; ".join(f"{s.B}x{s.N}x{s.d}: {spans(first, s.N)}" for s, first in cases[:6])
        tiles = [str(c.grid_tile) for c in found if c.grid_tile]
        said = [GRID_WORDS.format(br=one_of(tiles))] if tiles else []
        said += [c.words for c in found if not c.grid_tile]
        lines = [f"across the cases: the batches each case got wrong ({shown}) are {' or '.join(said)}"]
        shown_lines = source_lines(ctx.source, found[0].look) if ctx.source else []
        if shown_lines:
            lines[0] += f"; lines to look at in {ctx.source.name}: {quoted(shown_lines)}"
        return [Finding(Kind.MEASURED, lines, dict(coverage=said, cases=len(cases)))]


def spans(first: np.ndarray, N: int) -> str:
    """Where a case is wrong, by batch: "none wrong", "batches 4..15 wrong", "rows from 128 on"."""
    wrong = [int(b) for b in np.flatnonzero(first < N)]
    if not wrong:
        return "none wrong"
    partly = sorted({int(first[b]) for b in wrong if first[b] > 0})
    rows = f" (rows from {', '.join(map(str, partly))} on)" if partly else ""
    if len(wrong) == first.size:
        return f"every batch wrong{rows}"
    lo, hi = wrong[0], wrong[-1]
    which = f"batch{'es' if hi > lo else ''} {lo}{f'..{hi}' if hi > lo else ''}" if len(wrong) == hi - lo + 1 else \
        f"batches {', '.join(map(str, wrong))}"
    return f"{which} wrong{rows}"
