"""The running sums l a program may divide by where the right l belongs, for factors.per_row_factor
to compare with W = f P: the online softmax's variants over key tiles (a tile's sum left out, not
rescaled, rescaled twice, against its own max; the last tile's update skipped; its largest term for
its sum; the partial last tile's empty slots counted); lanes' sums of the keys j mod G not rescaled
as their max grows, or merged by a butterfly that rescales one side; a sum carried from one batch
to the next, or batch 0's for every batch."""
from __future__ import annotations

import numpy as np

from ..mistakes import KEY_TILES
from .partial_sums import tile_maxima, tile_weights
from .readings import FLAT

# The key tiles a running sum l is looked for over: the usual tiles, then one key at a time (an
# online softmax that updates its max, its sum and its output key by key). Not a per-tile factor's:
# over one key, exp(m_final - m_tile) is exp(m_final - s_j), and a wrong scale on the scores fits it.
SUM_TILES_TRIED = (*KEY_TILES, 1)


def tiles_named(T: int) -> str:
    return "one key at a time" if T == 1 else f"key tiles of {T}"


# The sum l a program divides by, over the online softmax's variants: the tiles it adds, and the
# factor each tile's sum carries (a: powers of exp(m_final - m_running), b: of exp(m_final - m_own)).
SUM_TILES = {"every tile": slice(None), "only the last tile": slice(-1, None), "only the first tile": slice(0, 1),
             "every tile but the first": slice(1, None), "every tile but the last": slice(None, -1)}
SUM_WORDS = {(1, 0): "not rescaled when the running max grows (l = l + sum where l = l * exp(m_old - m_new) + sum)",
             (2, 0): "multiplied by exp(m_new - m_old), the inverse of the rescale",
             (-1, 0): "rescaled twice by exp(m_old - m_new)",
             (0, 1): "summed with each tile's own max, not the running max",
             (-1, 1): "each tile's sum taken against the tile's own max and added as it is (l = l * alpha + sum where "
                      "sum * exp(m_tile - m_new) belongs), then rescaled as l is",
             (0, 0): ""}


SKIPPED_LAST_WORDS = ("left as it stood before the last tile: neither given that tile's sum nor rescaled to its max "
                      "(the last tile's update of l skipped, as where the last tile is handled apart)")
OLD_FACTOR_WORDS = ("each tile's sum (against {against}) multiplied by the old state's factor exp(m_old - m_new), the "
                    "one l takes, where its own belongs (l = (l + sum) * exp(m_old - m_new)): the first tile's sum "
                    "dropped (m_old = -inf)")
PARTNER_WORDS = ("and each tile's sum of row r xor {k} too (against that row's own running max): the tile's weights "
                 "reduced over the lanes or threads of two rows (a reduction as wide as a warp where a part of it "
                 "holds a row, or a shared sum indexed without the row)")
TILE_MAX_WORDS = "each tile's largest weight where the tile's sum belongs (a max reduction where a sum belongs)"
CLAMPED_WORDS = ("and key N - 1's weight {extra} times more: the {extra} empty slots of the partial last tile of {T} "
                 "read key N - 1 (a clamped index) and are masked after the sum's reduction, not before it")
PADDED_WORDS = ("and exp(0) for each of the {extra} empty slots of the partial last tile of {T}: slots past N scored 0 "
                "where -inf belongs (a mask or a reset of the scores to 0), counted in l, not in the output")
STALE_WORDS = ("and keys {a}..{b}'s weights again: the {extra} empty slots of the partial last tile of {T} keep "
               "the scores of the tile before (a score register or buffer not reset to -inf each tile), in l only")


