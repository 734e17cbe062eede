"""Experiments that tell causes apart: the probe rerun with one thing changed.

  batch alone   a later batch that is wrong among B batches, run as the only batch (B = 1); batch 0
                wrong in some of its rows among them, run alone: right so, the batches meet (the
                row it is wrong from placed as the next batch's output at b*N*c, c a constant where
                d belongs)
  whole tiles   N cut to a multiple of 16, 32, 64 and 128 in turn: where the program is right
                at every multiple and wrong at the case's N, a partial tile is what it gets wrong,
                said with the rows it leaves wrong (the last tile's, or all but row 0: a pitch)
  wavefronts    hw4.hip through the MI210 emulation, built again with 32-lane wavefronts: right
                with 32 lanes and wrong with the MI210's 64 is a 32-lane assumption (the shuffle
                and lane lines of the source are shown)
"""
from __future__ import annotations


import numpy as np

from ...programs import programs, wave64
from ..diagnose import quoted, source_lines
from ..findings import Finding, Kind
from ..mistakes import BATCH_LINES, KEY_TILES
from . import design, underflow
from .lane_columns import REDUCTION_LOOK, one_lanes_columns
from .readings import measured
from .step import Context, Probe, guard_payload, logits, softmax_rows, spans


def right(ctx: Context, got: np.ndarray | None, inp) -> bool | None:
    if got is None:
        return None
    return bool(np.all(np.abs(got - inp.output()) <= ctx.tol))


PART_OF_A_BATCH = 0.9  # a wrong batch right alone, wrong in fewer of its rows than this: no offset is said

STRIDED_COPY = r"\b(?:cuda|hip)Memcpy2D\w*"  # a copy whose pitches place each batch (or row) apart
# a pointer set to a batch's place (`const float* q = qkv + (size_t)b * 3 * N * D`, `float* dst = out + ((size_t)b *
# N + i) * D`), not a size or an index's arithmetic
BATCH_OFFSET = r"\*\s*\w+\s*=[^;]*\+\s*\(?\s*(?:\(size_t\)\s*)?(?:b|bb|batch\w*|blockIdx\.[yz])\s*\*"
# the lines shown: the first strided copy, then the first three batch offsets (which operand's is wrong, the
# probe does not tell: each is shown), else the lines that use a batch at all
BATCH_PLACES = (STRIDED_COPY, BATCH_OFFSET, BATCH_OFFSET, BATCH_OFFSET)


class BatchAlone(Probe):
    name = "a wrong batch run alone (B = 1)"

    def applies(self, ctx: Context) -> bool:
        if ctx.facts.named or ctx.facts.out is None or ctx.probe.shape.B < 2:
            return False
        bad = ~(np.abs(ctx.facts.out - ctx.facts.true) <= ctx.tol)
        per_batch = bad.any(axis=(1, 2))
        ctx.facts.wrong_batches = np.flatnonzero(per_batch)
        return bool(per_batch.any())  # batch 0 wrong too, even in every row: a later batch's place may reach it

    def run(self, ctx: Context) -> list[Finding]:
        b = int(ctx.facts.wrong_batches[0])
        alone = design.shrunk(ctx.probe, B=1, first_batch=b)
        right_alone = right(ctx, ctx.run(alone), alone)
        if b == 0:
            return first_batch_alone(ctx, alone, right_alone)
        rows = np.flatnonzero(~(np.abs(ctx.facts.out[b] - ctx.facts.true[b]) <= ctx.tol).all(axis=1))
        if right_alone and len(rows) < PART_OF_A_BATCH * ctx.probe.shape.N:  # an offset moves every row of it
            return [Finding(Kind.OBSERVED, [
                f"measured: batch 0 is right and batch {b} wrong on {ctx.probe.label} in rows {spans(rows)} only "
                f"({len(rows)} of {ctx.probe.shape.N}); batch {b}'s Q, K and V as the only batch ({alone.label}) give "
                "the right output: what those rows compute depends on the batch's place among the work (rows a block "
                "or a persistent loop takes after others: a state not set anew for each item, or items stopped short; "
                "or another batch's stores landing on these rows: a store past N not guarded), "
                "not said as a batch offset, which would reach every row of the batch"], dict(batch_alone=b))]
        if right_alone:
            return measured(ctx, [
                f"measured: batch 0 is right and batch {b} wrong on {ctx.probe.label}; batch {b}'s Q, K and V as the "
                f"only batch ({alone.label}) give the right output: the batch offset (where batch b's Q, K, V are read "
                "or its O written: b * 3*N*d for the input, b * N*d for the output) is wrong"],
                look=("a strided copy or a batch's offset", batch_places(ctx)),
                batch_alone=b)
        return [Finding(Kind.OBSERVED, [f"measured: batch 0 is right and batch {b} wrong on {ctx.probe.label}; "
                                        f"batch {b} alone ({alone.label}) is wrong too"])]


