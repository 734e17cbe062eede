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

import functools
import json
import os
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from ..file_pages import file_system_type, mapped, reserve, rewritten_file
from ..files import atomic_file, check_output_path, check_space, forced, same_file
from ..judge import reference
from .drawing_processes import Broken, DrawingProcesses, drawing_way, pool
from .format import HEADER_BYTES, FormatError, Shape, as_f32_bytes, header_bytes, read_header

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


# ---------------------------------------------------------------- pieces, drawn on every core
# A file is cut into pieces, each a run of values at a known place: batches small enough to share
# a block are drawn together, a larger batch block by block. A piece of the course's distribution
# (uniform) draws its values from its own copy of its batch's stream, advanced to where they start
# (one 64-bit step a value), so every such piece is independent and the pieces are drawn at once
# on every core; a large batch of another distribution is drawn block by block from its one
# stream, in order, on the writing thread. Where the file has a path of its own (fa run's scratch
# inputs), uniform pieces are drawn by processes (drawing_processes.py), each mapping its part of
# the file: numpy takes the GIL for every batch's stream, and threads queue on it (on the H200's
# 16 cores, suite c's c11 of 13600 batches took 0.82 s on threads, 0.16 s on processes).
SCRATCH_VALUES = 1 << 16  # float64 values a worker draws at once (512 KB: stays in its caches)


@dataclass(frozen=True)
class _Piece:
    start: int  # the piece's first value, counted from the first value after the header
    count: int
    fill: Callable[[np.ndarray], None]  # writes its `count` values into the float32 array given
    independent: bool  # may be filled on any thread, in any order
    batches: int  # the batches it completes (for progress)
    portable: bool = False  # fill is a module function's partial: it may run in another process


def _uniform_into(dest: np.ndarray, seed: int, b: int, start: int, block_values: int) -> None:
    """dest.size values of batch b's uniform stream from value `start` on. numpy's uniform(low,
    high) is low + (high - low) * u for each double u of the stream, the very doubles random()
    gives: drawn into a buffer and scaled in place, they are its values bit for bit, without its
    call per value (several times faster)."""
    rng = np.random.default_rng([seed, b])
    if start:
        rng.bit_generator.advance(start)
    scratch = np.empty(min(dest.size, block_values, SCRATCH_VALUES))
    for i in range(0, dest.size, scratch.size):
        u = scratch[: min(scratch.size, dest.size - i)]
        rng.random(out=u)
        u *= 2 * LIMIT
        u += -LIMIT
        dest[i : i + u.size] = u


def _stream_into(blocks: Blocks) -> Callable[[np.ndarray], None]:
    def fill(dest: np.ndarray) -> None:
        dest[:] = next(blocks).reshape(-1)
    return fill


GROUP_SCRATCH_VALUES = 1 << 20  # float64 values of small batches drawn before they are scaled together


def _uniform_batches_into(dest: np.ndarray, seed: int, b0: int, b1: int, per_batch: int, block_values: int) -> None:
    """Batches b0..b1-1 of a uniform input, each from its own stream (as _uniform_into), their
    doubles drawn one batch after another into one buffer and scaled together: a suite of many
    small batches (c11: 13600) makes few numpy calls per batch, each of which takes the GIL."""
    scratch = np.empty(max(per_batch, min(dest.size, block_values, GROUP_SCRATCH_VALUES)))
    filled = written = 0

    def flush() -> None:
        nonlocal filled, written
        u = scratch[:filled]
        u *= 2 * LIMIT
        u += -LIMIT
        dest[written : written + filled] = u
        written, filled = written + filled, 0
    for b in range(b0, b1):
        if filled + per_batch > scratch.size:
            flush()
        np.random.default_rng([seed, b]).random(out=scratch[filled : filled + per_batch])
        filled += per_batch
    flush()


