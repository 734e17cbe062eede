"""A kernel that reads shared memory no thread of its block wrote: a tile load that leaves part of
a tile unwritten (its bound, its vector width, its count of threads). compute-sanitizer's initcheck
sees only global memory, and the GPU here may leave zeros or the last kernel's values there, the
same every run. A block's shared memory starts with what the kernel before it on that SM left, so
fa's launch layer can fill each SM's shared memory before every launch (FA_SHARED_POISON,
src_cuda/launch_log.h): a failing case whose runs again agreed bit for bit is run once with NaN
there and once with POISON_VALUE. An output that then holds NaN where it held none, or changes,
read what shared memory held before the kernel:

  measured: with each SM's shared memory filled with NaN before each of its launches, 8190 of
  8192 values are NaN (none as built), and with 1000.0 there 8191 values change: its kernel reads
  shared memory that no thread of its block wrote first; ...
"""
from __future__ import annotations

import re

import numpy as np

from .. import settings
from .diagnose import quoted, source_lines
from .findings import Finding, Kind
from .reruns import over
from .slow_device import layered_wrong_trial, with_setting
from .steps import Context, Step

POISON_VALUE = 1000.0  # far outside the course's values of Q, K and V (within [-3, 3])
NOT_FILLED = "fa-launch: FA_SHARED_POISON: "  # the layer's line where a fill failed or was partial
SHARED_ARRAY = re.compile(r"__shared__\s+(?:[\w:<>]+\s+)+?(\w+)\s*\[")  # static or extern shared arrays


def poisoned(ctx: Context, value: str) -> tuple[np.ndarray | None, bool]:
    """The program's output on the trial case with shared memory filled with `value` first, and
    whether fa's launch layer filled it whole (it says on stderr where it could not)."""
    program = with_setting(ctx.program, settings.shared_poison(value))
    result, got = ctx.run_trial(program, "poisoned.out")
    return got, NOT_FILLED not in (result.stderr if result is not None else "")


def store_lines(ctx: Context) -> str:
    """The lines that store into the source's shared arrays, where fa has the source."""
    if ctx.source is None:
        return ""
    try:
        names = sorted(set(SHARED_ARRAY.findall(ctx.source.read_text(errors="replace"))))
    except OSError:
        return ""
    if not names:
        return ""
    alternatives = "|".join(map(re.escape, names))
    stores = source_lines(ctx.source, rf"\b(?:{alternatives})\b\s*(?:\[[^;]*?\]\s*[-+*/]?=(?!=)|\+)", 3)
    if not stores:
        return ""
    loop = filling_loop(ctx.source, stores[0][0])
    return (f"; lines that store into its shared arrays ({', '.join(names)}) in {ctx.source.name}: {quoted(stores)}"
            + (f"; the loop that makes those stores (its start, bound and stride): {quoted([loop])}"
               if loop and loop != stores[0] else "") + (whole_tile_loops(ctx.source, loop) if loop else "")
            + (returns_before(ctx.source, loop) if loop else ""))


def returns_before(source, loop: tuple[int, str]) -> str:
    """Where the load loop strides over the block's threads: the `return`s of its kernel above it
    (threads past N that leave before the load leave their share of the tile unwritten: set47's s04)."""
    if not re.search(r"\+=\s*(?:blockDim\.\w|[A-Z_]*THREADS?\b|NT\b)", loop[1]):
        return ""
    functions = [n for n, _ in source_lines(source, r"__global__|__device__", limit=loop[0]) if n < loop[0]]
    start = functions[-1] if functions else 0
    exits = [(n, code) for n, code in source_lines(source, r"\breturn\s*;", limit=loop[0])
             if start < n < loop[0]]
    if not exits:
        return ""
    return (f"; a return above that loop in its function: {quoted(exits[:2])} (threads that leave there, where not "
            "the whole block does, never make their share of the loop's stores, which strides over all the block's "
            "threads)")


def whole_tile_loops(source, loop: tuple[int, str]) -> str:
    """Loops bounded by a name that differs from one in the load loop's bound by its case alone (BC
    where the load stops at bc): they read the tile's slots past what a short tile's load wrote."""
    parts = loop[1].split(";")
    # a count of the tile's rows in the bound (bc in `e < bc * D`): two letters or more, not the sizes N, d
    bound = {name for name in re.findall(r"\b[A-Za-z_]\w+\b", parts[1]) if not name.isupper()} if len(parts) > 2 \
        else set()
    shown, names = [], []
    for name in sorted(bound):
        for twin in {name.upper(), name.lower()} - {name}:
            found = [line for line in source_lines(source, rf"^for\s*\([^;]*;[^;]*<=?\s*{re.escape(twin)}\b", 3)
                     if line not in shown]
            shown, names = shown + found, names + ([name] if found else [])
    if not shown:
        return ""
    return (f"; loops over the tile bounded by its whole size where the load stops at its count (a case apart: "
            f"{', '.join(names)}): {quoted(shown)} (a short tile's slots past its count read there: what the tile "
            "before left, or what nothing wrote?)")


