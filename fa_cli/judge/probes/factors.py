"""W / P between the measured weights W and the true P, as factors: one per row (which running
sum l the program divided by, over the online softmax's variants), one per key tile (a regression
on the running maxima), or one on the logits (log W against the true logits, named as powers of
sqrt(d) and ln 2). The readings of rows and keys are in readings.py, the search over the online
softmax's steps in softmax_steps.py; these come after them.
"""
from __future__ import annotations

import warnings

import numpy as np

from ..findings import Finding, Kind
from ..mistakes import KEY_TILES
from .partial_sums import (base_mixed, first_rows_statistics, half_sums, in_tiles, keys_counted, parts_unmerged,
                           read_in_place_of, tile_maxima)
from .running_sums import (BUTTERFLY_STEPS, BUTTERFLY_WORDS, CARRIED_WORDS,
                           TILE_MAX_WORDS, butterflies_unrescaled, carried_over, chains_not_rescaled,
                           first_batchs, sum_variants, tiles_named, whole_times)
from .readings import FIT_SHARE, FLAT, LOOK, WeightReading, measured, span
from .score_sums import signed_row_factor
from .sum_terms import extra_term, extra_words, fixed_point, max_scaled
from .key_places import counted_by_place, lanes_apart, weighed_otherwise_by_place
from .logit_scale import logit_slope
from .step import Context, fmt, logits, softmax_rows

def per_row_factor(W: np.ndarray, P: np.ndarray, s: np.ndarray) -> tuple[str, dict] | None:
    """W = f_i P for each row i: the factor and which sum l gives it."""
    use = P > 1e-6
    # A key P weighs that W leaves at 0 is no factor of its row (exp of a score within 14 of the
    # max never underflows), and a row with one weighed key fits any factor: neither is a fit.
    with np.errstate(divide="ignore", invalid="ignore"):
        logr = np.where(use & (W > 0), np.log(W / P), np.where(use, -np.inf, np.nan))
    weighed = (use & (W > 0)).sum(axis=2)
    with np.errstate(invalid="ignore"):  # W negative (no weight): its row's ratios inf - inf, no fit
        hi, lo = np.nanmax(logr, axis=2), np.nanmin(logr, axis=2)
        fits = (hi - lo <= FLAT) & (weighed >= 2)
    if np.isnan(hi).any() or np.mean(fits) < FIT_SHARE:
        return None
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a row with no finite ratio: its f is NaN, unused
        f = np.exp(np.nanmean(np.where(fits[..., None], logr, np.nan), axis=2))
    fitted = f[fits]
    off = np.abs(np.log(fitted)) > FLAT
    if not off.any():
        return None
    total = np.exp(s - s.max(axis=-1, keepdims=True)).sum(axis=-1)  # the right l (relative to the final max)
    fields = dict(row_factor=[float(np.min(fitted)), float(np.max(fitted))])
    right = int((~off).sum())
    said = f"W = f P with one factor f per row (f from {span(fitted)}; the row sums of W are f" + \
        (f"; f = 1, the row right, in {right} of the {off.size} rows" if right else "") + ")"
    if np.mean(np.abs(np.log(f * total)) <= FLAT) >= FIT_SHARE:
        return f"{said}: f = 1 / l: the output is divided by l twice", fields
    undivided, right_rows = np.abs(np.log(f / total)) <= FLAT, np.abs(np.log(f)) <= FLAT
    if np.mean(undivided) >= FIT_SHARE:
        return f"{said}: f = l: the final division of the output by the running sum l is missing" \
            + divided_first(undivided, right_rows), fields
    if (where := undivided_batches(undivided, right_rows)):
        return f"{said}: f = l in {where}, f = 1 in every other: those rows never divided by their running sum l" \
            + (": a division launched batch by batch that leaves out the last (one that divides batch b - 1 after "
               "batch b's work, nothing after the loop)" if where.startswith("the last") else ""), fields
    if (which := wrong_sum(f, s, total, fields)) is not None:
        return f"{said}, f = (the right l) / (l the program divided by): {which}", fields
    if scaled := max_scaled(f, s):
        return f"{said}: {scaled[0]}", {**fields, **scaled[1]}
    if np.ptp(np.log(fitted)) <= FLAT:
        f0 = float(np.mean(fitted))
        return f"{said}: the same f = {fmt(f0)} in every row: a constant factor on the output{whole_times(f0)}", fields
    tiles = ", ".join(str(T) for T in KEY_TILES if T < s.shape[2])
    return (f"{said}: the right scores and softmax, divided by another sum than theirs (f = the right l / the l it "
            f"divided by), none of the running sums fa tried (key tiles of {tiles or 'none'} and one key at a time: "
            "tiles left out, not rescaled, rescaled twice, a tile's largest weight for its sum; one half of every "
            "group of 2 to 256 keys, alone or counted twice; 2 to 64 interleaved chains of keys, each against its own "
            "max, added without their factors, or not rescaled as their max grows, or merged by a butterfly that "
            "rescales one side; batch 0's sum for every batch, or the batch before's carried on; another row's sum; "
            "the tile's sum given the old state's factor; one term more; weights as whole numbers or in fixed "
            "point of 8 to 24 bits); look at how l is summed"), fields


