"""A program that passes every case run can still be wrong at sizes the run did not reach: a key
loop capped, keys skipped under a threshold only long rows pass, a persistent loop over too few
blocks. So a student's GPU program that passed every case gets one run more, once per build (kept
in fa's cache by the binary's bytes, as the race check is), on a drawn input larger than the cases
it passed (LARGER_B x LARGER_N x d, inside the course's ranges); where that is right, one at rows
of 4096 (MIDDLE_B x MIDDLE_N x d: a path for rows up to some length, a buffer sized for 2048, shows
there; where it is wrong, the longest rows are run too, to bracket it); then one run more
at the course's longest rows (LONGEST_B x LONGEST_N x d, B * N past what a grid of small blocks or a
16-bit size holds), checked on SAMPLED_ROWS rows of each batch; where that is right too, one at the
course's most batches (MOST_B[d] x MOST_N x d, its t11 and t12: an input of 0.6 to 0.9 GB, past
what one chunk of a chunked copy, or one stream's share, holds); last, one batch of an odd N
(EDGE_B x EDGE_N x d: no course case has either, said so), one whose last tile of 64 keys is over
half full (EDGE_B x HALF_TILE_N x d: 33 keys past 64, a wavefront's tile that a 32-key count cuts short),
and a few short rows (SMALL_B x SMALL_N x d: under one tile of 32, N no multiple of 2, 4 or 8, B odd:
a first tile that is also a partial one, a grid over B * N rows that rounds).
Wrong there is a warning
with its numbers and the command that looks into it, never the verdict:

  passes the cases run, but on a drawn 4x2048x64 input (larger than them; not one of the course's
  cases) it writes 8120 of 524288 values wrong (max error 0.0127): ...
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

from .. import locations
from ..cases import generate
from ..cases.format import Shape, open_output
from ..files import atomic_file
from ..programs import programs
from ..programs.programs import Launcher, Program
from ..programs.timing import launches
from . import batch_places, keys_past_n, race_check, reference
from .across_cases import sizes_crossing, under_limit
from .drawn_shapes import LARGER_SEED, MIDDLE_N, ROWS_CHECKED, SAMPLED_ROWS, SHAPES, drawn_kind, only_at
from .findings import Finding, Kind
from .launch_errors import base_name, refused_for_size
from .probes.step import read_payload, spans
from .reruns import row_factors
from .slow_device import waiting
from .steps import Context, Step
from .tool_logs import Budget

RUN_TIMEOUT_S = 30.0


def sampled_rows(N: int, count: int | None) -> np.ndarray | None:
    """The rows of each batch a large output is checked on (the first, the last, and evenly between);
    None: every row."""
    if count is None or count >= N:
        return None
    return np.unique(np.r_[np.linspace(0, N - 1, count - 2).astype(int), 1, N - 2])


def cache_file(program: Program, shape: Shape) -> Path:
    return race_check.build_file(program, "larger-input", f"{shape.B}x{shape.N}x{shape.d}")


def check(program: Program, shape: Shape, launcher: Launcher | None, work: Path, say: Callable[[str], None],
          budget: Budget, rows: int | None = None) -> list[Finding]:
    """One run on the drawn input of `shape` against float64 (or what was kept of an earlier one
    of the same build), on `rows` rows of each batch (None: all): a warning where it is wrong or
    fails, nothing where it is right."""
    kept = cache_file(program, shape)
    if (found := race_check.kept_findings(kept)) is not None:
        return found
    if budget.left < 2:
        return [Finding(Kind.MISSING_TOOL, [f"larger input: not run, {budget.left:.0f} s left of the budget"])]
    say(f"a drawn {shape} input, larger than the cases passed (once per build)")
    path, out = work / f"larger-{shape.B}x{shape.N}x{shape.d}.in", work / "larger.out"
    generate.write_input(path, shape, seed=LARGER_SEED)
    limit = min(RUN_TIMEOUT_S, budget.left)
    result = programs.run(program, path, out, launcher, timeout=limit, timed=False)
    if result.timed_out:  # no verdict of its own: a slow program or a short budget, not a wrong one
        return [Finding(Kind.MISSING_TOOL, [f"larger input: the run on a drawn {shape} input was stopped at "
                                            f"{limit:g} s (the search's budget or the run's limit): not judged"],
                        dict(larger_stopped=limit))]
    correct, sampled = correct_output(path, shape, sampled_rows(shape.N, rows)), sampled_rows(shape.N, rows)
    found = told(result, out, shape, correct, program, sampled, path=path)
    if found and found[0].fields.get("larger_wrong") and budget.left >= 2:
        found = waited_again(found[0], program, path, out, shape, correct, sampled, launcher, budget, say)
    fields = found[0].fields if found else {}
    # a failed run needs no reference (no output to check), a wrong one every row's
    if fields.get("larger_failed") or fields.get("larger_wrong") and rows is None:
        fields.update(larger_input=str(path), larger_shape=[shape.B, shape.N, shape.d])  # a case to look into
    race_check.keep(kept, found)
    return found


def waited_again(warned: Finding, program: Program, path: Path, out: Path, shape: Shape, correct: np.ndarray,
                 rows: np.ndarray | None, launcher: Launcher | None, budget: Budget,
                 say: Callable[[str], None]) -> list[Finding]:
    """The wrong run on the larger input once more with every launch (and under fa's launch layer
    every copy) waited for: what that run gave, said beside the warning (one run each way: an
    ordering the larger input's many chunks or streams need shows there, or does not)."""
    waited, what, setting = waiting(program)
    say(f"the drawn {shape} input again, {what}")
    result = programs.run(waited, path, out, launcher, timeout=min(RUN_TIMEOUT_S, budget.left), timed=False)
    if result.timed_out:
        then = f"; run again with {setting}, it was stopped at its limit"
    elif not (again := told(result, out, shape, correct, program, rows)):
        then = (f"; right in one run with {setting}: wrong only where launches or copies overlap (a buffer, a "
                "stream or a copy reused before the work that reads it has ended)")
    else:
        then = f"; wrong again in one run with {setting}" if again[0].fields.get("larger_wrong") else \
            f"; run again with {setting}, it failed"
    return [Finding(warned.kind, [warned.lines[0] + then, *warned.lines[1:]], dict(warned.fields, waited=then))]


def correct_output(path: Path, shape: Shape, rows: np.ndarray | None = None) -> np.ndarray:
    """The drawn input's float64 output (of `rows` of each batch, None: all), computed once a
    machine (the same for every program of a d: a class's passing programs share it), kept in fa's
    cache as float64."""
    part = "" if rows is None else f"-{rows.size}rows"
    kept = locations.cache_dir() / "larger-input" / f"expected-{shape.B}x{shape.N}x{shape.d}-{LARGER_SEED}{part}.npy"
    try:
        return np.load(kept)
    except (OSError, ValueError):
        pass
    q, k, v = read_payload(path, shape, shape.B, shape.N)
    correct = reference.attention(q, k, v, None if rows is None else np.broadcast_to(rows, (shape.B, rows.size)))
    kept.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(kept) as f:
        np.save(f, correct)
    return correct


def told(result, out: Path, shape: Shape, correct: np.ndarray, program: Program, rows: np.ndarray | None = None,
         tol: float = 5e-3, path: Path | None = None) -> list[Finding]:
    """What the run on the larger input showed, in a warning's words (checked on `rows` of each
    batch, None: all; path: the input, for the readings that need its values)."""
    where = f"on a drawn {shape} input ({drawn_kind(shape)})"
    look = (f"`fa gen --shape {shape.B},{shape.N},{shape.d} --seed {LARGER_SEED} -o larger.in && fa run larger.in "
            f"--program {program.name}` looks into it")
    if result.returncode != 0 or not out.exists():  # a crash or an error: a case to look into, however checked
        empty = (f" (a grid with a dimension of 0 at this size only: a count that rounds down to 0 here, as whole "
                 f"batches in a buffer or chunk of a fixed size, where one batch's Q, K and V are "
                 f"{3 * shape.N * shape.d * 4:,} bytes)") if programs.EMPTY_LAUNCH in (result.error or "") else ""
        return [Finding(Kind.WARNING, [f"passes the cases run, but {where} it fails: {result.error}{empty}; {look}"],
                        dict(larger_failed=result.returncode or 1, larger_stderr=result.stderr or "",
                             larger_launcher_says=result.launcher_says))]
    try:
        with np.errstate(invalid="ignore"):  # a signalling NaN among garbage: a NaN, without numpy's warning
            got = np.asarray(open_output(out, shape)[:, slice(None) if rows is None else rows], dtype=np.float64)
    except Exception as e:  # an output of another size: its words say which
        return [Finding(Kind.WARNING, [f"passes the cases run, but {where} its output is not one to judge: {e}; "
                                       f"{look}"])]
    with np.errstate(invalid="ignore"):
        err = np.abs(got - correct)
    wrong = ~(err <= tol)
    if not wrong.any():
        return []
    worst = float(np.nanmax(np.where(np.isnan(err), np.inf, err)))
    checked = "" if rows is None else f" (of {rows.size} rows of each batch checked)"
    payload = read_payload(path, shape, shape.B, shape.N) if path else None  # read once, for both readings
    readings = (wrong_from(got, wrong, shape, rows, launches(result.stderr or "")), whole_batches(got, wrong),
                rows_scaled(got, correct, wrong), payload and keys_capped(payload, shape, rows, got, tol),
                payload and another_batchs_part(payload, shape, rows, got, wrong, tol),
                payload and keys_past_n.unmasked_slots(payload, shape, rows, got, tol),
                batch_places.other_batchs_output(got, correct, wrong, tol))
    seen = "".join(f"; {said}" for said in readings if said)
    return [Finding(Kind.WARNING, [
        f"passes the cases run, but {where} it writes {int(wrong.sum())} of {wrong.size} values wrong{checked} (max "
        f"error {worst:.3g}){seen}: a mistake that shows only at {only_at(shape)}; {look}"],
        dict(larger_wrong=int(wrong.sum())))]


GRID_CAP = 65535  # blocks along a grid's y or z (x allows 2**31 - 1): a 1-D grid capped here leaves the rest out
ROWS_A_BLOCK = tuple(2 ** k for k in range(9))  # rows a block of a 1-D grid over (batch, row tile) may take


def wrong_from(got: np.ndarray, wrong: np.ndarray, shape: Shape, rows: np.ndarray | None,
               logged: list | None = None) -> str | None:
    """Where every row checked is right before one flat row (b * N + i) and wrong from it on: that
    row, whether the wrong values are all 0 (never written), and the rows a block of a grid capped
    at GRID_CAP blocks would take for its end to fall there, or where that row is exactly the end of
    one pass of a logged launch's grid over items of 2^k rows (the run's launch log); None otherwise."""
    index = np.arange(shape.N) if rows is None else rows
    flat = (np.arange(shape.B)[:, None] * shape.N + index[None, :]).ravel()  # each checked row's b * N + i
    bad = wrong.any(axis=2).ravel()
    if not bad.any() or bad.all() or not bad[np.argmax(bad):].all():
        return None
    first = int(np.argmax(bad))  # not 0: the rows before it are right
    after, at = int(flat[first - 1]), int(flat[first])
    b, i = divmod(at, shape.N)
    zeros = bool((got[wrong] == 0).all())
    said = (f"every row checked is right before batch {b}, row {i} and wrong from there on"
            + (", every wrong value 0 (as where nothing was written)" if zeros else ""))
    fits = [k for k in ROWS_A_BLOCK if after < GRID_CAP * k <= at]
    if fits:
        k = fits[0]
        said += (f": where a grid of {GRID_CAP} blocks of {k} rows ends ({GRID_CAP} x {k} = {GRID_CAP * k}, the rows "
                 f"b * N + i): blocks past {GRID_CAP} never ran, as with a grid's x capped at {GRID_CAP} (the limit "
                 "of y and z; x allows 2^31 - 1) and no loop over the blocks left")
    elif passed := one_pass(at, shape, logged or [], None if rows is None else after):  # "exactly" where every
        said += passed  # row is checked, else between the last right row checked and the first wrong one
    elif i == 0 and (share := last_share(b, shape.B) or zeros and last_chunk(b, shape.B)):
        said += share
    return said


SHARES = (2, 3, 4, 8)  # streams or blocks that batches may be dealt to, ceil(B / S) each


def last_share(b: int, B: int) -> str | None:
    """Where batch b, the first wrong one (all after it wrong too), is where the last of S shares of
    ceil(B / S) batches starts and that share is short: in words; None otherwise."""
    for S in SHARES:
        per = -(-B // S)
        if b == (S - 1) * per and B % per:
            return (f": batch {b} is where the last of {S} shares of ceil({B} / {S}) = {per} batches would start, a "
                    f"short one of {B - b} (as in a program that deals batches to {S} streams or blocks and leaves "
                    "the last, short share's batches not computed or not copied back: its first batch or its count "
                    f"taken from its own size, s * nb, where s * {per} belongs?)")
    return None


def last_chunk(b: int, B: int) -> str | None:
    """Where batch b, the first wrong one (all after it wrong too), leaves exactly C = B - b batches,
    C a power of 2 that divides B: a last chunk of C batches not computed (its count taken as
    B % C, 0 there), in words; None otherwise."""
    C = B - b
    if C < 2 or C & (C - 1) or B % C or B // C < 3:  # a half or less: two streams' shares say as much
        return None
    return (f": the last {C} batches exactly, and {C} divides B = {B} ({B // C} x {C}): as in a program that "
            f"computes the batches in chunks of {C} and takes the last chunk's count as B % {C} (0 where {C} "
            f"divides B) where B minus the chunk's first batch belongs, the chunk not computed or not copied back?")


def one_pass(at: int, shape: Shape, logged: list, after: int | None = None) -> str | None:
    """Where flat row `at` is exactly G * k (every row checked; `after` None), or G * k lies past
    `after`, the last right row checked, and at `at` at most (rows sampled): G a logged launch's
    blocks and k (16 to 256) rows an item: the end of the grid's first pass over the items, in
    words. Not at a batch's first row (a batch's own mistake starts there too), nor for a grid whose
    blocks cover every row in one pass (G = B * N / k' rounded up: no second pass to speak of)."""
    rows = shape.B * shape.N
    if at % shape.N == 0:
        return None
    for launch in logged:
        if any(launch.blocks == -(-rows // k) for k in ROWS_A_BLOCK):
            continue
        for k in (k for k in ROWS_A_BLOCK if k >= 16):
            end = launch.blocks * k
            if launch.blocks > 1 and (end == at if after is None else after < end <= at):
                where = "exactly where" if after is None else f"between the last right row checked ({after}) and " \
                    "the first wrong one (rows sampled: a product that falls there may be a coincidence), where"
                return (f": {where} the first pass of {base_name(launch.kernel)}'s grid of {launch.blocks} "
                        f"blocks over items of {k} rows ends ({launch.blocks} x {k} = {end}, fa's launch log; the rows "
                        "b * N + i): the items past the grid's first pass are not done right (a grid-stride or "
                        "persistent loop whose later items are skipped or computed with the first one's data, or a "
                        "grid sized to stop there with no loop)")
    return None


WHOLE_BATCH = 0.9  # a batch wrong in this share of its values checked is wrong as a whole (a 0 may be right)


def whole_batches(got: np.ndarray, wrong: np.ndarray) -> str | None:
    """Where the wrong values are whole batches (WHOLE_BATCH of the values checked of some batches,
    none of the others) and not one run of them to the last: which, and whether they hold 0;
    None otherwise."""
    share = wrong.reshape(wrong.shape[0], -1).mean(axis=1)
    every = share >= WHOLE_BATCH
    if not every.any() or ((share > 0) & ~every).any() or every[-1]:  # to the last batch: wrong_from's reading
        return None
    which = np.flatnonzero(every)
    zeros = bool((got[which] == 0).all())
    return (f"batch{'es' if which.size > 1 else ''} {spans(which)} wrong in {share[which].min():.0%} or more of the "
            "values checked" + (", every value there 0 (as where nothing was written or copied back)" if zeros else "")
            + ", the other batches right: a part of the input's batches (a chunk, a stream's share) whose output was "
            "not computed or not collected")


def keys_capped(payload: tuple, shape: Shape, rows: np.ndarray | None, got: np.ndarray, tol: float) -> str | None:
    """Where every value checked is attention over the first M keys only (M a power of 2 under N),
    payload the input's Q, K, V: that M, in words; None otherwise."""
    q, k, v = payload
    taken = np.arange(shape.N) if rows is None else rows
    index = np.broadcast_to(taken, (shape.B, taken.size))
    for M in (2 ** e for e in range(8, shape.N.bit_length()) if 2 ** e < shape.N):
        capped = reference.attention(q, k[:, :M], v[:, :M], index)
        with np.errstate(invalid="ignore"):
            if (np.abs(got - capped) <= tol).all():
                part = f", or, as {M} = N / {shape.N // M}, the first part of the keys' split only: a merge of key " \
                    "splits that takes fewer of them than the work was split into" if shape.N % M == 0 else ""
                return (f"every value checked is attention over the row's first {M} keys only: keys {M}..{shape.N - 1} "
                        f"never looked at (a key or tile count capped at {M}, an array of tiles sized for {M} "
                        f"keys{part})")
    return None


BATCHES_READ = 4  # wrong batches whose values are tried against another batch's Q, K or V


def another_batchs_part(payload: tuple, shape: Shape, rows: np.ndarray | None, got: np.ndarray, wrong: np.ndarray,
                        tol: float) -> str | None:
    """Where each wrong batch's values checked (the first BATCHES_READ) are attention with one of Q, K
    or V taken from one other batch (batch 0, the one before or the one after), the same part for
    all: which, in words; None otherwise."""
    bad = np.flatnonzero(wrong.any(axis=(1, 2)))[:BATCHES_READ]
    if not bad.size or shape.B < 2:
        return None
    q, k, v = payload
    index = np.arange(shape.N) if rows is None else rows
    for name, part in (("Q", 0), ("K", 1), ("V", 2)):
        sources = []
        for b in bad:
            own = [q[b:b + 1], k[b:b + 1], v[b:b + 1]]
            for src in dict.fromkeys(x for x in (0, b - 1, b + 1) if 0 <= x < shape.B and x != b):
                taken = [*own]
                taken[part] = (q, k, v)[part][src:src + 1]
                with np.errstate(invalid="ignore"):
                    if (np.abs(reference.attention(*taken, index[None]) - got[b:b + 1]) <= tol).all():
                        sources.append(int(src))
                        break
        if len(sources) == bad.size:
            said = "batch 0's" if set(sources) == {0} else "the batch before's" if all(
                s == b - 1 for s, b in zip(sources, bad)) else "another batch's"
            return (f"batch{'es' if bad.size > 1 else ''} {spans(bad)}'s values checked are attention with {said} "
                    f"{name} (batch{'es' if len(set(sources)) > 1 else ''} {spans(sorted(set(sources)))}) and "
                    f"{'their' if bad.size > 1 else 'its'} own other parts: {name} read at another batch's place (a "
                    "base pointer or an offset of the first batch or chunk where the batch's own belongs)")
    return None


def rows_scaled(got: np.ndarray, correct: np.ndarray, wrong: np.ndarray) -> str | None:
    """Where every wrong row is the right row times a factor of its own (not 1): their range; None
    otherwise (a row of zeros is not one: nothing was written there)."""
    factor = row_factors(got, correct, wrong)
    if factor is None:
        return None
    return (f"every wrong row is the right row times a factor of its own (from {factor.min():.3g} to "
            f"{factor.max():.3g}): the right weights, divided by another sum, or the output scaled once more")


class LargerInput(Step):
    """A student's GPU program that passed every case run: the check above, with what the
    investigation's budget has left."""

    name = "a larger input than the cases passed"

    def applies(self, ctx: Context) -> bool:
        results = ctx.results
        passed = [r.target.shape for r in results]
        return race_check.applies(ctx.program) and bool(results) and all(r.verdict == "PASS" for r in results) \
            and any(shape(passed) is not None for shape in SHAPES)

    def run(self, ctx: Context) -> list[Finding]:
        passed = [r.target.shape for r in ctx.results]
        tried = [(shape(passed), rows) for shape, rows in zip(SHAPES, ROWS_CHECKED)]
        for at, (shape, rows) in enumerate(tried):
            if shape is None:
                continue
            if found := check(ctx.program, shape, ctx.launcher, ctx.work, ctx.say, ctx.budget, rows):
                if found[0].fields.get("larger_stopped"):
                    return [paced(found[0], shape, ctx.results)]
                if shape.N == MIDDLE_N and (longer := tried[at + 1][0]) is not None:
                    found = bracketed(found, shape, longer, check(ctx.program, longer, ctx.launcher, ctx.work,
                                                                  ctx.say, ctx.budget, SAMPLED_ROWS))
                return with_sizes(found, passed, shape, lambda under: check(
                    ctx.program, under, ctx.launcher, ctx.work, ctx.say, ctx.budget, SAMPLED_ROWS))
            passed = passed + [shape]  # right there too
        return []




HANG_FACTOR = 10  # a run stopped this many times past the pace of the largest case passed: one that does not end?


def kernel_seconds(run) -> float | None:
    """A run's GPU time in its kernels: the launch log's, else the timing line's kernel stage."""
    logged = launches(run.stderr or "")
    if logged:
        return sum(launch.ms for launch in logged) / 1000
    return run.timing.get("kernel")


def paced(stopped: Finding, shape: Shape, results: list) -> Finding:
    """A drawn input's run stopped at its limit, against the kernels' pace on the case passed with
    the most work (seconds per flop): far past it, a warning that the run may never end; else the
    stop as it was."""
    timed = [(r.target.shape.flops, seconds, r.target.name) for r in results
             if r.run is not None and (seconds := kernel_seconds(r.run))]
    if not timed:
        return stopped
    flops, seconds, name = max(timed)
    needed = seconds * shape.flops / flops
    limit = stopped.fields["larger_stopped"]
    if limit < HANG_FACTOR * needed:
        return stopped
    return Finding(Kind.WARNING, [
        f"passes the cases run, but on a drawn {shape} input (larger than the cases passed; not one of the course's "
        f"cases) it was still running when stopped at {limit:g} s: its work is {shape.flops / flops:.0f} times "
        f"{name}'s, whose kernels took {seconds * 1000:.3g} ms, so about {needed:.2g} s of kernels at that pace: a "
        "run that may never end (blocks that wait for blocks that are not running, as a merge that spins on other "
        "blocks once the grid is larger than what the GPU holds at once; a loop whose bound never comes)"],
        stopped.fields)


def bracketed(found: list[Finding], failed: Shape, longer: Shape, there: list[Finding]) -> list[Finding]:
    """The warning at rows of MIDDLE_N, with what the run at the longest rows showed: right there
    (as at the shorter rows passed), a mistake of a band of lengths."""
    if there or not found or found[0].kind != Kind.WARNING:
        return found
    said = (f"; right on a drawn {longer} input ({SAMPLED_ROWS} rows of each batch checked), as at the shorter rows "
            f"passed: wrong at N = {failed.N} only, between them (a path taken for rows up to some length, with a "
            "buffer or a shared-memory row sized for fewer keys than that path lets in?)")
    first = found[0]
    return [Finding(first.kind, [first.lines[0] + said, *first.lines[1:]], first.fields), *found[1:]]


def with_sizes(found: list[Finding], passed: list[Shape], failed: Shape,
               tried: Callable[[Shape], list[Finding]]) -> list[Finding]:
    """The warning with the usual size products that reach 2^31 on the input it fails and on none
    that passed, weighed by one run more (`tried`, check on a shape) at one batch of the longest N
    where none does: right there, a 32-bit size is the question to ask; wrong there too, a mistake
    that needs none shows already."""
    said = sizes_crossing(passed, failed)
    if found and found[0].kind == Kind.WARNING and (refused := refused_for_size(found[0].lines[0])):
        said = f"the runtime refused the launch for the input's size: {refused}"  # its own words say what ran out
    elif not said or not found or found[0].kind != Kind.WARNING:
        return found
    hint = "a 32-bit size? (an int holding a size or an index: compute it in size_t)"
    under = None if refused else under_limit(failed)
    there = tried(under) if under is not None and under.N > max(s.N for s in passed) else None
    if there and there[0].kind == Kind.WARNING:  # wrong or failed there too
        fields = there[0].fields
        how = "gives no output to judge"
        if fields.get("larger_failed") or fields.get("larger_wrong"):
            how = "fails" if fields.get("larger_failed") else f"writes {fields['larger_wrong']} checked values wrong"
        said += (f"; but a drawn {under} input, where none reaches 2^31, {how} too: a mistake that needs no 32-bit "
                 "size shows there already (a buffer sized, or an index bounded, for shorter rows?)")
    elif there == []:  # with fewer values too: what grows with the input is a question beside the 32-bit size
        held, failing = (3 * s.B * s.N * s.d for s in (under, failed))
        said += (f", and a drawn {under} input, where none does, is right on the {SAMPLED_ROWS} rows checked; it holds "
                 f"{held:,} floats against {failing:,}: {hint}, or anything sized by the input's length (a chunk or "
                 "stream count, a buffer sized for less, a race with more tiles to meet in)")
    elif not refused:  # not run (no such N, a budget spent, a run stopped at its limit): the question as it stands
        said += f": {hint}"
    first = found[0]
    return [Finding(first.kind, [f"{first.lines[0]}; {said}", *first.lines[1:]], first.fields), *found[1:]]