def filling_loop(source, store: int, reach: int = 3) -> tuple[int, str] | None:
    """The `for` line of a store: its own line (a one-line loop), else the nearest just above it
    (within `reach` lines): where a tile load's bound and stride are."""
    loops = source_lines(source, r"^for\s*\(", limit=store)  # every loop up to the store's line at most
    return next(((n, code) for n, code in reversed(loops) if store - reach <= n <= store), None)


def non_numbers_changed(built: np.ndarray, *filled: np.ndarray) -> int:
    """Values not finite as built that a fill turned into another non-number (inf into NaN or -inf)."""
    odd = ~np.isfinite(built)
    return int(max(np.count_nonzero(odd & ~((f == built) | (np.isnan(f) & np.isnan(built)))) for f in filled))


class UnwrittenShared(Step):
    """A failing case whose runs again agreed bit for bit, run with each SM's shared memory filled
    first: does the output read what was there before the kernel?"""

    name = "shared memory filled before each launch"

    def applies(self, ctx: Context) -> bool:
        return layered_wrong_trial(ctx, Kind.RACE, Kind.INTERMITTENT, Kind.HARMLESS)

    def run(self, ctx: Context) -> list[Finding]:
        outputs, whole = [], True
        for value in ("nan", f"{POISON_VALUE:g}"):
            if not ctx.starting(f"shared memory filled with {value} before each launch, on {ctx.trial.label}"):
                return []
            got, filled = poisoned(ctx, value)
            outputs.append(got)
            whole = whole and filled
        if not ctx.starting(f"as built, on {ctx.trial.label}"):
            return []
        _, built = ctx.run_trial(ctx.program, "built.out")
        with_nan, with_value = outputs
        if built is None or with_nan is None or with_value is None:
            return [Finding(Kind.OBSERVED, ["shared memory filled before each launch: a run wrote no output of the "
                                            "right size; no claim from it"])]
        nans = int(np.count_nonzero(np.isnan(with_nan) & np.isfinite(built)))
        # past the tolerance (no last-bit noise), and a number on one side at least: inf turned NaN is no evidence
        # (a weight that overflowed, times a value read, says nothing of where the value came from)
        either_finite = np.isfinite(with_value) | np.isfinite(built)
        changed = int((over(with_value, built, ctx.tol) & either_finite).sum())
        size, case = built.size, ctx.trial.label
        if not nans and not changed and (odd := non_numbers_changed(built, with_nan, with_value)):
            ctx.done.append(f"with shared memory filled with NaN and with {POISON_VALUE:g} before each launch on "
                            f"{case} no finite value changed past {ctx.tol:g}, but {odd} of the values not finite as "
                            "built became other non-numbers (no claim from it)")
            return []
        if not nans and not changed:
            ctx.done.append(f"the same output with shared memory filled with NaN and with {POISON_VALUE:g} before "
                            f"each launch on {case}" + ("" if whole else " (fa's launch layer could not fill all of "
                                                                           "it: see its lines on stderr)"))
            return []
        filled = f"with each SM's shared memory filled with NaN before each of its launches, {nans} of {size} " \
            f"values are NaN where as built they are not, and with {POISON_VALUE:g} there {changed} of {size} " \
            f"values change by more than {ctx.tol:g}, on {case}"
        if not changed:  # NaN spreads where a finite value does not matter: a read that is not the failure
            return [Finding(Kind.OBSERVED, [
                f"shared memory: {filled}: its kernel reads shared memory no thread of its block wrote, but a finite "
                "value there changes nothing: not what makes the output wrong" + store_lines(ctx)],
                dict(poisoned_nan=nans, case=case))]
        return [Finding(Kind.MEASURED, [
            f"measured: {filled}, where its runs as built agree bit for bit: its kernel reads shared memory that no "
            "thread of its block wrote first (a tile load that leaves part of a tile unwritten: its bound, its vector "
            "width or its count of threads; initcheck sees global memory only)" + store_lines(ctx)],
            dict(poisoned_nan=nans, poisoned_changed=changed, case=case))]
