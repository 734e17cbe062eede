"""What the measured weights W say, against the true P = softmax(Q K^T / sqrt(d)): each reading
is one question of W, pure NumPy on the facts ReadWeights left (W, P, the probe input).

  rows       rows that hold another row's weights: which rows, found as a formula (an offset, a
             tile's first row, a row modulo a tile, another batch) by search over small families
  keys       keys that get no weight, and whether the rest is the softmax over the other keys
  summary    where nothing pins W down: the numbers of W against P, never a guess
The factors between W and P are read in factors.py, the online softmax's steps in
softmax_steps.py; measured() and WeightReading, here, serve them all.
"""
from __future__ import annotations

import numpy as np

from ..diagnose import SOURCE_LINES_SHOWN, quoted, source_lines
from ..findings import Finding, Kind
from ..mistakes import EXP_LINES, GRID_LINES, KEY_TILES, QUERY_TILES
from .kept_keys import LAST_KEY_LOOK, last_key_alone, restarted
from .map_formulas import rows_written_in_another_order
from .row_cover import SHIFT_DECODE_LOOK, TILE_MAP_LOOK, power_of_two_cut, rows_skipped
from .step import Context, Probe, fmt, logits, softmax_rows, spans

ROW_ATOL = 2e-4  # a row of W is "row i' of P" where every weight is within this
ZERO = 1e-7  # a weight this small is no weight
TINY_WEIGHT = 1e-30  # a weight this small (or 0, an underflow) has no logarithm worth fitting
FLAT = 2e-3  # spread of log(W / P) within a row or a tile that counts as constant
FIT_SHARE = 0.95  # of rows (or tiles) a reading must hold for
MAX_TILE = 128  # tile sizes a dropped partial tile is said for: every T up to this with N % T = the keys dropped


def span(values) -> str:
    values = np.asarray(values, dtype=float)
    lo, hi = float(np.nanmin(values)), float(np.nanmax(values))
    return fmt(lo) if np.isclose(lo, hi, rtol=1e-3) else f"{fmt(lo)} to {fmt(hi)}"


def measured(ctx: Context, lines: list[str], look: tuple[str, str] | None = None, **fields) -> list[Finding]:
    """A mechanism named from measurements; look: (what, a pattern) whose lines of the source, where
    fa has it, are shown under it ("lines with exp in hw4.cu: 84 `...`"); a tuple of patterns shows the
    first line of each (as many as the tuple holds, two at least)."""
    ctx.facts.named = True
    many = max(SOURCE_LINES_SHOWN, len(look[1])) if look and isinstance(look[1], tuple) else SOURCE_LINES_SHOWN
    shown = source_lines(ctx.source, look[1], many) if look and ctx.source else []
    if shown:
        lines = [*lines, f"lines with {look[0]} in {ctx.source.name}: {quoted(shown)}"]
    return [Finding(Kind.MEASURED, lines, dict(measured_on=ctx.probe.label, runs=ctx.runs, **fields))]


class WeightReading(Probe):
    """A reading of W: applies once W is read and is the program's (the output is W V), while no
    reading has named a mechanism. A mechanism it names sets W against P, the right scores': the
    scores read back as other elements (ScoreInputs' examples, read as if W were their softmax) are
    then no reading, and are left out (investigation.take)."""

    from_right_scores = True

    def applies(self, ctx: Context) -> bool:
        return ctx.facts.linear and not ctx.facts.named


# ---------------------------------------------------------------- rows holding other rows' weights
ROW_FAMILIES = (
    ("row i + {k}", lambda i, k, N: i + k),
    ("the first row of its tile of {k} rows, i - i % {k}", lambda i, k, N: i - i % k),
    ("the last row of its tile of {k} rows", lambda i, k, N: np.minimum(i - i % k + k - 1, N - 1)),
    ("row i % {k}", lambda i, k, N: i % k),
    ("row (i + {k}) % N", lambda i, k, N: (i + k) % N),
    ("row N - 1 - i", lambda i, k, N: N - 1 - i),
)


