"""The running sums l a program may divide by where the right l belongs, for factors.per_row_factor
to compare with W = f P: the online softmax's variants over key tiles (a tile's sum left out, not
rescaled, rescaled twice, against its own max; its largest term for its sum; the partial last
tile's empty slots counted), and a sum carried from one batch to the next."""
from __future__ import annotations

import numpy as np

from ..mistakes import KEY_TILES
from .partial_sums import tile_maxima

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
             (0, 0): ""}


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
        yield T, "every tile", (0, 0), TILE_MAX_WORDS, np.exp(own - final).sum(axis=2)
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


def carried_over(s: np.ndarray) -> np.ndarray:
    """l of each batch (B, N) relative to its row's max, where l and m are never set back between
    batches: the sums of exp(s) over the keys of this batch and every batch before, for the same row."""
    top = s.max(axis=-1)
    own = np.log(np.exp(s - top[..., None]).sum(axis=-1)) + top  # each batch's log-sum-exp
    return np.exp(np.logaddexp.accumulate(own, axis=0) - top)
