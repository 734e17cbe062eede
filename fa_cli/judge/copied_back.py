"""Where a wrong output went wrong: on the device, or between the device and the file. fa's launch
layer keeps every copy from the device to the host when asked (FA_COPIED_BACK, src_cuda/
launch_log.h: one file a copy, in order). A failing case whose runs again agreed bit for bit is run
once so, and the copies are laid over the right output:

- the copies hold the right output, and the file does not: the host wrote the file from other
  memory than the copies' destination, or from the wrong place in it, or before they arrived
  (a cause, with the lines that write the file and that copy back);
- the file holds what the copies brought: its wrong values came from the device (said among what
  was tried; the probes then measure the device's arithmetic).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .. import settings
from .diagnose import quoted, source_lines
from .findings import Finding, Kind
from .probes.layout import moved
from .race_check import applies as student_gpu_program
from .reruns import over, run_once
from .slow_device import layered, with_setting
from .steps import Context, Step

RUN_TIMEOUT_S = 30.0
MATCH_ATOL = 2e-6  # a copied value "is" a right value within this (float32 against float64)
COVERED = 0.99  # of the right output, placed by copies that hold it: the copies hold the right output
# the lines the claim points at: what writes the output file, then what copies back
WRITE_LINES = (r"\bfwrite\s*\(|\.write\s*\(", r"Memcpy\w*\s*\(.*(DeviceToHost|Default)")


def copies(folder: Path) -> list[np.ndarray]:
    """The copies the run kept, in the order it made them, as float32 values (a copy of a size no
    multiple of 4 bytes is no part of the output)."""
    kept = sorted(folder.glob("copy-*.bin"))
    return [np.fromfile(p, dtype="<f4") for p in kept if p.stat().st_size % 4 == 0]


def placed(copy: np.ndarray, right: np.ndarray, tol: float) -> int | None:
    """Where in the right output (flat) the copy lies whole, within tol; None where nowhere. Tried at
    the places whose first value equals the copy's first (within MATCH_ATOL), the lowest first."""
    if copy.size == 0 or copy.size > right.size or not np.isfinite(copy[0]):
        return None
    starts = np.flatnonzero(np.abs(right[:right.size - copy.size + 1] - copy[0]) <= MATCH_ATOL)[:64]
    return next((int(s) for s in starts if not over(copy, right[s:s + copy.size], tol).any()), None)


def covered(kept: list[np.ndarray], right: np.ndarray, tol: float) -> tuple[float, int]:
    """The share of the right output that copies hold in its place, and how many copies do."""
    mask = np.zeros(right.size, dtype=bool)
    holding = 0
    for copy in kept:
        at = placed(copy, right, tol)
        if at is not None:
            mask[at:at + copy.size] = True
            holding += 1
    return float(mask.mean()), holding


def file_is_copied(kept: list[np.ndarray], out: np.ndarray) -> bool:
    """The output file holds, bit for bit, one copy of its size, or all the copies end to end."""
    flat = out.ravel()
    same = lambda a: a.size == flat.size and np.array_equal(a, flat, equal_nan=True)  # noqa: E731
    return any(same(c) for c in kept) or (bool(kept) and same(np.concatenate(kept)))


class CopiedBack(Step):
    """A failing case whose runs again agreed bit for bit, run once with every copy from the device
    kept: did the right output reach the host, and is the file what it got?"""

    name = "the copies back from the device, kept"

    def applies(self, ctx: Context) -> bool:
        return ctx.verdict == "WRONG" and student_gpu_program(ctx.program) and layered(ctx.program) and \
            ctx.trial is not None and not ctx.found_cause and not ctx.has(Kind.RACE, Kind.INTERMITTENT)

    def run(self, ctx: Context) -> list[Finding]:
        case = ctx.trial
        folder = ctx.work / "copied-back"
        folder.mkdir(exist_ok=True)
        for old in folder.glob("copy-*.bin"):
            old.unlink()
        if not ctx.starting(f"every copy from the device kept, on {case.label}"):
            return []
        program = with_setting(ctx.program, settings.copied_back(str(folder)))
        _, out = run_once(program, case, ctx.work / "copied.out", ctx.launcher, min(RUN_TIMEOUT_S, ctx.budget.left))
        kept = copies(folder)
        if not kept:
            ctx.done.append(f"no copy from the device to the host seen on {case.label} (mapped or managed memory, "
                            "or copies fa's launch layer does not see)")
            return []
        right = np.asarray(case.expected, dtype=np.float64).ravel()
        share, holding = covered(kept, right, ctx.tol)
        n = f"{len(kept)} cop{'y' if len(kept) == 1 else 'ies'} from the device ({sum(c.size for c in kept) * 4} bytes)"
        if out is not None and file_is_copied(kept, out):
            ctx.done.append(f"the output file holds what {n} brought, bit for bit: its wrong values came from the "
                            "device")
            return []
        if share < COVERED or (out is not None and not over(out, case.expected, ctx.tol).any()):
            ctx.done.append(f"{n} kept on {case.label}: {share:.0%} of the right output among them")
            return []
        shown = source_lines(ctx.source, WRITE_LINES, 2) if ctx.source else []
        lines = f"; lines that write the file and copy back in {ctx.source.name}: {quoted(shown)}" if shown else ""
        file = f"the output file has {int(over(out, case.expected, ctx.tol).sum())} of {out.size} values wrong" \
            if out is not None else "the output file is not the output's size, or was not written"
        return [Finding(Kind.MEASURED, [
            f"measured: the copies back from the device held the right output ({holding} of {n} hold it, "
            f"{share:.0%} of its values in place), yet {file}, on {case.label}: the device computed it; the host "
            f"wrote the file from other memory than the copies' destination, from another place in it, or before "
            f"they arrived{placed_in_file(out, case, ctx.tol)}{lines}"], dict(copies=len(kept), copies_right=holding,
                                                                    case=case.label))]


def placed_in_file(out: np.ndarray | None, case, tol: float) -> str:
    """Where the file holds the right values at other places (the probes' layout search, on the
    trial case): "; the file holds ... at offset FORMULA (MEANING) ..."; "" where it does not."""
    if out is None:
        return ""
    move = moved(out.astype(np.float32), np.asarray(case.expected), tol, (case.shape.B, case.shape.N, case.shape.d))
    return "" if move is None else (f"; the file holds the value of batch b, row r, column c at {move.where}, for "
                                    f"{move.placed} of its {move.wrong} wrong values")
