"""The online softmax's steps as a search space: which single step, written otherwise, gives the
weights W the program applied.

The tiled online softmax of one query row, over key tiles of T, is these steps:

  scores  s = the tile's scores                   (an accumulator set to 0 for each tile)
  max     m_new = max(m, max of the tile's scores)
  factor  alpha = exp(m - m_new)                  (m before the update)
  p       p = exp(s - m_new)                      (the tile's scores s)
  sum     l = l * alpha + sum(p)                  (l starts at 0)
  output  acc = acc * alpha + p V                 (acc holds p's weights on the keys here)
  update  m = m_new
  final   after the last tile, O = acc / l

Each step has other ways a program may write it (STEP_FORMS: the right form first). The search
simulates the algorithm with one step replaced, for every tile size T from 1 (key by key) to 128 (the largest
first among those that fit equally), on a few rows first and then on every row of the probe,
and names the step and its form where the simulated weights are the program's. W here is the
coefficient of each key's V row in the output: what ReadWeights measured.
"""
from __future__ import annotations

import numpy as np

from ..findings import Finding
from .readings import LOOK, WeightReading, measured
from .step import Context, column_owners, logits, softmax_rows, spans

LOG2E = float(np.log2(np.e))
LN2 = float(np.log(2))
MAX_TILE = 128
SCREEN_ROWS = 12  # rows of batch 0 every form is tried on first
ATOL, RTOL = 2e-4, 2e-3  # simulated against measured weights (float32 programs)

