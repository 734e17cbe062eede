"""What the cases of one run say together: verdicts that change where a usual size product
passes 2^31 (a 32-bit size), or with N or d not a multiple of a tile; the cases to run next."""
from __future__ import annotations

import itertools

from ..cases.format import Shape
from ..report.tables import one_of
from .findings import Finding, Kind
from .mistakes import KEY_TILES


# ---------------------------------------------------------------- across cases: a size
# Products a program computes in int, by name: shape -> value.
SIZE_PRODUCTS = [
    ("N*N*4 bytes", lambda s: s.N * s.N * 4, "N"),
    ("N*N", lambda s: s.N * s.N, "N"),
    ("B*N*d*4 bytes", lambda s: s.B * s.N * s.d * 4, "B"),
    ("B*N*d", lambda s: s.B * s.N * s.d, "B"),
    ("3*B*N*d*4 bytes (the input)", lambda s: 12 * s.B * s.N * s.d, "B"),
    ("B*N*N*4 bytes", lambda s: s.B * s.N * s.N * 4, "B"),
    ("B*N*N", lambda s: s.B * s.N * s.N, "B"),
]
LIMITS = [(2**31, "2^31"), (2**32, "2^32")]


def binary_size(n: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:g} {unit}"
    return str(n)


def size_finding(shapes_passed: list[Shape], shapes_failed: list[Shape]) -> Finding | None:
    """A usual product that is below 2^31 (or 2^32) on every passing case and at or above it on
    every failing one: the verdict changes where a 32-bit size would overflow."""
    if not shapes_passed or not shapes_failed:
        return None
    for name, product, axis in SIZE_PRODUCTS:
        for limit, limit_name in LIMITS:
            if all(product(s) < limit for s in shapes_passed) and all(product(s) >= limit for s in shapes_failed):
                good = max(shapes_passed, key=product)
                bad = min(shapes_failed, key=product)
                value = product(bad)
                shown = binary_size(value) if "bytes" in name else f"{value:,}"
                span = (f"passes up to {axis}={getattr(good, axis)}, fails from {axis}={getattr(bad, axis)}"
                        if all(getattr(s, axis) < getattr(bad, axis) for s in shapes_passed) else
                        f"passes up to {good.B}x{good.N}x{good.d}, fails from {bad.B}x{bad.N}x{bad.d}")
                return Finding(Kind.SIZE, [f"size: {span}: {name} = {shown} passes {limit_name} there: a 32-bit size? "
                                        "(an int holding a size or an index: compute it in size_t)"],
                               dict(product=name, limit=limit_name, passes=str(good), fails=str(bad)))
    return None


def sizes_crossing(passed: list[Shape], failed: Shape) -> str | None:
    """The usual products that reach 2^31 on one failing shape and on no passing one, in words
    ("there B*N*N = 2,147,483,648: 2^31 or more, on no input passed"); None where none does."""
    limit, limit_name = LIMITS[0]
    crossing = [f"{name} = {binary_size(product(failed)) if 'bytes' in name else f'{product(failed):,}'}"
                for name, product, _ in SIZE_PRODUCTS
                if product(failed) >= limit and all(product(s) < limit for s in passed)]
    return f"there {', '.join(crossing)}: {limit_name} or more, on no input passed" if crossing else None


def under_limit(failed: Shape, step: int = 128) -> Shape | None:
    """One batch at the longest N (a multiple of `step`, at most the failed input's) whose usual
    products all stay under 2^31, at its d: where a mistake that needs a 32-bit size cannot show."""
    limit = LIMITS[0][0]
    for N in range(failed.N - failed.N % step, 0, -step):
        if all(product(Shape(1, N, failed.d)) < limit for _, product, _ in SIZE_PRODUCTS):
            return Shape(1, N, failed.d)
    return None


# ---------------------------------------------------------------- across cases: a split
def not_multiple(tile: int):
    return (f"N is not a multiple of {tile}", lambda s: s.N % tile != 0)