def batch_places(ctx: Context) -> tuple[str, ...]:
    """The patterns of the lines shown for a batch offset: BATCH_PLACES where the source has a
    pointer offset by a batch, else the first strided copy and the first line that uses a batch."""
    has_offset = ctx.source is not None and source_lines(ctx.source, BATCH_OFFSET, 1)
    return BATCH_PLACES if has_offset else (STRIDED_COPY, BATCH_LINES)


# where a single key's NaN starts: a vote over the lanes (a max or rescale taken only where all or any lane
# passes: dead lanes' -inf pass no test), then the running max's start at -inf
FIRST_MAX_LOOK = ("the running max's start or a vote on it",
                  (r"\b__(?:any|all)(?:_sync)?\s*\(", r"\b\w*m\w*\s*=\s*-\s*(?:INFINITY|FLT_MAX|HUGE_VALF|inf)"))
BATCH_STRIDES = (16, 32, 64, 128)  # a batch's stride written N*c with a constant c where N*d belongs


def first_batch_alone(ctx: Context, alone, right_alone: bool | None) -> list[Finding]:
    """Batch 0 wrong among B batches, and as the only batch (`alone`) right or not. Right alone,
    the batches meet: where batch 0 is wrong from one row to its end, and that row starts at float
    N*c (c a constant, not d), the next batch's output lands there: a batch offset of N*c where
    N*d belongs."""
    if right_alone is None:
        return [Finding(Kind.OBSERVED, [f"measured: batch 0 is wrong on {ctx.probe.label}; as the only batch "
                                        f"({alone.label}) it wrote no output of the right size"])]
    if not right_alone:
        return [Finding(Kind.OBSERVED, [f"measured: batch 0 is wrong on {ctx.probe.label}, and as the only batch "
                                        f"({alone.label}) too: not a matter of the batches meeting"])]
    B, N, d = ctx.probe.shape.B, ctx.probe.shape.N, ctx.probe.shape.d
    rows = np.flatnonzero((~(np.abs(ctx.facts.out[0] - ctx.facts.true[0]) <= ctx.tol)).any(axis=1))
    said = (f"measured: batch 0 is right as the only batch ({alone.label}) and wrong among the {B} batches of "
            f"{ctx.probe.label}, in rows {rows[0]}..{rows[-1]} ({rows.size} of {N}): what it computes depends on "
            "the other batches or on B (one batch's reads or writes reaching another's place, a batch's offset or "
            "stride, or an index or value computed with B)")
    c = rows[0] * d // N
    if rows.size == N - rows[0] and rows[0] * d % N == 0 and c in BATCH_STRIDES and c != d:
        return measured(ctx, [said + f"; row {rows[0]} starts at float {rows[0] * d} = N*{c} of the batch: batch 1's "
                              f"output lands there, as with a batch offset of b*N*{c} where b*N*d belongs ({c} written "
                              f"for d = {d})"], batch_stride=c)
    return [Finding(Kind.OBSERVED, [said])]