def wrong_sum(f: np.ndarray, s: np.ndarray, total: np.ndarray, fields: dict) -> str | None:
    """Which sum l the program divided by, where f = total / l fits one of the running sums'
    variants, half sums or interleaved chains (its fields added); None where none fits."""
    off = np.abs(np.log(f)) > FLAT  # the wrong rows: a sum must give them, not only the right ones

    def fits(l_wrong: np.ndarray) -> bool:
        close = np.abs(np.log(f * l_wrong / total)) <= FLAT
        return np.mean(close) >= FIT_SHARE and np.mean(close[off]) >= FIT_SHARE
    for T, tiles, ab, how, l_wrong in sum_variants(s):
        if fits(l_wrong):
            slots = "empty slots" in how  # the partial tile's slots past N, counted: where they are masked
            fields.update(sum_tile=T, sum_terms=tiles, sum_factor=list(ab), sum_tile_max=how == TILE_MAX_WORDS)
            return f"its running sum l holds {tiles} ({tiles_named(T)}){', ' + how if how else ''}; look at " + \
                ("where the keys past N are masked" if slots else "the update of l")
    for G, low, twice, l_wrong in half_sums(s):
        if fits(l_wrong):
            fields.update(sum_half_of=2 * G, sum_half_low=low, sum_half_twice=twice)
            which = "first" if low else "second"
            half = f"the keys with j mod {2 * G} {'<' if low else '>='} {G} (the {which} {G} of every {2 * G})"
            if twice:
                return (f"its sum l counts {half} twice, every other key once: a reduction of l over lanes that hold "
                        f"those keys a second time (a tile's keys dealt to {G} lanes, two a lane, reduced over {2 * G} "
                        "lanes: a wavefront's 64 over keys dealt as for a warp's 32); look at the reduction of l")
            return (f"its sum l holds only {half}: a reduction of l over {2 * G} threads or lanes that folds in half "
                    f"of them (a tree that stops one step early, or leaves out the values {G} away); look at the "
                    "reduction of l")
    if s.shape[0] > 1 and fits(carried_over(s)):
        fields.update(sum_carried=True)
        return CARRIED_WORDS
    for words, l_wrong in first_batchs(s) if s.shape[0] > 1 else ():
        if fits(l_wrong):
            fields.update(sum_first_batch=True)
            return words
    for words, rows in other_rows(s.shape[1]):
        if fits(total[:, rows]):
            fields.update(sum_other_row=words)
            return (f"each row r divided by {words}'s sum l (each relative to its own max): the right scores and "
                    "output, the sum taken from another row's slot (a register block's or a shared array's l indexed "
                    "with another row); look at where l is kept for each row")
    for words, found, l_wrong in chains_not_rescaled(s):
        if fits(l_wrong):
            fields.update(found)
            return words
    for G, whose, l_wrong in butterflies_unrescaled(s):
        if fits(l_wrong):
            fields.update(sum_butterfly=G, sum_unrescaled=whose)
            return BUTTERFLY_WORDS.format(G=G, whose=whose, step=BUTTERFLY_STEPS[whose])
    if (extra := extra_term(f, s, total)) and fits(extra[1]):
        fields.update(sum_extra_score=extra[0], look="start")
        return extra_words(extra[0])
    if (fixed := fixed_point(f, s, total)) and fits(fixed[2]):
        fields.update(fixed[1])
        return fixed[0]
    for words, l_wrong in parts_unmerged(s):
        if fits(l_wrong):
            fields.update(sum_parts=words)
            return (f"its l adds the sums of {words}, each against the part's own max, without the factors "
                    "exp(m_part - m) that bring them to one max (the output's parts have them: W is P times one "
                    "factor a row); look at where the parts are merged")
    return None


