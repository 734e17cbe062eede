"""Seeded inputs in the course format, written batch by batch.

Each batch draws from its own stream, numpy.random.default_rng([seed, b]), so a file is
byte-identical for the same arguments on every machine. Neither the file nor a batch needs to
fit in memory: a batch is drawn and written in blocks of rows (BLOCK_VALUES values at most),
in the order the stream yields them, so the bytes are those of drawing the batch at once
(tests/test_generate.py checks this for every distribution). onehot keeps its keys' signs
(N*d bits) to build its queries; constant draws its key row ahead from a copy of the
stream, advanced past V.
Distributions (every value within the course's [-3, 3]):
  uniform   U(-3, 3) for Q, K, V: the course's range.
  normal    N(0, 1) clipped to [-3, 3].
  extreme   every value +-3: the largest logits the course allows (|s| up to 9*sqrt(d)).
  onehot    each query row is 3*sign(k_j) of one random key j, so that key dominates the row's
            softmax (logit 9*sqrt(d) against noise): P is nearly one-hot.
  constant  every key row equal: all logits of a row are equal, O is the column mean of V.
"""
from __future__ import annotations

import json
import os
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from ..files import atomic_file, check_output_path, check_space, forced, same_file
from ..judge import reference
from .format import FormatError, Shape, as_f32_bytes, header_bytes, read_header

LIMIT = 3.0
Batch = tuple[np.ndarray, np.ndarray, np.ndarray]


BLOCK_VALUES = 1 << 22  # values drawn at once (32 MB as float64), whatever N and d
Blocks = Iterator[np.ndarray]