class WholeTiles(Probe):
    name = "N cut to whole tiles"

    def applies(self, ctx: Context) -> bool:
        return not ctx.facts.named and ctx.facts.out is not None and ctx.probe.shape.N % KEY_TILES[-1] != 0

    def run(self, ctx: Context) -> list[Finding]:
        N = ctx.probe.shape.N
        tried = {}
        for T in KEY_TILES:
            n = N - N % T
            if n >= T and n not in tried and n != N:
                cut = design.shrunk(ctx.probe, N=n)
                tried[n] = right(ctx, ctx.run(cut), cut)
        passing = [n for n, ok in tried.items() if ok]
        if not tried or len(passing) != len(tried):
            return [Finding(Kind.OBSERVED, [
                "measured: N cut to whole tiles: " + ", ".join(f"N = {n} {'right' if ok else 'wrong'}"
                                                               for n, ok in tried.items())
                + f"; N = {N} wrong"])] if tried else []
        ran = {n: ok for n, ok in {**tried, **rounded_up(ctx, N, tried)}.items() if ok is not None} | {N: False}
        said, partial, odd = tiles_fitting(ran)
        if partial and odd and (n := telling_n(N, partial[0], odd[0], ran)) is not None:
            grid = design.grown(ctx.probe, n) if n > N else design.shrunk(ctx.probe, N=n)
            if (told := right(ctx, ctx.run(grid), grid)) is not None:  # wrong: the partial tile; right: parity
                ran[n] = told
                said, partial, odd = tiles_fitting(ran)
        if not partial:
            return tile_parity(ctx, ran, said, odd)
        T = partial[0]
        also = (f"; or, alike at each of these N, an odd count of key tiles of {odd[0]}: {PARITY_WORDS}") if odd else ""
        lines = [f"measured: {said}: wrong exactly where N is no multiple of {T}{also}; {partial_rows(ctx, T)}"
                 f"{' and where the buffer index is set' if odd else ''}"]
        unmasked = unmasked_keys(ctx, [t for t in KEY_TILES if N % t])
        return measured(ctx, lines + ([unmasked] if unmasked else []), whole_tiles=sorted(ran), partial_tile=T)


def partial_rows(ctx: Context, T: int) -> str:
    """Which rows a partial last tile of T leaves wrong, and where to look: only the last tile's
    query rows (a row bound), every row but row 0 of each batch (a row pitch of N against one
    rounded up to T: row 0 starts at 0 at either pitch), or the rows in general (a key bound)."""
    wrong = (~(np.abs(ctx.facts.out - ctx.facts.true) <= ctx.tol)).any(axis=2)  # (B, N): rows wrong
    N = ctx.probe.shape.N
    start = N - N % T
    if not start:  # N under one tile: its only tile is the partial one
        return (f"N = {N} is less than one tile of {T}, its only tile a partial one; look at the bounds inside a "
                "tile (j < N, row < N) and the tile counts")
    if not wrong[:, :start].any():
        return (f"only rows {start}..{N - 1}, the last, partial tile of {T} query rows, are wrong; look at the "
                "bounds inside a tile (row < N) and the tile counts")
    if not wrong[:, 0].any() and wrong[:, 1:].all():
        return (f"every row but row 0 of each batch is wrong: row 0 starts at float 0 at any row pitch, so a row "
                f"pitch of N in one place and N rounded up to {T} (a padded row, as of a buffer of scores) in another "
                "fits; look at the pitch each kernel is given and uses")
    return (f"not only the last tile's query rows: the last, partial tile of {T} keys, or a size rounded up to "
            f"{T} in one place and N in another; look at the bounds inside a tile (j < N, row < N) and the tile counts")


PARITY_WORDS = ("a state carried from tile to tile that an odd count leaves wrong (a double buffer's index not reset "
                "where the next block or batch begins, or a ping-pong that assumes an even count)")