def other_rows(N: int):
    """(words, each row's other row) of the rows whose sum a row may take: r xor k, r +- 1, a group's first."""
    r = np.arange(N)
    for k in (1, 2, 4, 8, 16):
        if k < N:
            yield f"row r xor {k}", np.minimum(r ^ k, N - 1)
    yield "row r + 1", np.minimum(r + 1, N - 1)
    yield "row r - 1", np.maximum(r - 1, 0)
    for R in (2, 4, 8, 16, 32):
        if R < N:
            yield f"the first row of its group of {R}, r - r % {R}", r - r % R
    for R in (2, 4, 8, 16, 32, 64, 128):  # a thread that holds rows r0 and r0 + R: the second given the first's
        if R < N:
            yield f"row r - {R} where r mod {2 * R} >= {R} (the first of rows r0, r0 + {R} held together)", r & ~R


def undivided_batches(undivided: np.ndarray, right: np.ndarray) -> str | None:
    """Where some batches' rows are all undivided (f = l) and every other batch's right: those
    batches in words ("the last batch's rows", "batches 1, 3"); None otherwise."""
    whole, fine = undivided.all(axis=1), right.all(axis=1)
    if not (whole | fine).all() or not whole.any() or whole.all():
        return None
    batches = np.flatnonzero(whole)
    if batches.tolist() == [undivided.shape[0] - 1]:
        return f"the last batch's rows (batch {batches[0]})"
    return "the rows of batch" + ("es " if batches.size > 1 else " ") + ", ".join(map(str, batches))


def divided_first(undivided: np.ndarray, right: np.ndarray) -> str:
    """Where the rows that were divided are the first m of the B*N taken together and all the
    others were not: the division's threads cover m rows' worth of values, not every value."""
    flat_right, flat_undivided = right.ravel(), undivided.ravel()
    m, rows = int(flat_right.sum()), flat_right.size
    if not m or not flat_right[:m].all() or not flat_undivided[m:].all():
        return ""
    said = f", but for the first {m} of the {rows} rows taken together, which are divided: a division that stops short"
    if rows % m == 0 and rows // m in (32, 64):  # m rows of d values: B*N values, one a row
        said += (f" after B*N = {rows} values, d = {rows // m} of them a row (a launch sized for the rows where the "
                 "division has a thread a value)")
    return said


