"""Where a wrong output went wrong: on the device, or between the device and the file. fa's launch
layer keeps every copy from the device to the host when asked (FA_COPIED_BACK, src_cuda/
launch_log.h: one file a copy, in order). A failing case whose runs again agreed bit for bit is run
once so, and the copies are laid over the right output:

- the copies hold the right output (within the tolerance), and the file does not: the file is not
  what they brought (written from other memory than their destination, from another place in it,
  before they arrived, or changed on the host after; a cause, with the lines that write the file
  and that copy back);
- the copies bring fewer bytes than the output holds, and the file is wrong past them: the rest of
  the output never left the device (a copy back given too few bytes; a cause, with the copy's lines);
- the file holds what the copies brought: its wrong values came from the device (said among what
  was tried; the probes then measure the device's arithmetic).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .. import settings
from ..report.tables import plural
from .diagnose import quoted, source_lines
from .findings import Finding, Kind
from .probes.layout import moved
from .reruns import over
from .slow_device import layered_wrong_trial, with_setting
from .steps import Context, Step

NOT_KEPT = "fa-launch: FA_COPIED_BACK: "  # the layer's line where a copy was not kept
COVERED = 0.99  # of the right output, placed by copies that hold it: the copies hold the right output
# the lines the claim points at: what writes the output file, then what copies back
WRITE_LINES = (r"\bfwrite\s*\(|\.write\s*\(", r"Memcpy\w*\s*\(.*(DeviceToHost|Default)")


def copies(folder: Path) -> list[np.ndarray]:
    """The copies the run kept, in the order it made them, as float32 values (a copy of a size no
    multiple of 4 bytes is no part of the output)."""
    kept = sorted(folder.glob("copy-*.bin"))
    return [np.fromfile(p, dtype="<f4") for p in kept if p.stat().st_size % 4 == 0]


FIRST_VALUES = 4  # values that must match where a copy is tried (the rest is then checked whole)
TRIED = 64  # places tried, the lowest first


def lies_in(part: np.ndarray, whole: np.ndarray, tol: float) -> int | None:
    """Where `part` lies whole in `whole` (both flat), within tol; None where nowhere. Tried where
    its first FIRST_VALUES values match."""
    if part.size == 0 or part.size > whole.size or not np.isfinite(part[:FIRST_VALUES]).all():
        return None
    places = whole.size - part.size + 1
    match = np.ones(places, dtype=bool)
    for k in range(min(FIRST_VALUES, part.size)):
        match &= np.abs(whole[k:k + places] - part[k]) <= tol
    return next((int(at) for at in np.flatnonzero(match)[:TRIED] if not over(part, whole[at:at + part.size], tol).any()),
                None)


def placed(copy: np.ndarray, right: np.ndarray, tol: float) -> tuple[int, int] | None:
    """(where in the right output, how many of its values) a copy holds, within tol: the copy whole
    at its place in the output, or the whole output inside a longer copy (an output buffer that holds
    more: a row's max or sum beside it); None where neither."""
    if copy.size <= right.size:
        at = lies_in(copy, right, tol)
        return None if at is None else (at, copy.size)
    return None if lies_in(right, copy, tol) is None else (0, right.size)


def covered(kept: list[np.ndarray], right: np.ndarray, tol: float) -> tuple[float, int]:
    """The share of the right output that copies hold in its place, and how many copies do."""
    mask = np.zeros(right.size, dtype=bool)
    holding = 0
    for copy in kept:
        if (where := placed(copy, right, tol)) is not None:
            mask[where[0]:where[0] + where[1]] = True
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
        return layered_wrong_trial(ctx, Kind.RACE, Kind.INTERMITTENT)

    def run(self, ctx: Context) -> list[Finding]:
        case = ctx.trial
        folder = ctx.work / "copied-back"
        folder.mkdir(exist_ok=True)
        for old in folder.glob("copy-*.bin"):
            old.unlink()
        if not ctx.starting(f"every copy from the device kept, on {case.label}"):
            return []
        program = with_setting(ctx.program, settings.copied_back(str(folder)))
        result, out = ctx.run_trial(program, "copied.out")
        if out is None:  # its judged run wrote an output of the right size: this run failed on its own
            ctx.done.append(f"the run with every copy from the device kept wrote no output of the right size on "
                            f"{case.label} ({result.error or 'another size'}): no claim from it")
            return []
        kept = copies(folder)
        missing = "; not every copy kept (fa's launch layer's lines on stderr)" if NOT_KEPT in result.stderr else ""
        if not kept:
            ctx.done.append(f"no copy from the device to the host seen on {case.label} (mapped or managed memory, "
                            f"or copies fa's launch layer does not see){missing}")
            return []
        right = np.asarray(case.expected, dtype=np.float64).ravel()
        if not missing and (short := too_few_bytes(kept, out, right, ctx.tol)):
            shown = source_lines(ctx.source, WRITE_LINES[1], 2) if ctx.source else []
            lines = f"; lines that copy back in {ctx.source.name}: {quoted(shown)}" if shown else ""
            return [Finding(Kind.MEASURED, [f"measured on {case.label}: {short}{lines}"],
                            dict(copies=len(kept), copied_bytes=sum(c.size for c in kept) * 4, case=case.label))]
        share, holding = covered(kept, right, ctx.tol)
        n = f"{plural(len(kept), 'copy', 'copies')} from the device ({sum(c.size for c in kept) * 4} bytes)"
        if file_is_copied(kept, out):
            ctx.done.append(f"the output file holds what {n} brought, bit for bit: its wrong values came from the "
                            "device")
            return []
        wrong = int(over(out, case.expected, ctx.tol).sum())
        if share < COVERED or not wrong:
            ctx.done.append(f"{n} kept on {case.label}: {share:.0%} of the right output among them, within "
                            f"{ctx.tol:g}{missing}")
            return []
        shown = source_lines(ctx.source, WRITE_LINES, 2) if ctx.source else []
        lines = f"; lines that write the file and copy back in {ctx.source.name}: {quoted(shown)}" if shown else ""
        return [Finding(Kind.MEASURED, [
            f"measured: the copies back from the device held the right output ({holding} of {n} hold it, "
            f"{share:.0%} of its values in place, within {ctx.tol:g}), yet the output file has "
            f"{wrong} of {out.size} values wrong, on {case.label}: the device "
            "computed it; the file is not what the copies brought (written from other memory than their "
            "destination, from another place in it, before they arrived, or changed on the host after)"
            f"{placed_in_file(out, case, ctx.tol)}{lines}"], dict(copies=len(kept), copies_right=holding,
                                                                 case=case.label))]


def too_few_bytes(kept: list[np.ndarray], out: np.ndarray, right: np.ndarray, tol: float) -> str | None:
    """Where the copies from the device, end to end, are the file's first values bit for bit, are
    the right output there, and are fewer values than the output holds, with the file's wrong
    values all past them (most of the rest): what they brought against the output's size, and what
    the count they were given looks like (a pointer's size, the count of values given as bytes)
    where it does; None otherwise (a copy of another buffer, a half-precision output, a flag)."""
    flat, brought, size = out.ravel(), sum(c.size for c in kept), out.size
    if not kept or brought >= size:
        return None
    head = np.concatenate(kept)
    wrong = over(flat, right, tol)
    if not np.array_equal(head, flat[:brought], equal_nan=True) or wrong[:brought].any() \
            or wrong[brought:].sum() < (size - brought) / 2:
        return None
    looks = {8: "8 bytes, the size of a pointer: sizeof of the output's pointer where its size in bytes belongs",
             size: "as many bytes as the output has values: a count of floats given where bytes belong"}
    said = looks.get(brought * 4, "")
    return (f"the copies from the device to the host ({plural(len(kept), 'copy', 'copies')}) brought {brought * 4:,} "
            f"bytes of the output's {size * 4:,}: "
            f"the file's first {brought:,} values, right; {int(wrong.sum()):,} of the {size - brought:,} after them "
            f"are wrong: the rest of the output never left the device (a copy back given too few bytes"
            + (f"; {said}" if said else "") + ")")


def placed_in_file(out: np.ndarray, case, tol: float) -> str:
    """Where the file holds the right values at other places (the probes' layout search, on the
    trial case): "; the file holds ... at offset FORMULA (MEANING) ..."; "" where it does not."""
    move = moved(out.astype(np.float32), np.asarray(case.expected), tol, (case.shape.B, case.shape.N, case.shape.d))
    return "" if move is None else (f"; the file holds the value of batch b, row r, column c at {move.where}, for "
                                    f"{move.placed} of its {move.wrong} wrong values")