def rounded_up(ctx: Context, N: int, tried: dict[int, bool | None]) -> dict[int, bool | None]:
    """N rounded up to whole tiles of each T it is no multiple of (as many tiles as N's, none of T
    partial), each run: right or not."""
    ups: dict[int, bool | None] = {}
    for n in (-(-N // T) * T for T in KEY_TILES if N % T):
        if n not in tried and n not in ups:
            up = design.grown(ctx.probe, n)
            ups[n] = right(ctx, ctx.run(up), up)
    return ups


def telling_n(N: int, T: int, T2: int, ran: dict) -> int | None:
    """An N near N that no multiple of T is yet with an even count of tiles of T2: wrong there only
    where the partial tile of T is at fault, right only where an odd count of tiles of T2 is."""
    return next((n for n in range(max(T2, N - 2 * T), N + 2 * T) if n % T and -(-n // T2) % 2 == 0 and n not in ran),
                None)


def tiles_fitting(ran: dict[int, bool]) -> tuple[str, list[int], list[int]]:
    """The runs in words; the tiles T whose partial last tile, and those whose odd count, is wrong
    exactly where the runs were."""
    said = ", ".join(f"N = {n} {'right' if ok else 'wrong'}" for n, ok in sorted(ran.items()))
    partial = [T for T in KEY_TILES if all((n % T != 0) == (not ok) for n, ok in ran.items())]
    return said, partial, [T for T in KEY_TILES if odd_counts_wrong(ran, T)]


def odd_counts_wrong(ran: dict[int, bool | None], T: int) -> bool:
    """Wrong exactly where N has an odd count of tiles of T (and the runs hold both counts)."""
    counts = {n: -(-n // T) for n in ran}
    return len({c % 2 for c in counts.values()}) > 1 and all((counts[n] % 2 == 1) == (ok is False)
                                                               for n, ok in ran.items())


def tile_parity(ctx: Context, ran: dict[int, bool | None], said: str, odd: list[int]) -> list[Finding]:
    """No partial tile of any T fits the runs: where an odd count of tiles of T does, one more
    whole-tile N with another odd count decides it (named); else the runs said as measured."""
    for T in odd:
        counts = {n: -(-n // T) for n in ran}
        more = next((c for c in (3, 5, 9, 11) if c not in counts.values() and c * T <= ctx.probe.shape.N), None)
        if more is None:
            continue
        cut = design.shrunk(ctx.probe, N=more * T)
        if right(ctx, ctx.run(cut), cut) is False:
            return measured(ctx, [
                f"measured: {said}, N = {more * T} wrong: wrong exactly where the count of key tiles of {T} is odd "
                f"({', '.join(f'{n}: {c}' for n, c in sorted(counts.items()))}; {more * T}: {more}), and no partial "
                f"tile of {', '.join(map(str, KEY_TILES))} fits: {PARITY_WORDS}; look at where the buffer's index "
                "is set"], tile_parity=T)
    return [Finding(Kind.OBSERVED, [f"measured: {said}: no partial tile of {', '.join(map(str, KEY_TILES))} keys "
                                    "fits which N are wrong"])]


# What the keys past N of an unmasked last tile hold: the floats that follow K and V in the input
# (V's first rows, the next batch's Q), or zeros where the tile's load filled them so.
PADDINGS = {"read past the batch": ("K's rows past N read from the floats after K (V's first rows) and V's from "
                                    "the floats after V (the next batch's Q)"),
            "zero": ("K's and V's rows past N zero (a load that fills the tile's padding with 0), each such key's "
                     "score 0")}


def unmasked_keys(ctx: Context, tiles: list[int]) -> str | None:
    """The output as attention over the keys of the last tile up to its end (T * ceil(N / T)), for
    the tiles T that N is not a multiple of: keys past N scored and summed as the others."""
    inp, out = ctx.probe, ctx.facts.out
    B, N, d = inp.shape.B, inp.shape.N, inp.shape.d
    flat = np.concatenate([inp.flat(), guard_payload(ctx.guard, N, d).ravel()])
    ends: dict[int, list[int]] = {}  # tiles whose last tile ends at the same key give the same output
    for T in tiles:
        ends.setdefault(-(-N // T) * T, []).append(T)
    for end, same in ends.items():
        for padding, words in PADDINGS.items():
            k, v = inp.k.astype(np.float64), inp.v.astype(np.float64)
            past = np.zeros((B, end - N, d))
            inside = np.ones(B, dtype=bool)
            if padding == "read past the batch":
                base = np.arange(B)[:, None] * 3 * N * d + (N + np.arange(end - N))[None, :] * d
                rows = base[..., None] + np.arange(d)  # (B, end - N, d) offsets of K's rows past N
                inside = (rows[:, :, -1] + 2 * N * d < flat.size).all(axis=1)
                k_past, v_past = (flat[np.clip(rows + m * N * d, 0, flat.size - 1)] for m in (1, 2))
            else:
                k_past, v_past = past, past
            with np.errstate(over="ignore", invalid="ignore"):
                w = softmax_rows(logits(inp.q, np.concatenate([k, k_past], axis=1)))
                o = np.matmul(w, np.concatenate([v, v_past], axis=1))
            close = np.abs(o - out)[inside] <= ctx.tol / 5 + 1e-3 * np.abs(o[inside])
            if inside.any() and close.mean() >= 0.99:
                return (f"measured: the output on {inp.label} is attention over keys 0..{end - 1}, the last tile of "
                        f"T = {' or '.join(map(str, same))} keys scored to its end with {words}: no mask j < N on the "
                        "tile's keys")
    return None


class Wavefronts(Probe):
    name = "hw4.hip with 32-lane wavefronts"

    def applies(self, ctx: Context) -> bool:
        refused = "launch refused" in (ctx.error or "")  # the MI210's limits: the same with 32 lanes
        return wave64.emulates(ctx.source) and (ctx.facts.out is not None or ctx.facts.changes or
                                                ctx.facts.no_output and not refused)

    def run(self, ctx: Context) -> list[Finding]:
        found = self.measure(ctx)
        ctx.facts.stop = ctx.facts.stop or ctx.facts.changes  # an output that changes: nothing more to read
        return found

    def measure(self, ctx: Context) -> list[Finding]:
        stopped = None if ctx.facts.out is not None or ctx.facts.changes else ctx.error or "no complaint of its own"
        try:
            with ctx.budget.build():  # the compiler's time, as the judged build's, not the search's
                narrow = programs.ensure_built(programs.from_source(ctx.source, (f"-D{wave64.LANES_MACRO}=32",),
                                                                    "wave32"))
        except Exception as e:  # a build that fails with 32 lanes says nothing of the 64-lane one
            return [Finding(Kind.MISSING_TOOL, [f"the 32-lane build of {ctx.source.name} failed: {e}"])]
        got = ctx.run(ctx.probe, program=narrow)
        if right(ctx, got, ctx.probe):
            ctx.facts.lanes_named = True  # which 32-lane line: what the 64-lane build computes says (LinearMap)
            own = ctx.source.read_text(errors="replace").splitlines()
            found, mixed = wave64.lane_lines(ctx.source)
            lines = [(name, n, own[n - 1] if name == ctx.source.name and n <= len(own) else text)
                     for name, n, text in found]
            ballot = any(p.search(text) for p, _, _ in wave64.BALLOTS for _, _, text in found[:1])
            order = ("a 64-bit ballot cut to 32 bits first, then " if ballot else "") + \
                ("32 written out first, then lanes taken modulo warpSize where threads go in 32s" if mixed
                 else "32 written out first")
            shown = "; ".join(f"{name} line {n}: {text.strip().rstrip(';')[:60]}" for name, n, text in lines[:4])
            if stopped:  # no output with 64 lanes: the emulation's own line, where it names the call
                return measured(ctx, [
                    f"measured: right with 32-lane wavefronts; with the emulation's 64 no output of the right size "
                    f"(its last run: {stopped}) (the same input, {ctx.probe.label}, built both ways): a 32-lane "
                    "assumption" + ("" if " line " in stopped or not shown
                                    else f"; the lane lines, {order}: {shown}")],
                    wave32=True)
            wrong = "wrong and different from run to run" if ctx.facts.changes else "wrong"
            return measured(ctx, [
                f"measured: right with 32-lane wavefronts, {wrong} with the MI210's 64 (the same input, "
                f"{ctx.probe.label}, built both ways): a 32-lane assumption (a shuffle at the default width, "
                f"warpSize, or lanes counted modulo 32)" + dims_per_lane(ctx, own)
                + (f"; the lane lines, {order}: {shown}" if shown else "")],
                wave32=True)
        if got is None:
            return [Finding(Kind.OBSERVED, [f"measured: no output of the right size with 32-lane wavefronts either "
                                            f"({ctx.probe.label}: {ctx.error or 'no complaint of its own'})"])]
        return [Finding(Kind.OBSERVED, [f"measured: wrong with 32-lane wavefronts too ({ctx.probe.label}): not only "
                                        "a matter of the wavefront's width"])]


def dims_per_lane(ctx: Context, own: list[str]) -> str:
    """Where the 64-lane output is all 0 at a d under 64 and the code divides the head dim by a
    name: that line, read as d / 64 = 0 dims a lane (in words, after a ';'); else ''."""
    d = ctx.probe.shape.d
    lines = wave64.dims_per_lane_lines(ctx.source)
    if d >= 64 or not lines or ctx.facts.out is None or (ctx.facts.out != 0).any():
        return ""
    name, n, text = lines[0]
    text = own[n - 1] if name == ctx.source.name and n <= len(own) else text
    return (f"; every value 0 at d = {d}, and {name} line {n} divides the head dim by a name "
            f"(`{text.strip().rstrip(';')[:60]}`): as a lane's share of the dims, d / 64 = 0 in integer division at "
            f"d = {d} on 64 lanes, so no lane accumulates or writes any dim (round up and test the dim against d)")


def empty_tile(ctx: Context, tried: list) -> str | None:
    """Finite with fewer keys, NaN from a whole tile of T on (16, 32 or 64 keys): the probe cut to
    T + 1 and 3T/2 keys as well, both finite: NaN exactly where N is a multiple of T, a tile of no
    keys visited there (N / T taken as the last tile's index, or a tile count one too many)."""
    N = ctx.probe.shape.N
    nan = [n for n, ok in tried if ok is False]
    if not nan or any(ok is not True for n, ok in tried if n < nan[0]) or N % nan[0]:
        return None
    T = nan[0]
    if any(ok is not False for n, ok in tried if n % T == 0):  # every multiple of T tried: NaN
        return None
    cuts = [n for n in (T + 1, T + T // 2) if n < N]
    runs = [ctx.run(design.shrunk(ctx.probe, N=n)) for n in cuts]
    if len(cuts) < 2 or not all(got is not None and np.isfinite(got).all() for got in runs):
        return None
    return (f"finite at N = {' and '.join(str(n) for n in cuts)} too (no multiples of {T}), NaN at every multiple of "
            f"{T} tried ({', '.join(str(n) for n in nan)}): NaN exactly where the keys fill whole tiles of {T}, as "
            f"where a tile of no keys is met then: N / {T} taken as the last tile's index where (N - 1) / {T} belongs "
            f"(a walk from the last tile meets it first: its max over no keys is -inf, exp(-inf - -inf) = NaN), or "
            f"the last tile's key count taken as N % {T}, 0 at whole tiles (a division by that count, or a max "
            "over none)?; look at the tile count and the loop's first or last tile")


def first_tile_partial(ctx: Context) -> str | None:
    """Where the probe's N is under a key tile T (16, 32 or 64) and every cut of it is NaN: the probe
    grown to T, 2T and T + N keys (rows drawn after its own), all finite: NaN only where the first
    tile holds every key, with slots past N (a tile's lanes or slots that the row's start state meets)."""
    N = ctx.probe.shape.N
    for T in (t for t in KEY_TILES[:3] if t > N):
        runs = (ctx.run(design.grown(ctx.probe, n)) for n in (T, 2 * T, T + N))
        if all(got is not None and np.isfinite(got).all() for got in runs):
            return (f"finite at N = {T} and {2 * T} (whole tiles of {T}) and at N = {T + N} (a partial last tile after "
                    f"a whole one; rows drawn uniform in [-3, 3] after the probe's), NaN at N = {N} and every cut "
                    f"under it: NaN only where the first key tile of {T} is partial, every key in it: its slots past "
                    "N meet the row's start state (m = -inf): a vote over the tile's lanes that the slots' -inf "
                    "scores fail, leaving m at -inf so that exp(s - m) is inf; exp(-inf - -inf) = NaN; or a max or "
                    "sum over the tile that takes the slots in")
    return None


class NotFinite(Probe):
    """An output with NaN or inf: does it come with one key, with one key tile?"""

    name = "NaN or inf: with one key, with one tile"

    def applies(self, ctx: Context) -> bool:
        return not ctx.facts.named and ctx.facts.out is not None and not np.isfinite(ctx.facts.out).all()

    def run(self, ctx: Context) -> list[Finding]:
        out = ctx.facts.out
        share = 1 - np.isfinite(out).mean()
        tried = []
        for n in (1, 16, 32, 64):
            if n < ctx.probe.shape.N:
                got = ctx.run(design.shrunk(ctx.probe, N=n))
                tried.append((n, None if got is None else bool(np.isfinite(got).all())))
        said = ", ".join(f"N = {n}: {'no output' if ok is None else 'finite' if ok else 'NaN or inf'}"
                         for n, ok in tried)
        lines = [f"measured: {share:.1%} of the output on {ctx.probe.label} is NaN or infinite; the probe cut to "
                 f"fewer keys: {said}"]
        whole = [n for n, ok in tried if ok]
        if ctx.facts.true is not None and (lane := one_lanes_columns(out, ctx.facts.true, ctx.tol)):
            return measured(ctx, [*lines, lane], look=REDUCTION_LOOK, one_lanes_columns=True)
        if over := underflow.overflow(ctx):  # the rows' scores tell it, checked with Q scaled up
            return measured(ctx, [*lines, over], look=underflow.EXPONENTIAL, weights_overflow=True)
        if negative := underflow.negative_rows(ctx):  # the rows' signs tell it, checked with Q negated
            return measured(ctx, [*lines, negative], look=("the row's max", r"atomicMax|\bmax\w*\s*\("),
                            max_keeps_start=True)
        if tried and tried[0][1] is False and whole and all(ok is False for n, ok in tried if n < whole[0]) and \
                all(ctx.probe.shape.N % n for n in whole):  # NaN below a tile, finite at it, NaN past it again
            lines.append(f"NaN where N is no multiple of {whole[0]} (N = {ctx.probe.shape.N} and the cuts under it), "
                         f"finite at N = {whole[0]}: the slots past N of a partial last tile make them (a pad that is "
                         "no number once it meets q: K padded with -inf gives q . k = inf - inf; exp(-inf - -inf); "
                         "or slots read past the input); look at what the tile holds past N and how it is masked")
        elif tried and tried[0][1] and (empty := empty_tile(ctx, tried)):  # finite with few keys, NaN at whole tiles
            return measured(ctx, [*lines, empty], look=("the tile count", r"/\s*(BC|TILE|T|KT|BK|\d+)\b"),
                            nan_empty_tile=True)
        elif tried and tried[0][1] is False and (under := underflow.reading(ctx)):  # scores' size: a mechanism
            return measured(ctx, [*lines, under[0]], look=under[1], weights_underflow=True)
        elif all(ok is False for _, ok in tried) and tried and (first := first_tile_partial(ctx)):
            return measured(ctx, [*lines, first], look=FIRST_MAX_LOOK, nan_first_tile=True)
        elif tried and tried[0][1] is False:  # no mechanism yet: the tools after the probes still look
            lines.append("NaN with a single key already: made by the first tile's work or the row's division, not "
                         "by keys meeting (as where the running max starts at -inf and exp(m_new - m_old) is inf, "
                         "inf * 0 NaN; or 0 / 0, as a part of the work with no keys, a key split past N, divided by "
                         "its empty sum; or a row's max or sum read before anything wrote it)")
            if ctx.source and (shown := source_lines(ctx.source, FIRST_MAX_LOOK[1])):
                lines.append(f"lines with {FIRST_MAX_LOOK[0]} in {ctx.source.name}: {quoted(shown)}")
        return [Finding(Kind.OBSERVED, lines)]