def sum_variants(s: np.ndarray):
    """(T, tiles added, (a, b), how, l) for each running sum: SUM_WORDS's, a tile's largest term, slots."""
    for T in SUM_TILES_TRIED:
        if T >= s.shape[2]:
            continue
        own, running, final, sums = tile_maxima(s, T)
        for (a, b) in SUM_WORDS:
            term = sums * np.exp(a * (final - running) + b * (final - own))
            yield from ((T, words, (a, b), SUM_WORDS[(a, b)], term[..., part].sum(axis=2))
                        for words, part in SUM_TILES.items() if (a, b) != (0, 0) or words != "every tile")  # not l
        if sums.shape[2] > 1:  # l as it stood before the last tile: its max then, not the last tile's
            yield T, "every tile but the last", (0, 0), SKIPPED_LAST_WORDS, \
                sums[..., :-1].sum(axis=2) * np.exp(final[..., 0] - running[..., -2])
        before = np.concatenate([np.full_like(running[..., :1], -np.inf), running[..., :-1]], axis=2)
        for against, m in (("its own max", own), ("the running max", running)):  # exp(-inf): the first tile's, 0
            yield T, "every tile", (0, 0), OLD_FACTOR_WORDS.format(against=against), \
                (sums * np.exp(final - m + before - final)).sum(axis=2)
        if T > 1:  # a key's largest term is the key's own: the right l
            yield T, "every tile", (0, 0), TILE_MAX_WORDS, np.exp(own - final).sum(axis=2)
        # another row's tile sum added (against its own running max), then rescaled as this row's l
        theirs = sums * np.exp(final - running)
        rows = np.arange(s.shape[1])
        for k in (1, 2, 4, 8, 16):
            if k < s.shape[1]:
                other = theirs[:, np.minimum(rows ^ k, rows[-1])]
                yield T, "every tile", (0, 0), PARTNER_WORDS.format(k=k), \
                    sums.sum(axis=2) + (other * np.exp(running - final)).sum(axis=2)
        if extra := -s.shape[2] % T:  # the partial last tile's empty slots: counted in l with some score
            N, right = s.shape[2], sums.sum(axis=2)
            last = np.exp(s[..., -1] - final[..., 0])  # clamped to key N - 1, masked after the sum
            yield T, "every tile", (0, 0), CLAMPED_WORDS.format(extra=extra, T=T), right + extra * last
            yield T, "every tile", (0, 0), PADDED_WORDS.format(extra=extra, T=T), right + extra * np.exp(-final[..., 0])
            if N > T:  # the tile before's scores in the same slots: keys N - T .. N - T + extra - 1, counted again
                a = N - T
                stale = np.exp(s[..., a:a + extra] - final).sum(axis=2)
                yield T, "every tile", (0, 0), STALE_WORDS.format(a=a, b=a + extra - 1, extra=extra, T=T), right + stale


CARRIED_WORDS = ("its running sum l (and max m) start each batch where the batch before ended: batch b divides by the "
                 "sum over batches 0..b (m and l set to -inf and 0 once, not for each batch); look at where m and l "
                 "are initialised")
FIRST_BATCH_WORDS = ("every batch divides by batch 0's sum l (and its max m): each row's statistics read without the "
                     "batch's offset (row where b*N + row belongs); look at where m and l are indexed")
FIRST_BATCH_SUM_WORDS = ("every batch divides by batch 0's sum l, each row's sum against its own max: the division "
                         "reads l without the batch's offset (row where b*N + row belongs), as where the output is "
                         "divided apart from the kernel that made it (a second kernel, or the host); look at that "
                         "division's index")
CHAINS_WORDS = ("its l adds {G} interleaved chains of keys (key j in chain j mod {G}: a lane's or thread's own keys), "
                "each chain's sum not rescaled as the chain's own max grows (l = l + p where l = l * exp(m_old - "
                "m_new) + p belongs), the chains then merged with their factors; look at the update of each lane's l")


