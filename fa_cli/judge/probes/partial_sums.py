"""Sums over parts of the keys that a program may divide by where l belongs: half of every group of
2G keys (a reduction that folds in half of its values), and interleaved chains of the keys, each
summed against its own max and added without the factors that bring them to one max (contiguous
ranges are key tiles, factors.sum_variants'). factors.per_row_factor compares each with the right l.
And keys counted more than once (keys_counted): parts of the keys that overlap. tile_maxima: the
maxima and sums of key tiles, from which factors.py builds the running sums. base_mixed: parts
brought to one max in the wrong base (exp where exp2 belongs)."""
from __future__ import annotations

import warnings

import numpy as np

from ..mistakes import KEY_TILES
from .readings import FIT_SHARE, FLAT, span
from .step import fmt, spans


def in_tiles(x: np.ndarray, T: int, fill: float = -np.inf) -> np.ndarray:
    """x (B, N, keys) as (B, N, tiles, T): the keys in tiles of T, the last one's slots past the
    keys holding `fill` (-inf: no weight; NaN: nothing to read)."""
    B, N, keys = x.shape
    pad = np.full((B, N, -(-keys // T) * T), fill)
    pad[..., :keys] = x
    return pad.reshape(B, N, -1, T)


def tile_maxima(s: np.ndarray, T: int):
    """Per key tile of T: the tile's own max, the running max after it, and the final max
    (B, N, tiles) each; and each tile's sum of exp(s - final max)."""
    tiled = in_tiles(s, T)
    own = tiled.max(axis=3)
    running = np.maximum.accumulate(own, axis=2)
    final = running[..., -1:]
    sums = np.exp(tiled - final[..., None]).sum(axis=3)
    return own, running, final, sums


def tile_weights(s: np.ndarray, T: int):
    """(running, final, p): tile_maxima's running and final maxima, and each key's weight against
    the running max after its tile, (B, N, tiles, T), as an online softmax takes them."""
    _, running, final, _ = tile_maxima(s, T)
    return running, final, np.exp(in_tiles(s, T) - running[..., None])


HALF_GROUPS = (1, 2, 4, 8, 16, 32, 64, 128)  # G: a reduction over 2G values that folds in only G of them


def half_sums(s: np.ndarray):
    """(G, the half, twice, l) of a sum over the keys of one half of every group of 2G (j mod 2G < G,
    or >= G), relative to the final max: a reduction over 2G threads or lanes that folds in only
    half of them (a tree that stops one step early, or leaves out red[tid + G]); then (twice) the
    whole sum with that half counted again (lanes that hold those keys a second time, as 64 lanes
    reducing a tile whose keys 32 lanes were dealt)."""
    j = np.arange(s.shape[2])
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    for twice in (False, True):
        for G in HALF_GROUPS:
            if 2 * G <= s.shape[2]:
                for low in (True, False):
                    half = e[..., (j % (2 * G) < G) == low].sum(axis=-1)
                    yield G, low, twice, half + (e.sum(axis=-1) if twice else 0.0)


CHAINS = (2, 4, 8, 32)  # G interleaved chains of keys (j mod G); contiguous ranges are key tiles (factors')


def parts_unmerged(s: np.ndarray):
    """(words, l) of l as the sum of G interleaved chains' sums (keys j mod G: states updated by
    turns, for more work in flight), each taken against its chain's own max and merged with the
    sums' factors left out."""
    j = np.arange(s.shape[2])
    for G in CHAINS:
        if G < j.size:
            yield (f"{G} interleaved chains of keys (key j in chain j mod {G})",
                   sum(own_max_sum(s[..., j % G == g]) for g in range(G)))


def own_max_sum(part: np.ndarray) -> np.ndarray:
    return np.exp(part - part.max(axis=-1, keepdims=True)).sum(axis=-1)


def key_counts(W: np.ndarray, P: np.ndarray, dead: np.ndarray | None = None) -> np.ndarray | None:
    """c_j where W_ij = c_j P_ij times one factor a row, c_j whole (0 for the `dead` keys, that no
    row weighs), 1 for some keys and 2 or more for others; None where that does not fit. Each row's
    smallest ratio is taken as a key counted once."""
    N = P.shape[2]
    live = np.ones(N, dtype=bool)
    if dead is not None:
        live[dead] = False
    use = (P > 1e-6) & (W > 0) & live
    if use[..., live].mean() < 0.5:
        return None
    with np.errstate(divide="ignore", invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a row or a key with no weight to read: NaN, said below
        g = np.where(use, np.log(W / P), np.nan)
        g -= np.nanmin(g, axis=2, keepdims=True)
        counts = np.zeros(N)
        counts[live] = np.round(np.exp(np.nanmedian(g[..., live].reshape(-1, int(live.sum())), axis=0)))
    if np.isnan(counts).any() or counts[live].min() < 1 or counts.max() < 2:
        return None
    if np.mean(np.abs(g - np.log(np.maximum(counts, 1)))[use] <= 10 * FLAT) < FIT_SHARE:
        return None
    return counts


def keys_counted(W: np.ndarray, P: np.ndarray) -> tuple[str, dict] | None:
    """Keys weighed c_j times (key_counts): parts of the work whose key ranges overlap, each adding
    those keys."""
    if (counts := key_counts(W, P)) is None:
        return None
    times = ", ".join(f"keys {spans(np.flatnonzero(counts == n))} {int(n)} times" for n in np.unique(counts) if n >= 2)
    sums = W.sum(axis=2)
    l_too = " (each row's weights sum to 1: l counts them as often)" if np.abs(sums - 1).max() <= 1e-3 else \
        f" (the rows' weights sum to {span(sums)}: l counts them otherwise)"
    if stale := stale_slots(counts) or clamped_slots(counts):
        return f"keys weighed a whole number of times: {times}, the others once{l_too}: {stale}", \
            dict(keys_counted=times, look="rounded")
    return (f"keys weighed a whole number of times: {times}, the others once{l_too}: parts of the work (warps, "
            "blocks, splits of the keys) whose key ranges overlap, each adding those keys; look at where each part's "
            "range of keys ends"), dict(keys_counted=times)


def stale_slots(counts: np.ndarray, tiles=KEY_TILES, groups=(2, 4, 8, 16)) -> str | None:
    """Where the keys counted twice are one run, the slots of the key tile before a partial last tile
    (N % T = bc keys) from bc on: the last tile's work went over slots past its bc keys, which still
    hold the tile before's keys; where that count is bc rounded up to a multiple of G, said so."""
    N, extra = counts.size, np.flatnonzero(counts >= 2)
    if extra.size == 0 or np.ptp(extra) != extra.size - 1 or counts.max() != 2:
        return None
    for T in tiles:
        bc, last = N % T, N - N % T
        if bc and last >= T and extra[0] == last - T + bc and extra[-1] < last:
            width = bc + extra.size
            rounded = next((f", bc rounded up to a multiple of {G} ({bc} to {width})" for G in groups
                            if -(-bc // G) * G == width), "")
            keys = "key" if bc == 1 else "keys"
            return (f"with key tiles of {T}, the last tile holds {bc} {keys} (keys {last}..{N - 1}) and the keys "
                    f"counted again are slots {bc}..{width - 1} of the tile before (keys {extra[0]}.."
                    f"{extra[-1]}): the last tile's scores and P V went over {width} slots where it loaded {bc}, the "
                    f"slots past its keys still holding the tile before's{rounded}; look at the last tile's key count")
    return None


def clamped_slots(counts: np.ndarray, tiles=KEY_TILES) -> str | None:
    """Where the last key alone is counted more than once, c more times: slots that read a clamped
    index (min(j, N - 1)) and are not masked, in words, with the tiles whose slots past N number c."""
    N, extra = counts.size, np.flatnonzero(counts >= 2)
    if extra.tolist() != [N - 1]:
        return None
    more = int(counts[-1]) - 1
    past = [f"-N mod {T}" for T in tiles if -N % T == more]  # a last tile's slots past N
    keyed = [f"N mod {T}" for T in tiles if N % T == more]  # its lanes with a key, each with a second slot past N
    where = f" ({more} = {' = '.join(past + keyed)}: " + " or ".join(
        (["the slots past N of a last tile"] if past else []) + (["the second slots of a last tile's lanes that "
                                                                  "hold a key"] if keyed else [])) + ")" \
        if past or keyed else ""
    return (f"the last key, N - 1, counted {more} more times{where}: as where the slots past N read a clamped index "
            "(min(j, N - 1)) and their mask is missing or tests another key's index?; look at the mask of each "
            "slot a lane or thread takes")


def read_in_place_of(W: np.ndarray, P: np.ndarray, dead: np.ndarray | None) -> tuple[str, dict] | None:
    """Keys no row weighs beside keys weighed twice (key_counts, l alike): one range of keys read
    where another belongs; where both are one range of the same width, a tile read from a place
    that still held an earlier tile (a double buffer's stale half, an offset that did not move)."""
    if dead is None or not len(dead) or (counts := key_counts(W, P, dead)) is None or counts.max() != 2:
        return None
    twice = np.flatnonzero(counts == 2)
    sums = W.sum(axis=2)
    l_too = "l counts them as often" if np.abs(sums - 1).max() <= 1e-3 else f"the rows' weights sum to {span(sums)}"
    said = f"keys {spans(twice)} are weighed twice and keys {spans(dead)} not at all, the others once ({l_too})"
    one_range = lambda keys: keys[-1] - keys[0] + 1 == len(keys)  # noqa: E731
    if len(twice) == len(dead) and one_range(twice) and one_range(dead):
        earlier = twice[0] < dead[0]
        order = "an earlier" if earlier else "a later"
        why = ("a tile taken from a buffer that still held an earlier tile: a double buffer's index off by one, "
               "or a tile's offset that did not move; or a key loop's range shifted by a tile" if earlier
               else "a key loop's range shifted by a tile, or a tile's offset taken from another tile")
        said += (f": the {len(dead)} keys from {dead[0]} were never read, and {order} tile of as many keys, from "
                 f"{twice[0]}, counts in their place ({why}); look at where the tile from key {dead[0]} is read from "
                 "and at the key loop's range")
    else:
        said += ": some keys' weight went to others (a tile or a range of keys read in another's place)"
    return said, dict(keys_counted=spans(twice), keys_without_weight=[int(k) for k in dead])


# A merge's factors exp(m_part - m) in the wrong base: log W / P = c (m_part - m) + a row's constant.
BASE_MIXED = {float(np.log2(np.e) - 1): "exp(m_part - m) where exp2 belongs (the maxima kept in base 2, as the "
                                        "scores are: exp and exp2 mixed)",
              float(np.log(2) - 1): "exp2(m_part - m) where exp belongs (the maxima in base e: exp2 and exp mixed)"}


def base_mixed(g: np.ndarray, s: np.ndarray, T: int, valid: np.ndarray, rows_ok: np.ndarray) -> str | None:
    """Each tile's (part's) factor, log W / P = g, as its rescale to the final max taken in the wrong
    base: c (m_tile - m_final) with c = log2(e) - 1 or ln 2 - 1, and a constant per row (l merged with
    the same factors)."""
    own, _, final, _ = tile_maxima(s, T)
    for c, words in BASE_MIXED.items():
        gap = np.where(valid, g - c * (own - final), np.nan)[rows_ok]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            gap = gap - np.nanmean(gap, axis=1, keepdims=True)
        if np.mean(np.abs(gap[valid[rows_ok]]) <= 10 * FLAT) >= FIT_SHARE:
            return (f"each tile's factor is exp({fmt(c)} (m_tile - m_final)): the parts (tiles, splits) brought to one "
                    f"max with {words}; look at the merge's factors")
    return None


ROW_BLOCKS = (16, 32, 64, 128)  # a block's rows: the first one's statistics taken for all of them
KEY_GROUPS = (2, 4, 8)  # warps that split the keys: each takes every S-th tile, or a run of tiles


def first_rows_statistics(g: np.ndarray, s: np.ndarray, T: int, valid: np.ndarray, rows_ok: np.ndarray) -> str | None:
    """Each tile's factor exp(m_G(r0) - m_G(r)) and a constant per row: G the group of tiles the
    tile is in (every S-th tile, or a run of tiles: a warp's share of the keys), m_G(r) row r's max
    over the group's keys, r0 the first row of r's block of R rows. Each group's partial merged
    with the block's first row's maxima and sums: statistics kept once a group where once a row
    belongs."""
    own = tile_maxima(s, T)[0]
    B, N, tiles = own.shape
    t = np.arange(tiles)
    for S in (S for S in KEY_GROUPS if tiles % S == 0 and tiles >= S):
        ways = (("every {S}th tile of {T} keys", t % S), ("runs of {n} tiles of {T} keys", t // (tiles // S)))
        for kind, group in ways:
            best = np.stack([own[..., group == G].max(axis=-1) for G in range(S)], axis=-1)[..., group]  # B, N, tiles
            for R in (R for R in ROW_BLOCKS if R < N):
                first = np.arange(N) - np.arange(N) % R
                model = best[:, first] - best
                if np.nanstd(model[valid]) <= FLAT:
                    continue  # every row alike its block's first: the model says nothing
                gap = np.where(valid, g - model, np.nan)[rows_ok]
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)
                    gap = gap - np.nanmean(gap, axis=1, keepdims=True)
                if np.mean(np.abs(gap[valid[rows_ok]]) <= 10 * FLAT) >= FIT_SHARE:
                    groups = kind.format(S=S, T=T, n=tiles // S)
                    return (f"each tile's factor is exp(m_G(r0) - m_G(r)), the keys in {S} groups ({groups}: a warp's "
                            f"share of the keys), m_G(r) row r's max over group G's keys and r0 the first row of r's "
                            f"block of {R} rows: every row's partials merged with its block's first row's maxima and "
                            "sums (statistics kept once a group, as Ms[warp], where once a row belongs, Ms[warp][row])")
    return None