# step -> (code as the program may write it, function); the first is the algorithm's own.
# Arguments: m (before), m_new, tmax (the tile's own max), s (the tile's scores), l, acc, alpha,
# p (the tile's exponentials), psum; the max form also gets the tile's max only.
STEP_FORMS = {
    "scores": (("s = the tile's scores", lambda tile, carried: tile),
               ("s = the tile's scores plus every earlier tile's at the same places (a score accumulator set to 0 "
                "once, before the tile loop, where each tile needs its own zero)", lambda tile, carried: tile + carried)),
    # (m_new = the tile's max alone is no mistake: alpha and p then share another reference, which
    # cancels in acc / l; the update below, which carries it to the next tile, is one)
    "max": (("m_new = max(m, tile max)", lambda m, tmax: np.maximum(m, tmax)),),
    "factor": (("alpha = exp(m - m_new)", lambda m, m_new, tmax: np.exp(m - m_new)),
               ("alpha = exp(m - tile max) (the tile's own max where the new running max belongs)",
                lambda m, m_new, tmax: np.exp(m - tmax)),
               ("alpha = exp(m_new - m) (the factor inverted)", lambda m, m_new, tmax: np.exp(m_new - m)),
               ("alpha = 1 (m updated before alpha is computed, or no rescale)",
                lambda m, m_new, tmax: np.ones_like(m_new)),
               ("alpha = exp2(m - m_new) (base 2 for a natural-log difference)",
                lambda m, m_new, tmax: np.exp2(m - m_new)),
               ("alpha = exp(m - m_new) of maxima kept in the log2 domain (exp where exp2 belongs)",
                lambda m, m_new, tmax: np.exp(LOG2E * (m - m_new))),
               ("alpha = exp2 of natural-log maxima times log2(e) twice",
                lambda m, m_new, tmax: np.exp(LN2 * (m - m_new)))),
    "p": (("p = exp(s - m_new)", lambda s, m, m_new, tmax: np.exp(s - m_new[..., None])),
          ("p = exp(s - tile max) (the tile's own max, not the running one)",
           lambda s, m, m_new, tmax: np.exp(s - tmax[..., None])),
          ("p = exp(tile max - m_new) for every key of the tile (each score overwritten by the tile's max, the "
           "max reduced in place)",
           lambda s, m, m_new, tmax: np.broadcast_to(np.exp(tmax - m_new)[..., None], s.shape)),
          ("p = exp(s - the running max as far as that key) (each key's weight taken against the max after it, not "
           "the tile's new max, while l and acc are rescaled once for the tile: keys taken a few at a time)",
           lambda s, m, m_new, tmax: np.exp(s - np.maximum(np.maximum.accumulate(s, axis=-1), m[..., None]))),
          ("p = exp(s - m) against the running max before the tile (the first tile's own max for the first), while l "
           "and acc are rescaled to the new max m_new", lambda s, m, m_new, tmax: np.exp(
               s - np.where(np.isfinite(m), m, tmax)[..., None]))),
    # (each also gets the tiles' sums so far, each relative to its own tile's max: a sum never reset)
    "sum": (("l = l * alpha + sum(p)", lambda l, alpha, psum, so_far: l * alpha + psum),
            ("l = l + sum(p) (l not rescaled)", lambda l, alpha, psum, so_far: l + psum),
            ("l = (l + sum(p)) * alpha (the tile's own sum rescaled too)",
             lambda l, alpha, psum, so_far: (l + psum) * alpha),
            ("l = sum(p) (only the last tile's sum kept)", lambda l, alpha, psum, so_far: psum),
            ("l = l * alpha (the tile's sum never added)", lambda l, alpha, psum, so_far: l * alpha),
            ("l = l / alpha + sum(p) (divided by the factor)", lambda l, alpha, psum, so_far: l / alpha + psum),
            ("l = l * alpha * alpha + sum(p) (l rescaled twice)", lambda l, alpha, psum, so_far: l * alpha * alpha + psum),
            ("l = l + alpha * sum(p) (the factor put on the tile's sum, not on the old l)",
             lambda l, alpha, psum, so_far: l + alpha * psum),
            ("l = l * alpha + the sum of p over every tile so far (the tile's sum kept across tiles, never set back "
             "to 0)", lambda l, alpha, psum, so_far: l * alpha + so_far),
            *((f"l = l * alpha + sum(p), run {k} times a tile (inside a loop of {k} steps, as one over the "
               "output's dims)", lambda l, alpha, psum, so_far, k=k: repeated(l, alpha, psum, k)) for k in (32, 64))),
    # (each also gets l before and after the tile's update: a program that keeps acc divided by l)
    "output": (("acc = acc * alpha + p V", lambda acc, alpha, p_full, *sums: acc * alpha[..., None] + p_full),
               ("acc = acc + p V (acc not rescaled)", lambda acc, alpha, p_full, *sums: acc + p_full),
               ("acc = (acc + p V) * alpha (the tile's own terms rescaled too)",
                lambda acc, alpha, p_full, *sums: (acc + p_full) * alpha[..., None]),
               ("acc = acc / alpha + p V (divided by the factor)",
                lambda acc, alpha, p_full, *sums: acc / alpha[..., None] + p_full),
               ("acc = acc * alpha * alpha + p V (acc rescaled twice: once on its own and again in the update)",
                lambda acc, alpha, p_full, *sums: acc * (alpha * alpha)[..., None] + p_full),
               ("acc = acc * alpha + p_j V_j at every key j of the tile (the tile's factor applied once a key, "
                "not once a tile)", lambda acc, alpha, p_full, *sums: rescaled_each_key(acc, alpha, p_full)),
               ("acc = acc * alpha_before + p V, with the tile before's factor (acc rescaled before alpha is "
                "computed for this tile, the first tile's alpha a start value of 1)",
                lambda acc, alpha, p_full, l_old, l_new, alpha_before: acc * alpha_before[..., None] + p_full)),
    "update": (("m = m_new", lambda m_new, tmax: m_new),
               ("m = tile max (the max kept for the next tile is this tile's own)", lambda m_new, tmax: tmax)),
    "final": (("O = acc / l", lambda acc, l: acc / l[..., None]),
              ("O = acc (no division by l)", lambda acc, l: acc),
              ("O = acc / l^2 (divided twice)", lambda acc, l: acc / (l * l)[..., None])),
}
RIGHT = {step: forms[0][1] for step, forms in STEP_FORMS.items()}


def repeated(l: np.ndarray, alpha: np.ndarray, psum: np.ndarray, k: int) -> np.ndarray:
    """l after l = l * alpha + psum is run k times: l alpha^k + psum (1 + alpha + ... + alpha^(k-1))."""
    with np.errstate(invalid="ignore", divide="ignore"):
        series = np.where(alpha == 1.0, float(k), (1 - alpha ** k) / np.where(alpha == 1.0, 2.0, 1 - alpha))
    return l * alpha ** k + psum * series