def row_sources(W: np.ndarray, P: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """For each row of W that is not its own row of P: the batch and row of P it equals (-1 where
    none). None where every row is its own."""
    B, N, _ = W.shape
    wrong = np.argwhere(np.abs(W - P).max(axis=2) > ROW_ATOL)
    if not len(wrong):
        return None
    flat = P.reshape(B * N, N)
    rows = W[wrong[:, 0], wrong[:, 1]]
    dist = (rows ** 2).sum(1)[:, None] + (flat ** 2).sum(1)[None] - 2 * rows @ flat.T
    best = dist.argmin(axis=1)
    equal = np.abs(rows - flat[best]).max(axis=1) <= ROW_ATOL
    src_b, src_i = np.divmod(best, N)
    return wrong, np.where(equal, src_b, -1), np.where(equal, src_i, -1)


def row_formula(b, i, sb, si, N: int) -> str | None:
    """The family formula that gives (sb, si) from (b, i) for FIT_SHARE of the rows."""
    if np.mean(sb == b) >= FIT_SHARE:
        offsets = np.unique(si - i, return_counts=True)
        ks = [int(offsets[0][offsets[1].argmax()])] + [t for t in (*QUERY_TILES, *KEY_TILES)]
        for words, f in ROW_FAMILIES:
            for k in sorted(set(ks)):
                if np.mean(f(i, k, N) == si) >= FIT_SHARE:
                    return words.format(k=k)
        if swapped := rows_written_in_another_order(i, si, N):
            return swapped
    shifts = np.unique(sb - b, return_counts=True)
    k = int(shifts[0][shifts[1].argmax()])
    if k and np.mean((sb - b == k) & (si == i)) >= FIT_SHARE:
        return f"the same row of batch b {'+' if k > 0 else '-'} {abs(k)}"
    return None


class OtherRows(WeightReading):
    name = "rows of W against the rows of P"

    def run(self, ctx: Context) -> list[Finding]:
        W, P, N = ctx.facts.W, ctx.facts.P, ctx.probe.shape.N
        found = row_sources(W, P)
        if found is None:
            return []
        wrong, sb, si = found
        even = (np.abs(W[wrong[:, 0], wrong[:, 1]] - 1.0 / N) <= ROW_ATOL).all(axis=1)  # every key alike: q = 0
        if even.all() and len(even) == W.shape[0] * W.shape[1]:
            return []  # every row alike: a scale of 0 fits as well (the Factors step's to say)
        held = (sb >= 0) & ~even
        if (held | even).mean() < FIT_SHARE:
            return []
        lines, source = ([evenly(wrong[even])], "every key alike") if even.any() else ([], "")
        if held.any():
            b, i = wrong[held, 0], wrong[held, 1]
            formula = row_formula(b, i, sb[held], si[held], N)
            example = ", ".join(f"row {int(r)} holds row {int(s)}'s" for r, s in list(zip(i, si[held]))[:3])
            what = f"row i holds the weights of {formula}" if formula else f"{example} ..."
            code = "the batch offset" if formula and "batch" in formula else "the query row index (the row a " \
                "thread or block computes, or the row of Q it reads)"
            lines.insert(0, f"measured: {len(b)} rows of W hold another row's weights exactly (within {ROW_ATOL:g}): "
                            f"{what}; each of those rows was written, with another row's result; look at {code}")
            source = formula or example
        return measured(ctx, lines, rows_from=source)


def evenly(rows: np.ndarray) -> str:
    """Rows whose weights are all 1/N: every score alike, as where the row's q is read as zeros."""
    shown = ", ".join(f"batch {int(b)} row {int(r)}" for b, r in rows[:4]) + (", ..." if len(rows) > 4 else "")
    return (f"measured: {len(rows)} rows of W weigh every key alike (1/N: their output the plain mean of V; {shown}): "
            "every score of the row equal, as where its q is read as zeros (a slot of a Q tile never written, or "
            "read at another place than its row was stored)")


class RowsNotWritten(WeightReading):
    """Rows that hold the same values whatever V is (0, or what the memory held): never written.
    Said by the largest pattern they fill: whole batches, the tail of the B*N rows taken together
    (a grid over B*N rows that rounds down), else the rows of a batch (a query-tile count)."""

    name = "rows that never change"

    def run(self, ctx: Context) -> list[Finding]:
        W, out = ctx.facts.W, ctx.facts.out
        B, N = ctx.probe.shape.B, ctx.probe.shape.N
        still = (np.abs(W) <= ZERO).all(axis=2) & (out == out[:, :, :1]).all(axis=2)
        if not still.any():
            return []
        held = "0" if bool((out[still] == 0).all()) else "the same values"
        # zeros whatever V is: rows no thread wrote, or rows computed from a V that reads 0 (a tile never loaded)
        never = "never written (left as they were)" if held != "0" else \
            "never written, or computed from values of V that read 0 whatever V is (a tile of V never loaded)"
        flat = np.flatnonzero(still.ravel())  # rows counted over all batches: b * N + r
        whole = np.flatnonzero(still.all(axis=1))
        if still.all() and held == "0" and (signed := signed_zeros(out, ctx.facts.true)):
            what = f"every row of every batch holds 0 in every run, whatever V is, {signed}"
        elif still.all():  # no row of any batch: nothing reaches the output, not one tile's bound
            what = (f"every row of every batch holds {held} in every run, whatever V is: nothing the program computes "
                    "reaches the output (a kernel that does not run or does not store, a copy back that is missing "
                    "or comes before the kernel, or a V that every load reads as 0)")
        elif len(whole) and not still[~still.all(axis=1)].any():
            what = (f"{plural_batches(whole)} {'holds' if len(whole) == 1 else 'hold'} {held} in every row in every "
                    f"run, whatever V is, the others are written: {never}; look at what "
                    "covers the batches: the copy back's size (B * N * d values), the grid's batches, the output's "
                    "batch offset")
        elif B > 1 and np.array_equal(flat, np.arange(flat[0], B * N)):  # the other batches' same rows written
            m = len(flat)
            tiles = [T for T in range(16, 257, 16) if (B * N) % T == m]  # a block's rows: a multiple of 16
            shown = ", ".join(map(str, tiles[:8])) + (" ..." if len(tiles) > 8 else "")
            cause = (f"a grid or a bound over B * N rows that stops short: B * N % T = {m} for blocks of T = {shown} "
                     "rows (use (B * N + T - 1) / T blocks and skip the rows past B * N)") if tiles else \
                (f"no block of 16 to 256 rows (a multiple of 16) leaves {m}: look at what covers these rows (the "
                 "grid and its bound, where each batch's rows are written)")
            what = (f"the last {m} of the B * N = {B * N} rows taken together (batch {flat[0] // N} from row "
                    f"{flat[0] % N} on) hold {held} in every run, whatever V is: {never}; {cause}")
        else:
            rows = np.flatnonzero(still.any(axis=0))
            which, code = describe_keys(rows, N)
            which = which.replace("keys", "rows").replace("key", "row")
            code = code.replace("key-tile", "query-tile").replace("key loop", "row loop (or the grid)").replace(
                "the loop over a key tile's", "the row each thread or warp computes (a block's first row, blockIdx "
                "times its rows, plus its own index: one block dimension used for another) or the loop over a "
                "query tile's").replace(" keys (its bound", " rows (its bound")
            skipped = rows_skipped(ctx) if np.array_equal(rows, np.arange(rows[0], N)) else None  # a tail here
            cut = None if skipped else power_of_two_cut(ctx, rows, N)
            what = f"{which} hold {held} in every run, whatever V is: {never}; " + \
                (f"but {skipped or cut}" if skipped or cut else f"look at {code}")
            look = TILE_MAP_LOOK if skipped else SHIFT_DECODE_LOOK if cut else ROWS_COVER_LOOK
            return measured(ctx, [f"measured: {what}"], look=look, rows_not_written=int(still.sum()))
        return measured(ctx, [f"measured: {what}"], rows_not_written=int(still.sum()))


# the lines that say which rows a batch's blocks cover: a count taken from the grid's size, a ceiling
# division of the rows by a block's, the grid or the launch, and a division of N that rounds down (a
# kernel's count of tiles against the host's rounded up: the two disagree where N is no multiple)
ROWS_COVER_LOOK = ("the rows' cover (a count of tiles, the grid, a count of N that rounds down)",
                   (r"gridDim\.\w\s*[/%]", r"\+\s*\w+\s*-\s*1\s*\)\s*/\s*\w+", GRID_LINES,
                    r"\bN\s*/\s*[A-Z_][A-Z0-9_]*\b(?!\s*[-+*])"))


def signed_zeros(out: np.ndarray, true: np.ndarray | None) -> str:
    """Where an output of zeros carries signs that follow the right values' (each, or each's
    opposite): computed values divided by an infinite sum, not memory nothing wrote ("" else)."""
    material = np.abs(true) > 1e-3 if true is not None else None
    if material is None or not material.any() or not np.signbit(out).any():
        return ""
    same = float(np.mean(np.signbit(out[material]) == (true[material] < 0)))
    if same >= 0.99:
        return (f"but its zeros carry the right values' signs (-0 where the right value is negative, in {same:.1%} of "
                "them): the values were computed, then divided by +infinity (a running sum l that overflowed) or "
                "multiplied by 0 (a factor that is 0 or underflowed to it); look at l and the factors on the output")
    if same <= 0.01:
        return (f"but its zeros carry the opposite of the right values' signs (-0 where the right value is positive, "
                f"in {1 - same:.1%} of them): the values were computed, then divided by -infinity (o / l with l = "
                "-inf: a sum that took in -INFINITY, the identity of a max, e.g. a reduction shared by the max and "
                "the sum), or negated and then divided by +infinity or multiplied by 0; look at the running sum l "
                "and the output's sign")
    return ""


def plural_batches(batches: np.ndarray) -> str:
    shown = ", ".join(map(str, batches[:6])) + (", ..." if len(batches) > 6 else "")
    return f"batch {shown}" if len(batches) == 1 else f"batches {shown}"


# ---------------------------------------------------------------- keys with no weight
TILE_COUNT = ("the key-tile count and the last tile's width: a count N / T that rounds down, or a last tile given 0 "
              "keys (use (N + T - 1) / T tiles, the last min(T, N - start) wide)")
# the lines shown with it: a count made by dividing N (or a length) by a tile, with no rounding up
COUNT_PATTERN = r"=\s*\(?\s*(?:N|n|seq_?len\w*|len\w*)\s*/\s*\(?\w+\)?\s*\)?\s*;"
WIDTH_PATTERN = r"\bmin\s*\(\s*\w+\s*,\s*(?:N|n)\s*-|\b(?:N|n)\s*-\s*\w+\s*<\s*\w+\s*\?"  # min(T, N - j0)
TILE_COUNT_LOOK = ("a count of tiles or a tile's width", (COUNT_PATTERN, WIDTH_PATTERN))
SKIPPED = ("or every tile after the first skipped: a test that lets a tile through only on a condition the first "
           "tile's running max makes false (a vote, __any or __all, or a `continue` on the max)")
# where only the first tile's keys count: a skip's test first, then the count
SKIP_LOOK = ("a tile skipped or counted", (r"\b__(?:any|all)(?:_sync)?\s*\(|\bcontinue\s*;", COUNT_PATTERN))


def describe_keys(keys: np.ndarray, N: int) -> tuple[str, str]:
    """(which keys, what in the code drops them)."""
    keys = np.sort(keys)
    n = len(keys)
    contiguous = np.array_equal(keys, np.arange(keys[0], keys[0] + n))
    if contiguous and keys[-1] == N - 1:
        tiles = [T for T in range(n + 1, MAX_TILE + 1) if (N - n) % T == 0]  # N % T = n: the partial tile
        if n == 1:
            return "the last key (N - 1)", "the key loop's bound: it stops one key short (j < N - 1)"
        whole = f"a whole last tile of {n}" if N % n == 0 else ""
        first_alone = N - n in KEY_TILES  # every key past the first tile: a tile count, or tiles skipped
        if tiles or whole:
            shown = ", ".join(map(str, tiles[:6])) + (" ..." if len(tiles) > 6 else "")
            partial = f"the partial last tile of tiles T with N % T = {n} (T = {shown})" if tiles else ""
            return (f"the last {n} keys ({keys[0]}..{N - 1}), as many as "
                    + " or ".join(w for w in (partial, whole) if w),
                    f"{TILE_COUNT}, {SKIPPED}" if first_alone else TILE_COUNT)
        if first_alone:  # the first tile alone kept: a loop that stops, one that reads tile 0 again, or skips
            return (f"the last {n} keys ({keys[0]}..{N - 1}), every key past the first tile of {N - n}",
                    f"the key loop's bound, or where each tile's keys are read: a K and V tile pointer or offset "
                    f"that never advances reads the first {N - n} keys at every tile (the same weights), {SKIPPED}")
        return f"the last {n} keys ({keys[0]}..{N - 1})", "the key loop's bound"
    if contiguous and keys[0] == 0:
        last = [T for T in KEY_TILES if N - n == T or (N % T and N - n == N % T)]  # only the last tile kept
        if last:
            return (f"the first {n} keys (0..{keys[-1]}), all but the last tile's (tiles of "
                    f"{' or '.join(map(str, last))})",
                    "the state carried from tile to tile: the running max, l and the output set back at every "
                    "tile (a running max declared again inside the tile loop, so the one carried stays -inf and "
                    "alpha = 0, or l and acc reset there), or the key loop's start; where the other weights are "
                    "P's, also a P V loop that runs on the partial last tile alone: its key count 0 or less for a "
                    "full tile (a count of live lanes from a vote or a mask, __ffs or __popc, wrong when every lane "
                    "is live)")
        return f"the first {n} keys (0..{keys[-1]})", "the key loop's start"
    for T in (2, 4, 8, *KEY_TILES):  # the shortest period the keys repeat with
        offsets = np.unique(keys % T)
        if len(offsets) < T and np.array_equal(np.sort(keys), np.flatnonzero(np.isin(np.arange(N) % T, offsets))):
            which = f"every {T}{'nd' if T == 2 else 'th'} key from key {offsets[0]}" if len(offsets) == 1 else \
                f"keys at offsets {spans(offsets)} of every tile of {T}"
            return which, f"the loop over a key tile's {T} keys (its bound or its start)"
    shown = ", ".join(map(str, keys[:6])) + (", ..." if n > 6 else "")
    return f"{n} keys ({shown})", "which keys the loops visit"


def flat_bound_tile(keys: np.ndarray, N: int, d: int) -> int | None:
    """The key tile T (of KEY_TILES, two tiles or more) whose tile at j0 keeps exactly its first
    ceil((N - j0) / d) keys and no more, where `keys` get no weight: a bound of N set on the tile's
    flat element index (key r's element c at r * d + c) where the key's index j0 + r < N belongs."""
    dead = np.zeros(N, dtype=bool)
    dead[keys] = True
    j = np.arange(N)
    for T in KEY_TILES:
        if N // T < 2:
            continue
        j0 = j // T * T
        if np.array_equal(dead, (j - j0) >= np.ceil((N - j0) / d)):
            return T
    return None


class KeysWithoutWeight(WeightReading):
    name = "keys that get no weight"

    def run(self, ctx: Context) -> list[Finding]:
        W, P, N = ctx.facts.W, ctx.facts.P, ctx.probe.shape.N
        dead = np.flatnonzero((np.abs(W) <= ZERO).all(axis=(0, 1)) & (P.max(axis=(0, 1)) > 1e-5))
        if not len(dead):
            return []
        if T := flat_bound_tile(dead, N, ctx.probe.shape.d):
            d = ctx.probe.shape.d
            return measured(ctx, [
                f"measured: each key tile of {T} at j0 keeps its first ceil((N - j0) / d) keys and gives the rest no "
                f"weight in any row ({N - len(dead)} of {N} keys kept, d = {d}): a bound of N on the tile's flat "
                f"element index (key r's element c at r * d + c < N - j0) where the key's own index j0 + r < N "
                "belongs; look at the tile loader's bound or mask"], keys_without_weight=[int(k) for k in dead],
                flat_bound_tile=T)
        which, code = describe_keys(dead, N)
        kept = np.ones(N, dtype=bool)
        kept[dead] = False
        s = logits(ctx.probe.q, ctx.probe.k)
        s[..., ~kept] = -np.inf
        renorm = softmax_rows(s)
        if np.abs(W - renorm).max() <= ROW_ATOL and (last := last_key_alone(dead, N)):
            return measured(ctx, [f"measured: {which} get no weight in any row: {last}"], look=LAST_KEY_LOOK,
                            keys_without_weight=[int(k) for k in dead], last_key_alone=True)
        if np.abs(W - renorm).max() <= ROW_ATOL:
            rest = "the other weights are the softmax over the other keys: those keys are left out of the scores, " \
                   "the max, the sum and the output alike"
        elif np.abs(W[..., kept] - P[..., kept]).max() <= ROW_ATOL:
            rest = "the other weights are P's: those keys count in the sum l but their P V terms are never added"
        else:
            ctx.facts.dead_keys = dead
            return [Finding(Kind.OBSERVED, [f"measured: {which} {'gets' if len(dead) == 1 else 'get'} no weight in "
                                            "any row; the other weights are neither P's nor the softmax over the "
                                            "other keys"], dict(keys_without_weight=[int(k) for k in dead]))]
        return measured(ctx, [f"measured: {which} {'gets' if len(dead) == 1 else 'get'} no weight in any row ({rest}); "
                              f"look at {code}"],
                        look=TILE_COUNT_LOOK if code == TILE_COUNT else SKIP_LOOK if SKIPPED in code else None,
                        keys_without_weight=[int(k) for k in dead])


class KeysLeftOutByRow(WeightReading):
    """Keys with no weight in some rows only, every such row leaving out the same keys and the rest
    of it the softmax over the keys it kept: said by the rows and the keys (a key mask that depends
    on the row: the query tile's start or the row where the key's own place belongs)."""

    name = "keys left out in some rows"

    def run(self, ctx: Context) -> list[Finding]:
        W, P, N = ctx.facts.W, ctx.facts.P, ctx.probe.shape.N
        dead = (np.abs(W) <= ZERO) & (P > 1e-5)
        rows = np.flatnonzero(dead.any(axis=(0, 2)))  # row places (any batch) with a key left out
        if not len(rows) or len(rows) == N or dead.all(axis=(0, 1)).any() or (np.abs(W) <= ZERO).all(axis=2).any():
            return []  # none, every row, a key no row weighs (KeysWithoutWeight's), a row that weighs nothing
        s = logits(ctx.probe.q, ctx.probe.k)
        s[dead | ((np.abs(W) <= ZERO) & (P <= 1e-5))] = -np.inf
        with np.errstate(invalid="ignore"):
            if not (np.abs(W - softmax_rows(s)) <= ROW_ATOL).all():
                return []  # the other weights are not the softmax over the kept keys (NaN is not)
        left_out = np.flatnonzero(dead[:, rows].any(axis=(0, 1)))  # the keys those rows leave out, together
        if (np.abs(W[:, rows][..., left_out]) > ZERO).any():
            return []  # rows that leave out different keys: no one set said
        which, _ = describe_keys(left_out, N)
        if last := last_key_alone(left_out, N):
            return measured(ctx, [f"measured: rows {spans(rows)} give no weight to {which}: {last}"],
                            look=LAST_KEY_LOOK, keys_left_out_by_row=len(rows), last_key_alone=True)
        return measured(ctx, [f"measured: rows {spans(rows)} give no weight to {which}; the rows besides them leave "
                              "out no key P weighs, and the weights kept are the softmax over the keys kept: a key "
                              "mask that depends on the row (a bound or a lane mask taken from the query tile's start "
                              f"or the row's index where the key's own place belongs){restarted(left_out, N)}"],
                        look=KEY_BOUND_LOOK, keys_left_out_by_row=len(rows))


# where a key is tested against N: `j0 + lane < N`, `key < n ? ... : ...`, `if (j >= N)`
KEY_BOUND_LOOK = ("a key's bound", r"\b\w+\s*\+\s*\w+\s*<\s*(?:N|n|seq\w*|len\w*)\b|"
                                   r"\b(?:j|jj|k|kk|key\w*|col\w*)\s*(?:<|>=)\s*(?:N|n|seq\w*|len\w*)\b")


class TilesAlike(WeightReading):
    """Every key of a tile weighed alike in each row: the tile's keys all scored with one key's
    score. Where that key is j0 + (r mod R) for the row r, the tile's key was taken from the query
    row's place in its block (a thread's row index where the lane's key belongs)."""

    name = "keys of a tile weighed alike"

    def run(self, ctx: Context) -> list[Finding]:
        W, N = ctx.facts.W, ctx.probe.shape.N
        s = logits(ctx.probe.q, ctx.probe.k)
        for T in (t for t in sorted(KEY_TILES, reverse=True) if t < N and N % t == 0):  # the largest alike
            tiles = W.reshape(*W.shape[:2], N // T, T)
            if np.ptp(tiles, axis=3).max() > ROW_ATOL or np.ptp(W, axis=2).max() <= ROW_ATOL:
                continue  # not alike within the tiles, or alike across every key (Factors' case)
            said = f"measured: every key of a tile of {T} weighed alike in each row (one score a tile)"
            rows, starts = np.arange(N)[:, None], np.arange(0, N, T)[None, :]
            for R in (r for r in (8, 16, 32, 64) if r <= T):
                e = np.exp(s[:, rows, starts + rows % R] - s.max(axis=2, keepdims=True))  # (B, N, tiles)
                if np.abs(tiles[..., 0] - e / (T * e.sum(axis=2, keepdims=True))).max() <= ROW_ATOL:
                    return measured(ctx, [f"{said}: row r's tiles scored with key j0 + (r mod {R}) each (the row's "
                                          f"place in a block of {R} rows): the tile's key taken from the query row's "
                                          "index (a thread's row) where the lane's own key belongs"], tiles_alike=T)
            return measured(ctx, [f"{said}: a tile's keys given one weight, not each its own"], tiles_alike=T)
        return []


# What to show of the source for a reading: (the words, a pattern of its lines).
LOOK = {"scale": ("the scale or the exponential", r"sqrt|\bscale|log2|LOG2|1\.44|0\.69|" + EXP_LINES),
        "exp": ("exp", EXP_LINES),
        "start": ("the running sum's start", r"\b(?:l|li|l_\w+|l\d+|row_sum\w*|sum\w*|lse\w*|log_sum\w*)\s*"
                  r"(?:\[[^\]]*\])?\s*=\s*(?:0|1)(?:\.0*)?f?\s*[;,)]"),
        "rounded": ("a count rounded up", r"&\s*~\s*\(?\d+|\+\s*\d+\s*\)\s*/\s*\d+\s*\)?\s*\*\s*\d+")}


class Summary(Probe):
    """What W is against P, in numbers, where no reading named a mechanism."""

    name = "W against P in numbers"

    def applies(self, ctx: Context) -> bool:
        return ctx.facts.W is not None and not ctx.facts.named

    def run(self, ctx: Context) -> list[Finding]:
        W, P = ctx.facts.W, ctx.facts.P
        if not np.isfinite(W).any():
            return [Finding(Kind.OBSERVED, [f"measured on {ctx.probe.label}: every weight read is NaN or infinite"])]
        diff = np.where(np.isfinite(W), np.abs(W - P), 0.0)
        b, i, j = np.unravel_index(int(np.nanargmax(diff)), diff.shape)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = (W / P)[P > 1e-6]
        rows = W.sum(axis=2)
        linear = "" if ctx.facts.linear else " (the output is not W V: these weights are what one-hot V read)"
        pinned = f"nothing more precise than the catalogue's lead ({'; '.join(ctx.hypothesis)}) pinned down" \
            if ctx.hypothesis else "no mechanism pinned down"
        return [Finding(Kind.OBSERVED, [
            f"measured on {ctx.probe.label}, {pinned}{linear}: W against the true P: max |W - P| "
            f"{fmt(diff.max())} (batch {b}, row {i}, key {j}: W {fmt(W[b, i, j])}, P {fmt(P[b, i, j])}); row sums of "
            f"W {span(rows)}; W / P {span(ratio)} where P > 1e-6"],
            dict(max_diff=float(diff.max()), row_sums=[float(rows.min()), float(rows.max())]))]