def log_sums(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's largest score and log of its sum of exp(s) (B, N), each batch's own."""
    top = s.max(axis=-1)
    return top, np.log(np.exp(s - top[..., None]).sum(axis=-1)) + top


def first_batchs(s: np.ndarray):
    """(words, l of each batch (B, N) relative to its row's max) where every batch takes batch 0's
    statistics: its sum and its max together, or its sum alone (each against its own row's max, as
    where a kernel leaves the output undivided, its max its own, and the host divides by l)."""
    top, own = log_sums(s)
    yield FIRST_BATCH_WORDS, np.exp(own[:1] - top)
    yield FIRST_BATCH_SUM_WORDS, np.broadcast_to(np.exp(own[:1] - top[:1]), top.shape)


def chains_not_rescaled(s: np.ndarray):
    """(words, fields, l) for G interleaved chains of keys (j mod G), each summed key by key against
    its own running max without rescaling its sum, merged with the factors exp(m_chain - m); then
    lanes_not_rescaled's. l relative to the row's max."""
    top = s.max(axis=-1, keepdims=True)
    for G in (2, 4, 8, 16, 32, 64):
        if G >= s.shape[-1]:
            continue
        total = np.zeros(s.shape[:-1])
        for g in range(G):
            chain = s[..., g::G]
            running = np.maximum.accumulate(chain, axis=-1)
            total += np.exp(chain - running).sum(axis=-1) * np.exp(running[..., -1] - top[..., 0])
        yield CHAINS_WORDS.format(G=G), dict(sum_chains=G), total
    yield from lanes_not_rescaled(s)


LANES_WORDS = ("its l adds the lanes' own parts (tiles of {G} keys, key j0 + g on lane g, the row's max shared), and "
               "the parts of lanes {cut}..{last} are never rescaled as the max grows (l_part = l_part + p where "
               "l_part * exp(m_old - m_new) + p belongs), the other lanes' are: as where the rescale sits in a branch "
               "that lanes {cut} and up skip (a test of the lane against d = {cut}, made for the output's dims)?; "
               "look at the branch around the rescale of l")


def lanes_not_rescaled(s: np.ndarray):
    """(words, fields, l) where a row's keys are dealt G a tile (key j0 + g to lane g), the running
    max shared, each lane's part of l rescaled as it grows but for the lanes from `cut` on (d = 32
    of a wavefront's 64, or 16 of 32): l relative to the row's max."""
    for G in (64, 32):
        if G >= s.shape[-1]:
            continue
        running, final, p = tile_weights(s, G)  # each weight against the max after its tile
        cut = G // 2
        kept = (p[..., :cut].sum(axis=3) * np.exp(running - final)).sum(axis=2)  # rescaled: to the final max
        left = p[..., cut:].sum(axis=(2, 3))  # never rescaled
        yield LANES_WORDS.format(G=G, cut=cut, last=G - 1), dict(sum_lanes_unrescaled=[cut, G]), kept + left


BUTTERFLY_WORDS = ("its l is {G} lanes' sums (lane g: the keys j mod {G} = g, each against the lane's own max) merged "
                   "by a xor butterfly whose step leaves {whose} sum unrescaled ({step}); look at the merge of the "
                   "lanes' l")
BUTTERFLY_STEPS = {
    "the partner's": "l = l * exp(m - m_new) + l_partner where l_partner * exp(m_partner - m_new) belongs",
    "its own": "l = l + l_partner * exp(m_partner - m_new) where l * exp(m - m_new) belongs"}


def butterflies_unrescaled(s: np.ndarray):
    """(G, whose, l): G lanes' sums of the keys j mod G, each against its lane's max, merged by a xor
    butterfly that rescales only one side at each step ("the partner's" or "its own" left as it is):
    lane 0's l, relative to the row's max."""
    top = s.max(axis=-1, keepdims=True)
    for G in (16, 32, 64):
        if G >= s.shape[-1]:
            continue
        padded = np.full((*s.shape[:-1], -(-s.shape[-1] // G) * G), -np.inf)  # keys past N: no weight
        padded[..., :s.shape[-1]] = s
        lanes = padded.reshape(*s.shape[:-1], -1, G)  # (..., keys a lane, G)
        m0 = lanes.max(axis=-2)
        l0 = np.exp(lanes - m0[..., None, :]).sum(axis=-2)
        for whose in ("the partner's", "its own"):
            m, l = m0.copy(), l0.copy()
            off = G // 2
            while off:
                partner = np.arange(G) ^ off
                new = np.maximum(m, m[..., partner])
                l = l * np.exp(m - new) + l[..., partner] if whose == "the partner's" else \
                    l + l[..., partner] * np.exp(m[..., partner] - new)
                m, off = new, off // 2
            yield G, whose, l[..., 0] * np.exp(m[..., 0] - top[..., 0])


def carried_over(s: np.ndarray) -> np.ndarray:
    """l of each batch (B, N) relative to its row's max, where l and m are never set back between
    batches: the sums of exp(s) over the keys of this batch and every batch before, for the same row."""
    top, own = log_sums(s)
    return np.exp(np.logaddexp.accumulate(own, axis=0) - top)


def whole_times(f0: float) -> str:
    """A constant factor that is a whole number or its inverse, said as what counts something that many times."""
    times = round(1 / f0) if f0 < 1 else round(f0)
    if times < 2 or abs(np.log(f0 * times if f0 < 1 else f0 / times)) > FLAT:
        return ""
    if f0 < 1:
        return (f": 1 / {times}: the running sum l is {times} times the right one (a reduction that adds each value "
                "more than once: a sum already whole reduced over the lanes again, or a butterfly that starts at the "
                "full width, not half)")
    return (f": {times}: every value of the output is {times} times the right one (the output "
            f"added into {times} times: an accumulation, atomicAdd or +=, into a buffer not zeroed between runs of "
            "the kernel, or one part of it added again)")