def rescaled_each_key(acc: np.ndarray, alpha: np.ndarray, p_full: np.ndarray) -> np.ndarray:
    """acc after a tile whose keys were added one at a time, each after acc was multiplied by the
    tile's alpha: the tile's k-th of T keys weighs alpha^(T-1-k), what came before alpha^T (the
    tile's keys are where p_full is not 0)."""
    keys = np.flatnonzero((p_full != 0).reshape(-1, p_full.shape[-1]).any(axis=0))
    powers = np.zeros(p_full.shape[-1])
    powers[keys] = np.arange(len(keys))[::-1]
    with np.errstate(invalid="ignore"):
        return acc * alpha[..., None] ** len(keys) + p_full * alpha[..., None] ** powers


def simulate(s: np.ndarray, T: int, forms: dict, last_only: bool = False) -> np.ndarray:
    """W of the tiled online softmax over key tiles of T, with the given step functions (last_only:
    at the last tile alone, the right ones before it: a separate path for the last tile)."""
    shape = s.shape[:-1]
    given = forms
    N = s.shape[-1]
    m = np.full(shape, -np.inf)
    l, so_far = np.zeros(shape), np.zeros(shape)
    acc, carried = np.zeros(s.shape), np.zeros(shape + (min(T, N),))
    alpha_before = np.ones(shape)  # the factor of the tile before (a program's alpha before its first update)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        for j0 in range(0, N, T):
            forms = given if not last_only or j0 + T >= N else RIGHT
            tile = forms["scores"](s[..., j0:j0 + T], carried[..., :min(T, N - j0)])
            carried[..., :tile.shape[-1]] = tile
            tmax = tile.max(axis=-1)
            m_new = forms["max"](m, tmax)
            alpha = forms["factor"](m, m_new, tmax)  # the first tile's m is -inf, as a program's is
            p = forms["p"](tile, m, m_new, tmax)
            so_far = so_far + p.sum(axis=-1)
            l_before, l = l, forms["sum"](l, alpha, p.sum(axis=-1), so_far)
            p_full = np.zeros(s.shape)
            p_full[..., j0:j0 + T] = p
            acc = forms["output"](acc, alpha, p_full, l_before, l, alpha_before)
            alpha_before = alpha
            m = forms["update"](m_new, tmax)
        return forms["final"](acc, l)


# A program that keeps the output divided by l as it goes (FlashAttention-1's update: o = (l * alpha * o +
# p V) / l_new, O = o at the end), its update written otherwise: two steps of the table changed together.
def kept_divided(output) -> dict:
    """The step functions of an output kept divided by l: `output` its update, no division at the end."""
    return {"output": output, "final": lambda acc, l: acc}


NORMALISED = (
    ("o = (o * alpha + p V) / l_new, o kept divided by l (o's old sum left out: it is (o * l * alpha + p V) / l_new)",
     lambda acc, alpha, p_full, l_old, l_new, *_: (acc * alpha[..., None] + p_full) / l_new[..., None]),
    ("o = (l_new * alpha * o + p V) / l_new, o kept divided by l (the new sum where o's old one belongs: it is "
     "(l * alpha * o + p V) / l_new)",
     lambda acc, alpha, p_full, l_old, l_new, *_: acc * alpha[..., None] + p_full / l_new[..., None]),
    ("o = (l_new * o + p V) / l_new, o kept divided by l (m and l set to their new values before o's update reads "
     "them: its old sum and its factor read as the new ones; it is (l * exp(m - m_new) * o + p V) / l_new)",
     lambda acc, alpha, p_full, l_old, l_new, *_: acc + p_full / l_new[..., None]))  # (l * o + p V) / l_new: acc + p V


def bit_exp(x: np.ndarray, shift: float) -> np.ndarray:
    """exp(x) as a float's bits made from x * 2^23 log2(e) + (127 + shift) 2^23, truncated: 2^e (1 + f)
    for y = x log2(e) + shift = e + f, the fraction's power taken linearly (0 past a float's least)."""
    with np.errstate(invalid="ignore", over="ignore"):
        y = x * LOG2E + shift
        e = np.floor(y)
        return np.where(y > -126, np.exp2(e) * (1 + (y - e)), 0.0)