def per_tile_factor(W: np.ndarray, P: np.ndarray, s: np.ndarray) -> tuple[str, dict] | None:
    """W / P constant within each key tile and changing between tiles: the factor, as a power of
    the running maxima (regression, a row's constant removed)."""
    B, N, _ = W.shape
    use = P > 1e-6
    with np.errstate(divide="ignore", invalid="ignore"):
        logr = np.where(use & (W > 0), np.log(W / P), np.nan)
    parts = {N // S for S in (2, 4, 8) if N % S == 0} | {256, 512}  # key splits' parts, past the tiles
    sizes = set(KEY_TILES) | {p for p in parts if max(KEY_TILES) < p < N}
    for T in sorted(sizes, reverse=True):  # the largest tile (or part) it holds for: the program's own
        tiles = -(-N // T)
        if tiles < 2:
            continue
        blocks = in_tiles(logr, T, np.nan)
        with np.errstate(invalid="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a tile with no key where P > 1e-6
            spread = np.nanmax(blocks, axis=3) - np.nanmin(blocks, axis=3)
            g = np.nanmean(blocks, axis=3)
        ok = ~np.isnan(spread)
        if not ok.any() or np.mean(spread[ok] <= FLAT) < FIT_SHARE:
            continue
        own, running, final, _ = tile_maxima(s, T)
        before = np.concatenate([running[..., :1], running[..., :-1]], axis=2)  # the max before each tile
        x = np.stack([final - running, final - own, before - running], axis=-1)  # (B, N, tiles, 3)
        valid = ~np.isnan(g)  # tiles with weight (a tile with none is said by KeysWithoutWeight)
        rows_ok = valid.sum(axis=2) >= 2
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            changes = np.nanmax(g, axis=2) - np.nanmin(g, axis=2)
        if rows_ok.mean() < FIT_SHARE or np.nanmax(changes[rows_ok]) <= FLAT:
            continue  # no change between tiles: a per-row factor, if anything
        gm = np.where(valid, g, 0.0)
        n = np.maximum(valid.sum(axis=2, keepdims=True), 1)
        yc = np.where(valid, g - gm.sum(axis=2, keepdims=True) / n, 0.0)[rows_ok]
        xv = np.where(valid[..., None], x, 0.0)
        xc = np.where(valid[..., None], x - xv.sum(axis=2, keepdims=True) / n[..., None], 0.0)[rows_ok]
        use = valid[rows_ok]
        coef, *_ = np.linalg.lstsq(xc[use], yc[use], rcond=None)
        rounded = np.round(coef * 2) / 2
        fit = np.abs(xc[use] @ rounded - yc[use])
        if np.linalg.matrix_rank(xc[use], tol=1e-6 * max(1.0, float(np.abs(xc[use]).max()))) < x.shape[-1]:
            rounded, fit = named_models(xc[use], yc[use], rounded, fit)  # the maxima cannot tell powers apart here
        first = g[rows_ok][0]
        shown = np.exp(first - first[~np.isnan(first)][0])
        example = ", ".join("none" if np.isnan(v) else fmt(v) for v in shown[:8]) + (", ..." if shown.size > 8 else "")
        said = (f"W / P is constant within each key tile of {T} and changes between tiles (one row's factors, tile "
                f"by tile, relative to the first: {example})")
        fields = dict(tile=T)
        if isinstance(rounded, list):  # several of the named models fit: none is chosen
            return undetermined(said, tiles, rounded, fields)
        if np.mean(fit <= 10 * FLAT) >= FIT_SHARE and np.abs(rounded).sum() > 0:
            return tile_words(said, tuple(float(v) for v in rounded), W, fields)
        if found := merged_parts(g, s, T, valid, rows_ok, W):
            return f"{said}; {found[0]}", dict(fields, **found[1])
        return said + "; not a power of the running maxima fa tried", fields
    return None


def undetermined(said: str, tiles: int, models: list, fields: dict) -> tuple[str, dict]:
    """Several named tile models that the maxima measured give the same factors, in words: none chosen."""
    return (f"{said}; the running maxima measured here ({tiles} key tiles a row) give these the same factors, so "
            "they cannot be told apart: " + "; or ".join(TILE_WORDS[p] for p in models) + " (a case with more key "
            "tiles a row, or more rows whose max grows, tells them apart)"), \
        dict(fields, tile_models=[list(p) for p in models])


def named_models(xc: np.ndarray, yc: np.ndarray, rounded: np.ndarray, fit: np.ndarray):
    """Where the running maxima leave the powers undetermined (two tiles a row: m_final - m_after and
    m_before - m_after are one difference), the least-squares powers are one of many: the named models
    (TILE_WORDS) that fit instead, as a list where more than one does, the one that does, or the fit as
    it was where none does."""
    fitting = [p for p in TILE_WORDS if np.mean(np.abs(xc @ np.array(p) - yc) <= 10 * FLAT) >= FIT_SHARE]
    if len(fitting) > 1:
        return fitting, fit
    if fitting:
        return np.array(fitting[0]), np.abs(xc @ np.array(fitting[0]) - yc)
    return rounded, fit


def merged_parts(g: np.ndarray, s: np.ndarray, T: int, valid: np.ndarray, rows_ok: np.ndarray,
                 W: np.ndarray) -> tuple[str, dict] | None:
    """Per-tile factors that no power of the running maxima gives, read as parts (tiles, splits,
    warps) merged otherwise: counted whole times, normalised apart, in the wrong base, with
    another row's statistics."""
    if counted := tiles_counted(g[rows_ok], W):
        return counted, dict(tile_counts=counted)
    if own_sums(g, s, T, valid, rows_ok):
        return ("each tile's factor is 1 / (the tile's own sum of exp(s - m_tile)): each tile of keys (a split) "
                "normalised by its own sum, then merged with weights exp(m_tile - m_final) alone, not l_tile * "
                "exp(m_tile - m_final): look at the merge of the splits"), dict(own_sums=True)
    if mixed := base_mixed(g, s, T, valid, rows_ok):
        return mixed, dict(base_mixed=True)
    if first := first_rows_statistics(g, s, T, valid, rows_ok):
        return first, dict(first_rows_statistics=True)
    return None


def own_sums(g: np.ndarray, s: np.ndarray, T: int, valid: np.ndarray, rows_ok: np.ndarray) -> bool:
    """log W / P per tile (g) = -log of the tile's own sum, sum of exp(s - m_tile) over its keys, and
    a constant per row: parts normalised apart and merged without their sums."""
    own, _, final, sums = tile_maxima(s, T)
    with np.errstate(divide="ignore"):
        model = -(np.log(sums) + (final - own))
    gap = np.where(valid, g - model, np.nan)[rows_ok]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        gap = gap - np.nanmean(gap, axis=1, keepdims=True)
    return bool(np.mean(np.abs(gap[valid[rows_ok]]) <= 10 * FLAT) >= FIT_SHARE)


def tiles_counted(g: np.ndarray, W: np.ndarray) -> str | None:
    """Each tile's factor a whole number of times the smallest one's, the same numbers in every row
    (g: rows x tiles, log W / P): the keys of tile t added c_t times."""
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        c = np.exp(g - np.nanmin(g, axis=1, keepdims=True))
    whole = np.round(c)
    if not np.isfinite(c[0]).all() or (np.abs(c - whole) > 1e-3 * whole).any() or (whole != whole[0]).any():
        return None
    counts = [int(x) for x in whole[0]]
    sums = W.sum(axis=2)
    l_too = "the sum l alike" if np.abs(sums - 1).max() <= 1e-3 else f"l not alike (rows of W sum to {span(sums)})"
    shown = ", ".join(map(str, counts))
    said = (f"each tile's keys weighed a whole number of times the least one's, the same in every row ({shown} "
            f"for tiles 0..{len(counts) - 1}): the keys of tile t added c_t times, {l_too}")
    if len(counts) > 1 and all(a == 2 * b for a, b in zip(counts, counts[1:])):
        return said + ("; doubling back from the last tile: a running sum added to itself at every tile (o += a "
                       "shuffle of o, where only the tile's own part should be added)")
    if counts == sorted(counts) and counts[0] < counts[-1]:
        return said + "; later keys counted more: parts of the work (warps, blocks, splits) whose key ranges overlap"
    return said


def tile_words(said: str, powers: tuple, W: np.ndarray, fields: dict) -> tuple[str, dict]:
    """The per-tile factor in words: its powers of the running maxima, what that means, and
    whether the rows of W still sum to 1 (l treated as acc is)."""
    a, b, c = powers
    fields["tile_factor"] = [a, b, c]
    terms = " * ".join(t for t in (power("exp(m_final - m_after_tile)", a), power("exp(m_final - m_tile)", b),
                                   power("exp(m_before_tile - m_after_tile)", c)) if t)
    meaning = TILE_WORDS.get(powers, "the rescale of the partial output acc")
    sums = W.sum(axis=2)
    both = np.abs(sums - 1).max() <= 1e-3
    fields["row_sums_one"] = bool(both)
    also = ("; the rows of W sum to 1, so the running sum l is treated the same way: the factor itself "
            "(alpha = exp(m_old - m_new)) is what is wrong, for acc and l alike; look at how alpha is "
            "computed (from the max before it is updated?)") if both and powers == (1.0, 0.0, 0.0) else \
        f"; the rows of W sum to {span(sums)}" + ("" if both else ": l is not treated the same way")
    return (f"{said}; each tile's factor is {terms} (m_after_tile, m_before_tile: the running max after "
            f"and before the tile, m_tile: the tile's own max): {meaning}{also}"), fields


TILE_WORDS = {  # (a, b, c): the powers of the three factors
    (1.0, 0.0, 0.0): "the partial output acc is not rescaled by exp(m_old - m_new) when the running max grows",
    (2.0, 0.0, 0.0): "acc is multiplied by exp(m_new - m_old), the inverse of the rescale",
    (-1.0, 0.0, 0.0): "acc is rescaled twice by exp(m_old - m_new)",
    (0.0, 1.0, 0.0): "each tile's exponentials use the tile's own max m_tile, with no rescale to the running max",
    (-1.0, 1.0, 0.0): "each tile's p = exp(s - m_tile) uses the tile's own max where the rescale of acc follows "
                      "the running max (p should be exp(s - m_new))",
    (0.0, 2.0, 0.0): "each part's terms weighed exp(m_final - m_tile) where exp(m_tile - m_final) belongs: the "
                     "sign of the merge's rescale reversed (the parts, tiles or key splits, with the lower maxima "
                     "weigh the most); look at the factor each part is merged with",
    (0.0, 0.0, 1.0): "each tile's own terms are multiplied by alpha = exp(m_old - m_new) too, where only acc's old "
                     "value should be (acc = (acc + p V) * alpha; for the first tile alpha = exp(-inf) = 0)",
    (0.0, 0.0, -1.0): "each tile's p = exp(s - m_old) is taken against the running max before the tile, while acc "
                      "and l are rescaled to the new max (p should be exp(s - m_new))",
}


def power(term: str, p: float) -> str:
    if p == 0:
        return ""
    return term if p == 1 else f"{term}^{p:g}"


def weights_as_scores(W: np.ndarray, P: np.ndarray) -> tuple[str, dict] | None:
    """log W_ij = p_ij + c_i, p the right weights before the division by l (exp(s - m)) or after
    (P): the exponential taken of the weights where the scores belong (a row of scores
    overwritten by its weights, then a pass that takes exp(s - m) of it again)."""
    if np.allclose(W, P, atol=1e-3) or np.ptp(P, axis=2).max() <= 1e-2:
        return None
    for which, p in (("exp(s - m), before the division by l", P / P.max(axis=2, keepdims=True)),
                     ("P, after the division by l", P)):
        with np.errstate(divide="ignore", invalid="ignore"):  # W of 0 or negative: no fit
            y = np.log(W) - p
        if np.isfinite(y).all() and np.mean(np.ptp(y, axis=2) <= 1e-3) >= FIT_SHARE:  # one constant a row
            return (f"log W = p + a constant per row, p the right weights ({which}): the exponential taken of the "
                    "weights where the scores belong (a row of scores overwritten by its weights, then exp(s - m) "
                    "taken of it again); look at what the last pass reads"), dict(weights_as_scores=which,
                                                                                  look="scale")
    return None


def all_on_the_largest(W: np.ndarray, s: np.ndarray) -> tuple[str, dict] | None:
    """Each row's whole weight on its largest score's key: a softmax whose scores were multiplied
    by a factor so large that only the max counts (W / P fits no factor there: one key a row)."""
    top = np.take_along_axis(W, s.argmax(axis=2)[..., None], axis=2)[..., 0]
    alone = (np.abs(top - 1) <= 1e-3) & (np.abs(W.sum(axis=2) - top) <= 1e-3)
    if np.mean(alone) < FIT_SHARE or np.allclose(W, softmax_rows(s), atol=1e-3):
        return None
    return (f"in {np.mean(alone):.0%} of the rows all the weight is on the key of the row's largest score (1 "
            "there, 0 on every other key): the scores were multiplied by a factor far above 1/sqrt(d) (a scale "
            "read from the wrong place, or copied as another type), or the softmax was taken as a max"), \
        dict(look="scale")


class Factors(WeightReading):
    name = "W / P by row and by key tile, and log W against the logits and against P"

    def run(self, ctx: Context) -> list[Finding]:
        W, P = ctx.facts.W, ctx.facts.P
        s = logits(ctx.probe.q, ctx.probe.k)
        seen = None  # a reading that observes and names nothing: said where no later one names a mechanism
        for reading in (read_in_place_of(W, P, ctx.facts.dead_keys), all_on_the_largest(W, s),
                        per_row_factor(W, P, s), signed_row_factor(W, P, s),
                        per_tile_factor(W, P, s), keys_counted(W, P), counted_by_place(W, P),
                        weighed_otherwise_by_place(W, P, FLAT), lanes_apart(W, P, FLAT),
                        logit_slope(W, s, ctx.probe.shape.d), weights_as_scores(W, P)):
            if reading and "not a power" in reading[0]:
                seen = seen or [Finding(Kind.OBSERVED, [f"measured: {reading[0]}"], reading[1])]
            elif reading:
                said, fields = reading
                return measured(ctx, [f"measured: {said}"], look=LOOK.get(fields.pop("look", "")), **fields)
        return seen or []
