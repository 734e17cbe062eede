"""Seeded inputs in the course format, written batch by batch.

Each batch draws from its own stream, numpy.random.default_rng([seed, b]), so a file is
byte-identical for the same arguments on every machine and never needs to fit in memory.
Distributions (every value within the course's [-3, 3]):
  uniform   U(-3, 3) for Q, K, V: the course's range.
  normal    N(0, 1) clipped to [-3, 3].
  extreme   every value +-3: the largest logits the course allows (|s| up to 9*sqrt(d)).
  onehot    each query row is 3*sign(k_j) of one random key j, so that key dominates the row's
            softmax (logit 9*sqrt(d) against noise): P is nearly one-hot.
  constant  every key row equal: all logits of a row are equal, O is the column mean of V.
"""
from __future__ import annotations

import os
from typing import Callable

import numpy as np

from .format import Shape, as_f32_bytes, atomic_file, header_bytes

LIMIT = 3.0
Batch = tuple[np.ndarray, np.ndarray, np.ndarray]


def _uniform(rng: np.random.Generator, N: int, d: int) -> Batch:
    q, k, v = rng.uniform(-LIMIT, LIMIT, size=(3, N, d))
    return q, k, v


def _normal(rng: np.random.Generator, N: int, d: int) -> Batch:
    q, k, v = np.clip(rng.standard_normal(size=(3, N, d)), -LIMIT, LIMIT)
    return q, k, v


def _extreme(rng: np.random.Generator, N: int, d: int) -> Batch:
    q, k, v = np.where(rng.random(size=(3, N, d)) < 0.5, -LIMIT, LIMIT)
    return q, k, v


def _onehot(rng: np.random.Generator, N: int, d: int) -> Batch:
    k = np.where(rng.random(size=(N, d)) < 0.5, -LIMIT, LIMIT)
    chosen = rng.integers(0, N, size=N)
    q = LIMIT * np.sign(k[chosen])
    v = rng.uniform(-LIMIT, LIMIT, size=(N, d))
    return q, k, v


def _constant(rng: np.random.Generator, N: int, d: int) -> Batch:
    q, v = rng.uniform(-LIMIT, LIMIT, size=(2, N, d))
    k = np.broadcast_to(rng.uniform(-LIMIT, LIMIT, size=(1, d)), (N, d))
    return q, k, v


DISTRIBUTIONS: dict[str, Callable[[np.random.Generator, int, int], Batch]] = {
    "uniform": _uniform,
    "normal": _normal,
    "extreme": _extreme,
    "onehot": _onehot,
    "constant": _constant,
}


def batch(shape: Shape, seed: int, dist: str, b: int) -> Batch:
    """Q, K, V of batch b as float32 arrays."""
    q, k, v = DISTRIBUTIONS[dist](np.random.default_rng([seed, b]), shape.N, shape.d)
    return tuple(np.asarray(x, dtype=np.float32) for x in (q, k, v))  # type: ignore[return-value]


def write_input(
    path: str | os.PathLike, shape: Shape, seed: int, dist: str = "uniform",
    progress: Callable[[int], None] | None = None,
) -> None:
    """Write a whole input file atomically, batch by batch."""
    with atomic_file(path) as f:
        f.write(header_bytes(shape))
        for b in range(shape.B):
            for x in batch(shape, seed, dist, b):
                f.write(as_f32_bytes(x))
            if progress:
                progress(1)


def write_expected(inp, path: str | os.PathLike, progress: Callable[[int], None] | None = None) -> None:
    """Write the float64 reference of an input, rounded once to float32 (the output format)."""
    from . import reference  # local: generation alone needs no reference

    group = max(1, (16 << 20) // (12 * inp.shape.N * inp.shape.d))
    with atomic_file(path) as f:
        for b0 in range(0, inp.shape.B, group):
            b1 = min(inp.shape.B, b0 + group)
            f.write(as_f32_bytes(reference.attention(*inp.qkv(b0, b1))))
            if progress:
                progress(b1 - b0)