# Features of a shape that split a run's verdicts: (what, true of the failing cases).
SPLITS = [*(not_multiple(t) for t in KEY_TILES),
          ("d = 32", lambda s: s.d == 32), ("d = 64", lambda s: s.d == 64), ("B > 1", lambda s: s.B > 1),
          ("B is odd", lambda s: s.B % 2 == 1),
          ("B = 1", lambda s: s.B == 1)]  # B = 1: a half of the batches, or a chunk, of 0


def listing_of(values) -> str:
    shown = sorted(set(values))
    return ", ".join(map(str, shown[:4])) + (", ..." if len(shown) > 4 else "")


def split_findings(passed: list[Shape], failed: list[Shape]) -> list[Finding]:
    """Features true of every failing case and of no passing one ("fails only where N is not a
    multiple of 32", "only d = 32", "only B > 1"), and an N from which every case fails."""
    if not passed or not failed:
        return []
    found = []
    splitting = [what for what, holds in SPLITS if all(holds(s) for s in failed) and not any(holds(s) for s in passed)]
    tiles = [what.rsplit(" ", 1)[1] for what in splitting if what.startswith("N is not")]
    said = [w for w in splitting if not w.startswith("N is not") or w.endswith(f" {tiles[0]}")]  # tiles said once
    lowest = min(s.N for s in failed)
    n_fits = all(s.N < lowest for s in passed)  # from some N on fits too: said beside a split, never left out
    for what in said:
        axis = "N" if what.startswith("N") else what[0]
        alike = f"; from N = {lowest} on fits them as well: these cases do not tell which" if n_fits else ""
        if what.startswith("N is not") and len(tiles) > 1:
            alike += f"; not a multiple of {one_of(tiles[1:])} fits them as well: these cases do not tell the " \
                "tiles apart"
        if others := [w for w in said if w != what]:  # splits on other axes that hold as well
            alike += f"; where {' and where '.join(others)} fits them as well: these cases do not tell which"
        found.append(Finding(Kind.SPLIT, [
            f"split: fails only where {what} (failing {axis}: {listing_of(getattr(s, axis) for s in failed)}; "
            f"passing {axis}: {listing_of(getattr(s, axis) for s in passed)}{alike})"], dict(only_where=what)))
    from_n = not found and n_fits
    pairs = [] if found else pair_splits(passed, failed)
    for what in pairs[:1]:
        alike = f"; from N = {lowest} on fits them as well: these cases do not tell which" if from_n else ""
        alike += f"; where {pairs[1]} fits them as well" if len(pairs) > 1 else ""
        found.append(Finding(Kind.SPLIT, [f"split: fails only where {what}{PAIR_HINTS.get(what, '')}{alike}"],
                             dict(only_where=what)))
    if from_n:
        alike = f"; where {pairs[0]} fits them as well: these cases do not tell which" if pairs else ""
        found.append(Finding(Kind.SPLIT, [
            f"split: fails from N = {lowest} on, passes up to N = {max(s.N for s in passed)} (a buffer sized for a "
            f"largest N, shared memory or registers that grow with N?{alike})"], dict(from_N=lowest)))
    return found


# Two features that together split where neither alone does, with what such a split suggests.
PAIR_HINTS = {"d = 64 and B > 1": " (a batch's offset or stride written with 32 where d belongs: right at d = 32?)",
              "d = 32 and B > 1": " (a batch's offset or stride written with 64 where d belongs: right at d = 64?)"}


def pair_splits(passed: list[Shape], failed: list[Shape]) -> list[str]:
    """Two features of SPLITS (not of one axis) true together of every failing case and of no
    passing one, where no feature alone splits them: "d = 64 and B > 1"."""
    found = []
    for (a, holds_a), (b, holds_b) in itertools.combinations(SPLITS, 2):
        if a[0] == b[0]:  # one axis (two tiles of N, d = 32 and d = 64, two of B): no pair
            continue
        both = lambda s: holds_a(s) and holds_b(s)  # noqa: E731
        if all(both(s) for s in failed) and not any(both(s) for s in passed):
            found.append(f"{b} and {a}" if a.startswith("N") else f"{a} and {b}")
    return found