SPREAD_SHIFT = (1064866805 - 127 * 2 ** 23) / 2 ** 23  # the bias that halves the bit-level exp's largest error
# An exponential computed approximately, for the rescale and the weights alike: (words, exp).
APPROX_EXP = (("exp(x) as the bits of a float, x * 2^23 log2(e) + 127 * 2^23 made an integer (2^e (1 + f): the "
               "fraction's power taken linearly, up to 6% over e^x)", lambda x: bit_exp(x, 0.0)),
              ("exp(x) as the bits of a float, x * 2^23 log2(e) + 1064866805 made an integer (2^e (1 + f), shifted "
               "to spread its error: from 4% under e^x to 2% over)", lambda x: bit_exp(x, SPREAD_SHIFT)))


def variants():
    """(step, the form's words, the step functions) for every single step written otherwise, then
    the output kept divided by l with its update written otherwise, then the exponential of the
    rescale and the weights computed approximately."""
    for step, forms in STEP_FORMS.items():
        for words, f in forms[1:]:
            yield step, words, {**RIGHT, step: f}
    for words, output in NORMALISED:
        yield "output", words, {**RIGHT, **kept_divided(output)}
    for words, approx in APPROX_EXP:
        yield "exp", words, {**RIGHT, "factor": lambda m, m_new, tmax, f=approx: f(m - m_new),
                             "p": lambda s, m, m_new, tmax, f=approx: f(s - m_new[..., None])}


def close(sim: np.ndarray, W: np.ndarray) -> bool:
    """The simulated weights are the measured ones; a weight that is not finite fits nothing (inf
    is within any relative tolerance of inf, and of every finite value)."""
    if not (np.isfinite(sim).all() and np.isfinite(W).all()):
        return False
    return bool(np.all(np.abs(sim - W) <= ATOL + RTOL * np.abs(W)))


def search(W: np.ndarray, s: np.ndarray) -> tuple[str, str, list[int] | None] | None:
    """(step, its form, the tile sizes T) whose simulation gives W, on a few rows then on all;
    every T from 1 to 128 that fits (several where the measurement cannot tell them apart), or
    None where the whole row as one tile fits too (the form does not depend on the tiles)."""
    rows = (slice(0, 1), slice(0, min(SCREEN_ROWS, s.shape[1])))
    N = s.shape[-1]
    sizes = range(1, min(MAX_TILE, N - 1) + 1)  # 1: an online softmax updated key by key
    for step, words, forms in variants():
        fit = [T for T in sizes if close(simulate(s[rows], T, forms), W[rows]) and fits(s, T, forms, W)]
        if fit:
            return step, words, (None if fits(s, N, forms, W) else fit)
    for step, words, forms in variants():  # then at the last tile alone (tiles of 2 or more: one key is no path)
        fit = [T for T in sizes[1:] if close(simulate(s[rows], T, forms, True), W[rows]) and fits(s, T, forms, W, True)]
        if fit:
            return step, words + LAST_ONLY, fit
    return merge_search(W, s)


def set_words(W: np.ndarray, s: np.ndarray) -> str | None:
    """One set of columns' weights (N, N) read as the online softmax with one step written otherwise
    (set41's s01: the upper dims' rescale left out, key pairs): in words, or None."""
    found = search(W[None], s[None])
    if not found or found[0] == "merge":
        return None
    step, words, T = found
    return f"the tiled online softmax's weights ({tiles_words(T)}) with its {step} step written as `{words}`"


def tiles_words(T: list[int] | None) -> str:
    """The tile sizes a form fits at, in words."""
    return "any tile size: this step does not depend on it" if T is None else "one key at a time" if T == [1] else \
        f"key tiles of {T[0]}" if len(T) == 1 else \
        f"key tiles of {', '.join(map(str, T[:6]))}{' ...' if len(T) > 6 else ''}: each fits, this probe cannot " \
        "tell them apart"


LAST_ONLY = " at the last tile alone (the tiles before it right: a separate path for the last tile)"


