"""The probe inputs: small enough to run many times in seconds, like the failing case where it
matters.

  size        the case's d; N kept where it is small, else 2 * PROBE_TILE + N % PROBE_TILE keys
              (the same remainder modulo 16, 32, 64 and 128, the tile sizes programs use, and at
              least two full tiles of each); B of 2 or 3 (a second batch shows batch offsets).
  values      the case's own Q, K and V, cut to those rows (a batch the case lacks is drawn
              uniform in [-3, 3], as the course's are).
  one-hot V   run r holds a 1 at key r*d + c of column c, 0 elsewhere: where the output is W V
              it reads W[i, r*d + c] in column c, so ceil(N/d) runs read every weight.
"""
from __future__ import annotations

import numpy as np

from ...cases.format import Shape
from .step import ProbeInput, read_payload

PROBE_TILE = 128  # the largest usual tile (Br or Bc): a probe keeps N's remainder modulo it
SMALL_N = 3 * PROBE_TILE  # N up to this is kept as it is
WHOLE_N = 2048  # where the small probe passes, the case's own N is tried, up to this many rows
PROBE_BATCHES = 3  # at most; at least 2
DRAW_SEED = 20261127


def probe_rows(N: int) -> int:
    return N if N <= SMALL_N else 2 * PROBE_TILE + N % PROBE_TILE


def larger_rows(probe_n: int, case_n: int) -> list[int]:
    """Where the probe of probe_n rows is right: the larger Ns to try in turn, up to the case's own
    (at most WHOLE_N): the powers of 2 from 512 between them, then the case's N (a path a program
    takes from some N on, as key splits from N = 1024, shows at the smallest N that takes it)."""
    top = min(case_n, WHOLE_N)
    return [n for n in (512, 1024) if probe_n < n < top] + ([top] if probe_n < top else [])


def probe_batches(B: int) -> int:
    return min(max(B, 2), PROBE_BATCHES)


def from_case(path, shape: Shape, label: str, rows: int | None = None) -> ProbeInput:
    """The probe input of a case: its first batches and rows (probe_rows, or `rows`; more batches
    drawn where it has too few)."""
    N, B = rows or probe_rows(shape.N), probe_batches(shape.B)
    q, k, v = read_payload(path, shape, min(B, shape.B), N)
    if B > shape.B:
        rng = np.random.default_rng(DRAW_SEED)
        more = rng.uniform(-3, 3, size=(3, B - shape.B, N, shape.d)).astype(np.float32)
        q, k, v = (np.concatenate([x, m]) for x, m in zip((q, k, v), more))
    return ProbeInput(q, k, v, f"{B}x{N}x{shape.d} (the first {N} rows of {label}'s Q, K and V"
                      + (", batch 1 drawn" if shape.B < B else "") + ")")


def onehot_runs(shape: Shape) -> int:
    return -(-shape.N // shape.d)


def onehot_v(shape: Shape, r: int) -> np.ndarray:
    """(B, N, d) V of run r: V[b, r*d + c, c] = 1."""
    B, N, d = shape.B, shape.N, shape.d
    v = np.zeros((B, N, d), dtype=np.float32)
    c = np.arange(d)
    keys = r * d + c
    inside = keys < N
    v[:, keys[inside], c[inside]] = 1.0
    return v


def onehot_batches(inp: ProbeInput) -> ProbeInput:
    """Every run's one-hot V as batches of one input: batch b * R + r holds batch b's Q and K with
    run r's V (R = onehot_runs)."""
    B, R = inp.shape.B, onehot_runs(inp.shape)
    one = Shape(1, inp.shape.N, inp.shape.d)
    v = np.concatenate([onehot_v(one, r) for r in range(R)])
    return ProbeInput(np.repeat(inp.q, R, axis=0), np.repeat(inp.k, R, axis=0), np.tile(v, (B, 1, 1)),
                      f"{B * R}x{inp.shape.N}x{inp.shape.d} ({inp.label}'s batches, each with every one-hot V)")


def grown(inp: ProbeInput, N: int) -> ProbeInput:
    """The probe with rows drawn uniform in [-3, 3] (as the course's are) after its own, up to N."""
    extra = np.random.default_rng(DRAW_SEED).uniform(-3, 3, (3, inp.shape.B, N - inp.shape.N, inp.shape.d))
    q, k, v = (np.concatenate([m, e.astype(np.float32)], axis=1) for m, e in zip((inp.q, inp.k, inp.v), extra))
    return ProbeInput(q, k, v, f"{inp.shape.B}x{N}x{inp.shape.d}")


def shrunk(inp: ProbeInput, N: int | None = None, B: int | None = None, first_batch: int = 0) -> ProbeInput:
    """The probe cut to N rows and B batches from first_batch (an experiment's input)."""
    N = inp.shape.N if N is None else N
    B = inp.shape.B - first_batch if B is None else B
    take = slice(first_batch, first_batch + B)
    return ProbeInput(inp.q[take, :N], inp.k[take, :N], inp.v[take, :N], f"{B}x{N}x{inp.shape.d}")