SUGGESTED = 2  # cases suggested at most


def suggestions(passed: list[Shape], failed: list[Shape], suite_cases: dict) -> Finding | None:
    """Where every case failed, cases that would split the verdicts: the other d, B = 1, an N that
    is no multiple of 32 (fa gen makes the inputs the suites lack)."""
    if passed or not failed:
        return None
    d = failed[0].d
    everything = "the one case run failed" if len(failed) == 1 else f"all {len(failed)} cases run failed"
    ideas = []
    if all(s.d == d for s in failed):
        other = [c for c in suite_cases.values() if c.shape.d != d]
        if other:
            c = min(other, key=lambda c: c.shape.flops)
            ideas.append(f"fa run {c.name} (d = {c.shape.d}; every case run has d = {d})")
    smallest = min(failed, key=lambda s: s.flops)
    if all(s.B > 1 for s in failed):
        ideas.append(f"fa gen -B 1 -N {smallest.N} -d {smallest.d} -o b1.in, then fa run b1.in (B = 1; every case "
                     "run has B > 1)")
    if all(s.N % 32 == 0 for s in failed):
        ideas.append(f"fa gen -B 2 -N 1000 -d {smallest.d} -o n1000.in, then fa run n1000.in (N = 1000, not a "
                     "multiple of 32)")
    if not ideas:
        return None
    return Finding(Kind.SUGGEST, [f"{everything}; to see which inputs fail: " + "; ".join(ideas[:SUGGESTED])],
                   dict(suggested=ideas))


def across_cases(passed: list[Shape], failed: list[Shape], suite_cases: dict, suggest: bool = True) -> list[Finding]:
    """What the verdicts of one run say together: a 32-bit size, a split, or (with suggest, where
    neither shows) cases to run."""
    size = size_finding(passed, failed)
    splits = [f for f in split_findings(passed, failed) if not (size and "from_N" in f.fields)]  # size says more
    found = ([size] if size else []) + splits
    hint = suggestions(passed, failed, suite_cases) if suggest and not found else None
    return found + ([hint] if hint else [])


# ---------------------------------------------------------------- across cases: the catalogue's leads
def narrow_leads(results: list) -> None:
    """Where the catalogue's leads of some failing cases fit every failing case it named any lead
    for, the leads that fit only some of them are taken out of those cases' "looks like" (kept in
    the fields apart), each said on a line of its own with the cases it does not fit (one mistake
    that explains every case is the likelier reading; a program with two keeps both said).
    (Two leads at B = 2, "batch b holds b-1's output" and "every batch from batch 0's input", are
    one output there; B = 3 tells them apart.)"""
    led = [r for r in results if r.verdict == "WRONG" and r.diagnosis and r.diagnosis.fields.get("mistakes")]
    common = set.intersection(*(set(r.diagnosis.fields["mistakes"]) for r in led)) if len(led) >= 2 else set()
    if not common:
        return
    for r in led:
        fields = r.diagnosis.fields
        alone = [i for i, name in enumerate(fields["mistakes"]) if name not in common]
        if not alone:
            continue
        names = [fields["looks_like"][i] for i in alone]
        r.diagnosis.lines = [line for line in r.diagnosis.lines
                             if not any(line.startswith(f"looks like: {name}; ") for name in names)]
        for i, name in zip(alone, names):  # each with the failing cases it does not fit
            others = [o.target.name for o in led if fields["mistakes"][i] not in o.diagnosis.fields["mistakes"]]
            r.diagnosis.lines.append(f"also fits this case, not {', '.join(others)} (which the leads above fit too): "
                                     + name)
        fields["leads_of_this_case_alone"] = names  # kept: a program with two mistakes may need them
        fields["looks_like"] = [n for i, n in enumerate(fields["looks_like"]) if i not in alone]
        fields["mistakes"] = [n for i, n in enumerate(fields["mistakes"]) if i not in alone]