# Lanes that each run the online softmax over their own keys (key j on lane j mod G) and merge the
# partials by an xor butterfly: at each step m_new = max(m, m_partner), a = exp(m - m_new), c =
# exp(m_partner - m_new), l = l * a + l_partner * c (l right), and the output's merge in one of these
# forms (the first the right one); lane 0's result is the row's.
MERGE_FORMS = (
    ("o = o * a + o_partner * c", lambda o, o_p, a, c: o * a + o_p * c),
    ("o = o * a + o_partner * c with o_partner already multiplied by its own factor (each lane rescales its o "
     "before the shuffle sends it: the partner's terms weighed c * c)", lambda o, o_p, a, c: o * a + o_p * c * c),
    ("o = o + o_partner * c (its own o not rescaled)", lambda o, o_p, a, c: o + o_p * c),
    ("o = o * a + o_partner (the partner's o not rescaled)", lambda o, o_p, a, c: o * a + o_p))
MERGE_LANES = (8, 16, 32, 64)
ROWS_AT_ONCE = 32  # rows of every batch simulated together: G partials of N weights each


def merged_lanes(s: np.ndarray, G: int, merge) -> np.ndarray:
    """W of G lanes' partial softmaxes (key j on lane j mod G) merged by an xor butterfly whose
    output step is `merge`; lane 0's weights."""
    return lane_weights(s, G, merge)[..., 0, :]


def lane_weights(s: np.ndarray, G: int, merge, stale: bool = False) -> np.ndarray:
    """(..., G, N): every lane's weights after the butterfly (stale: a merge that never sets m to the
    merged max, each later step rescaling with the lane's own)."""
    N = s.shape[-1]
    lane = np.arange(N) % G
    own = lane[None, :] == np.arange(G)[:, None]  # (G, N): lane g's keys
    sl = np.where(own, s[..., None, :], -np.inf)  # (..., G, N)
    m = sl.max(axis=-1)
    with np.errstate(invalid="ignore", over="ignore"):
        o = np.exp(sl - m[..., None])
        l = o.sum(axis=-1)
        off = G // 2
        while off:
            partner = np.arange(G) ^ off
            new = np.maximum(m, m[..., partner])
            a, c = np.exp(m - new), np.exp(m[..., partner] - new)
            o, l = merge(o, o[..., partner, :], a[..., None], c[..., None]), l * a + l[..., partner] * c
            m, off = (m if stale else new), off // 2
        return o / l[..., None]


LANES_OWN = "each output column's weights are one lane's own: "
STALE_MAX = ("whose merge never sets the lane's max to the merged one (each later step rescales l and o, already "
             "relative to the merged max, by exp(m_own - M))")


def lanes_by_column(weights: np.ndarray, s: np.ndarray) -> str | None:
    """Where each output column's weights (weights: (d, N, N), s: (N, N)) are one lane's of G lanes
    merged by a butterfly written otherwise (STALE_MAX, or a MERGE_FORMS output step), each lane
    ending with its own: in words, else None."""
    forms = [(STALE_MAX, MERGE_FORMS[0][1], True), *((f"whose output step is written as `{w}`", f, False)
                                                     for w, f in MERGE_FORMS[1:])]
    for G in (G for G in MERGE_LANES if G < s.shape[-1]):
        for words, merge, stale in forms:
            lanes = np.moveaxis(lane_weights(s, G, merge, stale), -2, 0)  # (G, N, N)
            owner = column_owners(lanes, weights, close)
            if owner is None:
                continue
            alike = {g: [h for h in range(G) if close(lanes[h], lanes[g])] for g in set(owner)}  # the last step's
            shown = "; ".join(f"columns {spans(np.flatnonzero(np.array(owner) == g))}: "  # two lanes end alike
                              f"lane{'s' if len(alike[g]) > 1 else ''} {spans(np.array(alike[g]))}'s"
                              for g in sorted(set(owner))[:3])
            return (f"{LANES_OWN}{G} lanes' online softmaxes (key j on lane "
                    f"j mod {G}) merged by an xor butterfly {words}, so the lanes end with different weights and each "
                    f"writes its own to its columns ({shown}{' ...' if len(set(owner)) > 3 else ''})")
    return None