def _rows(N: int, d: int, block_values: int) -> Iterator[int]:
    """Row counts of the blocks that make up N rows."""
    step = max(1, block_values // d)
    for r0 in range(0, N, step):
        yield min(step, N - r0)


def _stream_uniform(rng, N, d, bv) -> Blocks:
    for _ in range(3):  # Q, K, V follow each other in the stream as in the file
        for n in _rows(N, d, bv):
            yield rng.uniform(-LIMIT, LIMIT, size=(n, d))


def _stream_normal(rng, N, d, bv) -> Blocks:
    for _ in range(3):
        for n in _rows(N, d, bv):
            yield np.clip(rng.standard_normal(size=(n, d)), -LIMIT, LIMIT)


def _stream_extreme(rng, N, d, bv) -> Blocks:
    for _ in range(3):
        for n in _rows(N, d, bv):
            yield np.where(rng.random(size=(n, d)) < 0.5, -LIMIT, LIMIT)


def _stream_onehot(rng, N, d, bv) -> Blocks:
    # The stream holds K's draws, then the chosen keys, then V; the file wants Q (built from
    # K's signs at the chosen rows) first: K's signs are kept as bits meanwhile.
    negative = np.concatenate([np.packbits(rng.random(size=(n, d)) < 0.5, axis=1) for n in _rows(N, d, bv)])

    def signs(bits: np.ndarray) -> np.ndarray:
        return np.where(np.unpackbits(bits, axis=1, count=d).astype(bool), -LIMIT, LIMIT)

    for n in _rows(N, d, bv):
        yield LIMIT * np.sign(signs(negative[rng.integers(0, N, size=n)]))
    r0 = 0
    for n in _rows(N, d, bv):
        yield signs(negative[r0 : r0 + n])
        r0 += n
    for n in _rows(N, d, bv):
        yield rng.uniform(-LIMIT, LIMIT, size=(n, d))


def _stream_constant(rng, N, d, bv) -> Blocks:
    # The stream holds Q, V, then the one key row; the file wants Q, K, V: the key row is drawn
    # from a copy of the stream advanced past V (one 64-bit step per uniform value).
    ahead = np.random.Generator(type(rng.bit_generator)())
    ahead.bit_generator.state = rng.bit_generator.state
    ahead.bit_generator.advance(2 * N * d)
    for n in _rows(N, d, bv):
        yield rng.uniform(-LIMIT, LIMIT, size=(n, d))
    key = ahead.uniform(-LIMIT, LIMIT, size=(1, d))
    for n in _rows(N, d, bv):
        yield np.broadcast_to(key, (n, d))
    for n in _rows(N, d, bv):
        yield rng.uniform(-LIMIT, LIMIT, size=(n, d))


DISTRIBUTIONS: dict[str, Callable[[np.random.Generator, int, int, int], Blocks]] = {
    "uniform": _stream_uniform,
    "normal": _stream_normal,
    "extreme": _stream_extreme,
    "onehot": _stream_onehot,
    "constant": _stream_constant,
}


def batch_blocks(shape: Shape, seed: int, dist: str, b: int, block_values: int = BLOCK_VALUES) -> Blocks:
    """Batch b's Q, K, V rows in file order, as float32 blocks of at most block_values values."""
    for block in DISTRIBUTIONS[dist](np.random.default_rng([seed, b]), shape.N, shape.d, block_values):
        yield np.asarray(block, dtype=np.float32)


def batch(shape: Shape, seed: int, dist: str, b: int) -> Batch:
    """Q, K, V of batch b as float32 arrays (held at once: for tests and small shapes)."""
    whole = np.concatenate(list(batch_blocks(shape, seed, dist, b)))
    q, k, v = np.split(whole, 3)
    return q, k, v


Piece = Callable[[], np.ndarray]  # draws one block of values, as float32


def _uniform_pieces(shape: Shape, seed: int, b: int, block_values: int) -> Iterator[Piece]:
    """Batch b of a uniform input as independent pieces: each draws its rows from its own copy of
    the batch's stream, advanced to where those rows start (one 64-bit step per value), so the
    pieces can be drawn at once on every core and still give the bytes of one stream."""
    offset = 0
    for _ in range(3):
        for n in _rows(shape.N, shape.d, block_values):
            def piece(start=offset, n=n):
                rng = np.random.default_rng([seed, b])
                rng.bit_generator.advance(start)
                return rng.uniform(-LIMIT, LIMIT, size=(n, shape.d)).astype(np.float32)
            yield piece
            offset += n * shape.d


def _blocks_group(shape: Shape, seed: int, dist: str, b0: int, b1: int) -> np.ndarray:
    """Batches b0..b1-1, each drawn block by block from its stream, as float32."""
    return np.concatenate([np.concatenate(list(batch_blocks(shape, seed, dist, b))) for b in range(b0, b1)])


def _uniform_group(shape: Shape, seed: int, dist: str, b0: int, b1: int) -> np.ndarray:
    """Batches b0..b1-1 of a uniform input, each batch's Q, K and V in one draw of its stream: the
    same values as Q, K, V drawn one after another (one 64-bit step a value), without a Python
    generator per block, which held the GIL for most of a suite of many short batches."""
    per_batch = 3 * shape.N * shape.d
    values = np.empty((b1 - b0) * per_batch, dtype=np.float32)
    for i, b in enumerate(range(b0, b1)):
        values[i * per_batch:(i + 1) * per_batch] = np.random.default_rng([seed, b]).uniform(-LIMIT, LIMIT, per_batch)
    return values


def _pieces(shape: Shape, seed: int, dist: str, block_values: int) -> Iterator[tuple[Piece, bool, int]]:
    """(piece, independent, batches it completes) in file order; a piece returns float32 values.
    Batches that fit in a block are drawn together, as many as fill one, in one independent piece;
    a larger uniform batch (the course's distribution) is split into independent pieces (see
    _uniform_pieces); a larger batch of another distribution is drawn block by block from its one
    stream, in order."""
    per_batch = 3 * shape.N * shape.d
    if per_batch <= block_values:
        group = block_values // per_batch
        draw = _uniform_group if dist == "uniform" else _blocks_group
        for b0 in range(0, shape.B, group):
            b1 = min(shape.B, b0 + group)
            yield (lambda b0=b0, b1=b1: draw(shape, seed, dist, b0, b1)), True, b1 - b0
        return
    for b in range(shape.B):
        if dist == "uniform":
            pieces = [(piece, True) for piece in _uniform_pieces(shape, seed, b, block_values)]
        else:
            pieces = ((lambda block=block: block, False) for block in batch_blocks(shape, seed, dist, b, block_values))
        last = None
        for item in pieces:
            if last is not None:
                yield (*last, 0)
            last = item
        yield (*last, 1)


class _Drawn:
    """A piece drawn already, where a future is expected."""

    def __init__(self, values: np.ndarray):
        self.values = values

    def result(self) -> np.ndarray:
        return self.values


def workers() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def write_input(
    path: str | os.PathLike, shape: Shape, seed: int, dist: str = "uniform",
    progress: Callable[[int], None] | None = None, block_values: int = BLOCK_VALUES, digest=None,
) -> tuple[int, int] | None:
    """Write a whole input file atomically, in bounded blocks drawn on every core (numpy draws
    without holding the GIL) and written in order; refused up front where the file system has not
    the room for it. `digest`: a hashlib object fed the bytes as they are written. Returns the file
    put in place (files.OutputWriter.placed)."""
    window = 2 * workers()  # pieces drawn ahead of the writer: memory stays bounded
    with atomic_file(path, size=shape.input_bytes) as f, ThreadPoolExecutor(workers()) as pool, \
            ThreadPoolExecutor(1) as hasher:
        hashing: deque = deque()  # the digest is fed in order by one thread, beside the writes

        def put(data) -> None:
            f.write(data)
            if digest is not None:
                hashing.append(hasher.submit(digest.update, data))
                while len(hashing) > window:
                    hashing.popleft().result()

        put(header_bytes(shape))
        pending: deque = deque()

        def finish_one() -> None:
            future, batches = pending.popleft()
            put(memoryview(future.result()).cast("B"))
            if progress and batches:
                progress(batches)

        def as_f32(piece) -> np.ndarray:  # converted where drawn: the writer only writes
            return np.ascontiguousarray(piece(), dtype="<f4")

        for piece, independent, batches in _pieces(shape, seed, dist, block_values):
            pending.append((pool.submit(as_f32, piece) if independent else _Drawn(as_f32(piece)), batches))
            if len(pending) >= window:
                finish_one()
        while pending:
            finish_one()
        while hashing:
            hashing.popleft().result()
    return f.placed


def check_replaceable(path: Path) -> None:
    """fa gen -o replaces only an empty file or an input of the course's format (unless --force):
    whatever else is there (notes, a results file, an output) is someone's work."""
    if forced() or not os.path.isfile(path) or os.path.getsize(path) == 0:
        return
    try:
        read_header(path)
    except FormatError as e:
        why = str(e).removeprefix(f"{path}: ")
        raise FormatError(f"{path}: exists and is not an input of the course's format ({why}): fa gen replaces only "
                          "an empty file or an input; name another file, or give --force to replace it") from None


def check_outputs(output: Path, expected: Path | None, shape: Shape) -> None:
    """fa gen's files, before any is written: usable paths, two different files, and room for them."""
    check_replaceable(output)
    if expected is not None and same_file(output, expected):
        raise FormatError(f"{expected}: --expected names the input file -o writes")
    plans = [(check_output_path(output), shape.input_bytes)]
    if expected is not None:
        plans.append((check_output_path(expected), shape.output_bytes))
    for plan, size in plans:  # each against its file system, the two together where they share one
        together = sum(n for p, n in plans if not p.in_place and not plan.in_place and p.device == plan.device)
        check_space(plan, max(size, together))


def write_expected(inp, path: str | os.PathLike, progress: Callable[[int], None] | None = None) -> None:
    """Write the float64 reference of an input, rounded once to float32 (the output format)."""
    group = max(1, (16 << 20) // (12 * inp.shape.N * inp.shape.d))
    with atomic_file(path, inputs=(inp.path,), size=inp.shape.output_bytes) as f:
        for b0 in range(0, inp.shape.B, group):
            b1 = min(inp.shape.B, b0 + group)
            f.write(as_f32_bytes(reference.attention(*inp.qkv(b0, b1))))
            if progress:
                progress(b1 - b0)


# ---------------------------------------------------------------- stamps of cached inputs
# A generated input kept in the cache carries a stamp beside it (NAME.stamp): the parameters it
# was made from, its sha256, and the size, inode and mtime it had then. A file whose stamp is
# missing, names other parameters or no longer matches the file is not used as that input: a
# file planted under a cache name, or edited since, is made again (or hashed, where its sha256
# is known, as a suite case's is).
def stamp_path(path: Path) -> Path:
    return path.with_name(path.name + ".stamp")


def _identity(st: os.stat_result) -> list:
    return [st.st_size, st.st_ino, st.st_mtime_ns]


def write_stamp(path: Path, params: dict, sha256: str, stamp_file: Path | None = None) -> None:
    """The stamp, beside the file or at stamp_file (a shipped input's, kept in the cache)."""
    stamp = dict(params=params, sha256=sha256, identity=_identity(os.stat(path)))
    with atomic_file(stamp_file or stamp_path(path)) as f:
        f.write(json.dumps(stamp).encode())


def stamp_holds(path: Path, params: dict, stamp_file: Path | None = None) -> bool:
    """The file is the one generated from `params` (or checked against them) and unchanged since."""
    try:
        stamp = json.loads((stamp_file or stamp_path(path)).read_bytes()[:4096])
        return stamp["params"] == params and stamp["identity"] == _identity(os.stat(path))
    except (OSError, ValueError, KeyError, TypeError):
        return False