def _group_into(shape: Shape, seed: int, dist: str, b0: int, b1: int, block_values: int) -> Callable:
    per_batch = 3 * shape.N * shape.d
    if dist == "uniform":
        return functools.partial(_uniform_batches_into, seed=seed, b0=b0, b1=b1, per_batch=per_batch,
                                 block_values=block_values)

    def fill(dest: np.ndarray) -> None:
        for i, b in enumerate(range(b0, b1)):
            dest[i * per_batch : (i + 1) * per_batch] = np.concatenate(
                [x.reshape(-1) for x in batch_blocks(shape, seed, dist, b)])
    return fill


PIECES_A_CORE = 4  # an input of the course's distribution is cut into this many pieces a core, at least
MIN_PIECE_VALUES = 1 << 16  # ...each of this many values at least (256 KB): a piece's setup stays small


def _piece_values(shape: Shape, dist: str, block_values: int) -> int:
    """Values of one piece: a block at most; for uniform inputs (pieces independent of where they
    are cut) small enough that every core gets some, to the end: a 16 MB input of one block was
    drawn on one core (suite c's c01 to c10 took 40 ms each on the H200, its large inputs 0.3 s)."""
    if dist != "uniform":
        return block_values
    per_core = -(-3 * shape.N * shape.d * shape.B // (PIECES_A_CORE * workers()))
    return max(1, min(block_values, max(MIN_PIECE_VALUES, per_core)))


def _pieces(shape: Shape, seed: int, dist: str, block_values: int) -> Iterator[_Piece]:
    """The file's pieces in order (see above)."""
    block_values = _piece_values(shape, dist, block_values)
    per_batch = 3 * shape.N * shape.d
    if per_batch <= block_values:
        group = block_values // per_batch
        for b0 in range(0, shape.B, group):
            b1 = min(shape.B, b0 + group)
            yield _Piece(b0 * per_batch, (b1 - b0) * per_batch, _group_into(shape, seed, dist, b0, b1, block_values),
                         True, b1 - b0, dist == "uniform")
        return
    for b in range(shape.B):
        blocks = batch_blocks(shape, seed, dist, b, block_values)
        offset = 0
        for _ in range(3):  # Q, K, V: the blocks batch_blocks yields, in its order
            for n in _rows(shape.N, shape.d, block_values):
                count = n * shape.d
                if dist == "uniform":
                    fill = functools.partial(_uniform_into, seed=seed, b=b, start=offset, block_values=block_values)
                else:
                    fill = _stream_into(blocks)
                offset += count
                yield _Piece(b * per_batch + offset - count, count, fill, dist == "uniform",
                             int(offset == per_batch), dist == "uniform")


def workers() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def write_input(
    path: str | os.PathLike, shape: Shape, seed: int, dist: str = "uniform",
    progress: Callable[[int], None] | None = None, block_values: int = BLOCK_VALUES, digest=None,
    in_place: bool = False,
) -> tuple[int, int] | None:
    """Write a whole input file atomically, its pieces drawn on every core (numpy draws without
    holding the GIL); refused up front where the file system has not the room for it. A regular
    file is filled through memory, each piece drawn straight into its part of the file's pages (no
    copy, no write call); a device or a FIFO is written in order, in bounded blocks. `digest`: a
    hashlib object fed the bytes in order, beside the drawing. in_place: the file at `path`, a
    scratch file of fa's own, is written again where it is (file_pages.rewritten_file), not replaced.
    Returns the file put in place (files.OutputWriter.placed)."""
    processes = drawers() if drawing_way(shape.input_bytes, in_place) == "processes" else None
    placed, broken = _write_input(path, shape, seed, dist, progress, block_values, digest, in_place, processes)
    if broken:  # a drawing process died (killed, out of memory): its pieces were drawn here; new ones next time
        processes.close()
        pool.cache_clear()
    return placed


def _write_input(path, shape: Shape, seed: int, dist: str, progress, block_values: int, digest, in_place: bool,
                 processes: DrawingProcesses | None) -> tuple[tuple[int, int] | None, bool]:
    """write_input's work; also whether the drawing processes broke (a piece they did not draw is
    drawn here instead, in its turn, so the file and the digest come out the same)."""
    window = 2 * workers()  # pieces in flight: memory stays bounded
    broken = False
    place = rewritten_file(path, shape.input_bytes) if in_place else atomic_file(path, size=shape.input_bytes)
    with place as f, ThreadPoolExecutor(workers()) as threads, _InOrder(digest, window) as hash_in_order, \
            mapped(f, shape.input_bytes, populate=in_place and not processes,
                   reserved=HEADER_BYTES if processes else None) as pages:
        in_memory = pages is not None and file_system_type(os.fstat(f.fd).st_dev) == "tmpfs"  # see fill_part
        header = header_bytes(shape)
        if pages is None:
            f.write(header)
        else:
            pages[: len(header)] = header
        values = None if pages is None else np.frombuffer(pages, dtype="<f4", offset=len(header))

        def draw(piece: _Piece) -> np.ndarray:
            dest = np.empty(piece.count, "<f4") if values is None else values[piece.start : piece.start + piece.count]
            piece.fill(dest)
            return dest

        hash_in_order(header)
        pending: deque = deque()

        def finish_one() -> None:
            drawing, batches = pending.popleft()
            data = memoryview(drawing.result()).cast("B")
            if values is None:
                f.write(data)
            hash_in_order(data)
            if progress and batches:
                progress(batches)

        def draw_after_break(piece: _Piece) -> None:
            nonlocal broken
            broken = True
            reserve(f.fd, path, HEADER_BYTES + 4 * piece.start, 4 * piece.count)  # (the process had not, or could not)
            draw(piece)

        def start(piece: _Piece):
            if processes is not None and not broken and values is not None and piece.portable:
                part = processes.submit(os.path.abspath(path), piece.start, piece.count, piece.fill, not in_memory)
                return _Mapped(part, values[piece.start : piece.start + piece.count],
                               functools.partial(draw_after_break, piece))
            return threads.submit(draw, piece) if piece.independent else _Drawn(draw(piece))

        for piece in _pieces(shape, seed, dist, block_values):
            pending.append((start(piece), piece.batches))
            if len(pending) >= window:
                finish_one()
        while pending:
            finish_one()
        del values
    return f.placed, broken


class _InOrder:
    """A digest fed in order by a thread of its own, beside the drawing (at most `window` pieces
    behind); a callable, and a context manager that waits for it at the end."""

    def __init__(self, digest, window: int):
        self.digest, self.window, self.hashing = digest, window, deque()
        self.hasher = ThreadPoolExecutor(1)

    def __call__(self, data) -> None:
        if self.digest is not None:
            self.hashing.append(self.hasher.submit(self.digest.update, data))
            while len(self.hashing) > self.window:
                self.hashing.popleft().result()

    def __enter__(self) -> _InOrder:
        return self

    def __exit__(self, *exc) -> None:
        while self.hashing:
            self.hashing.popleft().result()
        self.hasher.shutdown()


class _Drawn:
    """A piece drawn already, where a future is expected."""

    def __init__(self, values: np.ndarray):
        self.values = values

    def result(self) -> np.ndarray:
        return self.values


class _Mapped:
    """A piece another process draws into the file: its values, through this process's mapping,
    once that process is done (or, where it broke, once `redraw` has drawn them here)."""

    def __init__(self, part: Future, values: np.ndarray, redraw: Callable[[], None]):
        self.part, self.values, self.redraw = part, values, redraw

    def result(self) -> np.ndarray:
        try:
            self.part.result()
        except Broken:
            self.redraw()
        return self.values


def drawers() -> DrawingProcesses | None:
    """The drawing processes, one a core (drawing_processes.pool)."""
    return pool(workers())



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
