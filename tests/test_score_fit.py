"""fa_cli/judge/probes/score_fit.py: the scores behind measured weights, read back as terms q[r, x]
k[j, x]; where the row's own terms do not fit, a partner row's beside them (set38's s08: a thread
pair a row whose partner is the neighbouring row's thread)."""
import numpy as np
import pytest

from fa_cli.judge.probes import score_fit
from fa_cli.judge.probes.step import softmax_rows

RNG = np.random.default_rng(8)
N, D = 64, 32


@pytest.mark.slow  # make test-all (docs/testing.md: what make test keeps of it)
def test_a_neighbour_rows_half_score_added_is_read_with_its_partner():
    """Columns 0-15 of a row, written by the thread of the row's first half of dims, weigh scores over
    dims 0-15 of the row's q plus row r xor 1's (its partner taken as tid ^ 1)."""
    q, k = (RNG.uniform(-3, 3, size=(N, D)).astype(np.float32) for _ in range(2))
    half = np.arange(16)
    own = (q[:, half].astype(np.float64) @ k[:, half].T.astype(np.float64))
    other = (q[np.arange(N) ^ 1][:, half].astype(np.float64) @ k[:, half].T.astype(np.float64))
    W = softmax_rows(((own + other) / np.sqrt(D))[None])[0]
    said = score_fit.score_terms(W, q, k)
    assert said.startswith("its scores take q[r, x] k[j, x] of dims 0-15 at 1/sqrt(d); dims 16-31 not at all, and "
                           "row r xor 1's q[r xor 1, x] k[j, x] of dims 0-15 at 1/sqrt(d)"), said
    assert score_fit.partner_fit(softmax_rows((own / np.sqrt(D))[None])[0], q, k) is None  # no partner's terms


def test_weights_of_no_such_scores_keep_the_plain_words():
    q, k = (RNG.uniform(-3, 3, size=(N, D)).astype(np.float32) for _ in range(2))
    W = softmax_rows(RNG.uniform(-3, 3, size=(1, N, N)))[0]
    assert score_fit.score_terms(W, q, k).startswith("its scores are no weighted sum of q[r, x] k[j, x]")