def merge_search(W: np.ndarray, s: np.ndarray) -> tuple[str, str, list[int]] | None:
    """("merge", the form, [G]) of lanes merged by a butterfly whose output step gives W: tried on a
    few rows, then on every row a block of rows at a time (the lanes' partials are G times W)."""
    screen = (slice(0, 1), slice(0, min(SCREEN_ROWS, s.shape[1])))
    for G in (G for G in MERGE_LANES if G < s.shape[-1]):
        if not close(merged_lanes(s[screen], G, MERGE_FORMS[0][1]), softmax_rows(s[screen])):
            continue  # the right merge is not exact here: no reading of the others
        for words, merge in MERGE_FORMS[1:]:
            if close(merged_lanes(s[screen], G, merge), W[screen]) and all(
                    close(merged_lanes(s[:, r:r + ROWS_AT_ONCE], G, merge), W[:, r:r + ROWS_AT_ONCE])
                    for r in range(0, s.shape[1], ROWS_AT_ONCE)):
                return "merge", words, [G]
    return None


def fits(s: np.ndarray, T: int, forms: dict, W: np.ndarray, last_only: bool = False) -> bool:
    """The form gives W over tiles of T, and there it is not the right algorithm's result (a form
    that changes nothing at this T, as a wrong update of the max with two tiles, says nothing)."""
    simulated = simulate(s, T, forms, last_only)
    return close(simulated, W) and not close(simulated, simulate(s, T, RIGHT))


class SoftmaxSteps(WeightReading):
    """The step of the online softmax that, written otherwise, gives the measured W."""

    name = "the online softmax's steps, one written otherwise"

    def run(self, ctx: Context) -> list[Finding]:
        W = ctx.facts.W
        found = search(W, logits(ctx.probe.q, ctx.probe.k))
        if not found:
            return []
        step, words, T = found
        if step == "merge":
            return measured(ctx, [
                f"measured: the weights are {T[0]} lanes' online softmaxes (key j on lane j mod {T[0]}) merged by an "
                f"xor butterfly whose output step is written as `{words}` where it is `{MERGE_FORMS[0][0]}` (l merged "
                f"right): simulated so, it gives W on {ctx.probe.label} to within {ATOL:g}; look at the merge's "
                "shuffles"], look=("the merge's shuffles", r"__shfl_xor\w*"), softmax_step=step, form=words, lanes=T[0])
        words, at = (words[:-len(LAST_ONLY)], LAST_ONLY) if words.endswith(LAST_ONLY) else (words, "")
        right = "o = (l * alpha * o + p V) / l_new, o kept divided by l" if words.startswith("o = ") else \
            "exp(x)" if step == "exp" else STEP_FORMS[step][0][0]
        tiles = tiles_words(T)
        return measured(ctx, [
            f"measured: the weights are the tiled online softmax's ({tiles}) with its {step} step "
            f"written as `{words}` where it is `{right}`{at}: simulated so, it gives W on {ctx.probe.label} to within "
            f"{ATOL:g}; look at that line"], look=STEP_LOOK.get(step), softmax_step=step, form=words, tiles=T)


# The lines shown for a step named: where that step is written (an update, not a declaration).
SUM_NAME = r"(?:l|li|l_\w+|l\d+|row_sum\w*|sum\w*)"
ACC_NAME = r"(?:o|acc\w*|out\w*|O)\w*\s*(?:\[[^\]]*\])?"
FACTOR_NAME = r"(?:alpha\w*|corr\w*|rescale\w*|scale_old\w*)"  # the rescale of the output, by the names it takes
STEP_LOOK = {"factor": LOOK["exp"], "p": LOOK["exp"], "exp": LOOK["exp"],
             "sum": ("the running sum's update", rf"\b{SUM_NAME}\s*(?:\+=|\*=|=[^;=]*\b{SUM_NAME}\b[^;]*[*+])"),
             "output": ("the output's update", rf"\b{ACC_NAME}\s*(?:\*=\s*{FACTOR_NAME}|(?:\+=|=)[^;]*\b[vV]\w*\s*\[)"),
             "final": ("the output's division", rf"/=?\s*\(?\s*{SUM_NAME}\b"),
             "update": ("the running max's update", r"\bm\w*\s*=\s*(?:m_new|mn|new_m|tmax|\w*max)\w*\s*;"),
             "scores": ("the scores' accumulator", r"\b(?:s|sc|score\w*|dot)\s*(?:\[[^\]]*\])?\s*(?:\+=|=\s*0)")}
