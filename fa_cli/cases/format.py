"""The course's binary format: one reader, one writer, one set of checks.

Input, little-endian: int32 B, N, d, then for each batch b: Q_b, K_b, V_b, each N x d float32
row-major (interleaved per batch). Output: B*N*d float32, O_0 O_1 ..., no header.

Inputs are opened as a numpy memmap, so the 654 MB course input costs no copy: batch b's
Q, K and V are views into the page cache.
"""
from __future__ import annotations

import contextlib
import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import ExitStatus, FaError, FormatError
from ..files import gigabytes

HEADER_BYTES = 12
SUPPORTED_D = (32, 64)
# 12 + 12*B*N*d must fit in a signed 64-bit size; anything near that is absurd anyway.
MAX_ELEMENTS = (2**63 - 1 - HEADER_BYTES) // 12
MAX_INT32 = 2**31 - 1  # B, N and d are int32 in the header


@dataclass(frozen=True)
class Shape:
    B: int
    N: int
    d: int

    @property
    def elements(self) -> int:
        """Values in one of Q, K, V or O for all batches: B*N*d."""
        return self.B * self.N * self.d

    @property
    def input_bytes(self) -> int:
        return HEADER_BYTES + 12 * self.elements

    @property
    def output_bytes(self) -> int:
        return 4 * self.elements

    @property
    def flops(self) -> int:
        """Work of attention as usually counted: 2*N*N*d for Q K^T and as much for P V."""
        return 4 * self.B * self.N * self.N * self.d

    def __str__(self) -> str:
        return f"B={self.B}, N={self.N}, d={self.d}"


def check_shape(B: int, N: int, d: int, what: str = "input") -> Shape:
    """The checks every program makes on a header, in the order a user wants to hear them."""
    for name, value in (("B", B), ("N", N), ("d", d)):
        if value <= 0:
            raise FormatError(f"{what}: {name} = {value}, must be positive")
        if value > MAX_INT32:
            raise FormatError(f"{what}: {name} = {value}, must be at most {MAX_INT32} (an int32 in the header)")
    if d not in SUPPORTED_D:
        supported = " and ".join(str(x) for x in SUPPORTED_D)
        raise FormatError(f"{what}: d = {d} is not supported (the programs support d = {supported})")
    if B * N * d > MAX_ELEMENTS:
        raise FormatError(f"{what}: B*N*d = {B}*{N}*{d} overflows 64-bit file sizes")
    return Shape(B, N, d)


def file_kind(mode: int) -> str:
    """What a file that is not a regular one is, for errors ("input is a FIFO")."""
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def open_regular(path: Path, what: str = "input") -> int:
    """A file descriptor of a regular file, opened for reading without blocking: a FIFO with no
    writer would wait forever in open(), and a device is no file of the format."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        with contextlib.suppress(OSError):
            mode = os.stat(path).st_mode
            if not stat.S_ISREG(mode):  # a socket cannot be opened (ENXIO)
                raise FormatError(f"{path}: {what} is {file_kind(mode)}, not a regular file") from None
        raise FormatError(f"{path}: cannot read {what}: {e.strerror}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise FormatError(f"{path}: {what} is {file_kind(mode)}, not a regular file")
    os.set_blocking(fd, True)
    return fd


def read_header(path: str | os.PathLike) -> Shape:
    """Read and validate an input file's header against the file's size."""
    path = Path(path)
    fd = open_regular(path)
    try:
        size = os.fstat(fd).st_size
        raw = os.pread(fd, HEADER_BYTES, 0)
    except OSError as e:
        raise FormatError(f"{path}: cannot read input: {e.strerror}") from None
    finally:
        os.close(fd)
    if len(raw) < HEADER_BYTES:
        what = "empty file" if not raw else f"short header ({len(raw)} bytes)"
        raise FormatError(f"{path}: {what}, expected a 12-byte header B, N, d")
    B, N, d = (int(x) for x in np.frombuffer(raw, dtype="<i4"))
    shape = check_shape(B, N, d, str(path))
    if size != shape.input_bytes:
        raise FormatError(
            f"{path}: file has {size} bytes, expected 12 + 12*B*N*d = {shape.input_bytes} for {shape}"
        )
    return shape


class AttentionInput:
    """A validated input file; Q, K, V of a batch (or a range of batches) are memmap views, or,
    with in_memory, views of a copy read now (a file cut short while read is then one line, not
    the SIGBUS a mapping gives)."""

    def __init__(self, path: str | os.PathLike, in_memory: bool = False):
        self.path = Path(path)
        self.shape = read_header(self.path)
        s = self.shape
        if in_memory:
            values = read_exactly(self.path, HEADER_BYTES, s.input_bytes - HEADER_BYTES, "input")
            self._qkv = values.reshape(s.B, 3, s.N, s.d)
        else:
            self._qkv = mapped(self.path, "input", offset=HEADER_BYTES, shape=(s.B, 3, s.N, s.d))

    def qkv(self, b0: int, b1: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Q, K, V of batches b0..b1-1, each shaped (batches, N, d); b1 defaults to b0+1."""
        block = self._qkv[b0 : b0 + 1 if b1 is None else b1]
        return block[:, 0], block[:, 1], block[:, 2]


def regular_size(path: str | os.PathLike, what: str = "output") -> int:
    """The size of a regular file to read; anything else is refused in one line, unread."""
    fd = open_regular(Path(path), what)
    try:
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def open_output(path: str | os.PathLike, shape: Shape, what: str = "output", in_memory: bool = False) -> np.ndarray:
    """An output file as a (B, N, d) float32 memmap, after checking its size; with in_memory, a
    copy read now (see AttentionInput)."""
    path = Path(path)
    size = regular_size(path, what)
    if size != shape.output_bytes:
        raise FormatError(
            f"{path}: {what} has {size} bytes, expected 4*B*N*d = {shape.output_bytes} for {shape}"
        )
    if in_memory:
        return read_exactly(path, 0, size, what).reshape(shape.B, shape.N, shape.d)
    return mapped(path, what, offset=0, shape=(shape.B, shape.N, shape.d))


def mapped(path: Path, what: str, offset: int, shape: tuple) -> np.ndarray:
    """A read-only float32 memmap; a mapping refused (ENOMEM under a memory limit, say) is one
    line naming the file."""
    try:
        return np.memmap(path, dtype="<f4", mode="r", offset=offset, shape=shape)
    except (OSError, MemoryError) as e:
        why = os.strerror(errno.ENOMEM) if isinstance(e, MemoryError) else e.strerror or str(e)
        raise FaError(f"{path}: cannot map {what}: {why}", exit_code=ExitStatus.FAILED) from None


def read_exactly(path: Path, offset: int, size: int, what: str) -> np.ndarray:
    """`size` bytes of a regular file from `offset`, as little-endian float32, read in chunks;
    a file that ends sooner (cut short while fa reads it) is one line."""
    fd = open_regular(path, what)
    try:
        values = np.empty(size // 4, dtype="<f4")
    except MemoryError:
        os.close(fd)
        raise FaError(f"{path}: not enough memory to read {what} ({gigabytes(size)}): "
                      f"{os.strerror(errno.ENOMEM)}", exit_code=ExitStatus.FAILED) from None
    view = memoryview(values).cast("B")
    try:
        done = 0
        while done < size:
            n = os.preadv(fd, [view[done : done + (64 << 20)]], offset + done)
            if n == 0:
                raise FormatError(f"{path}: {what} was cut short while being read: {offset + done} of "
                                  f"{offset + size} bytes", exit_code=ExitStatus.FAILED)
            done += n
    except OSError as e:
        raise FormatError(f"{path}: cannot read {what}: {e.strerror}") from None
    finally:
        os.close(fd)
    return values


def header_bytes(shape: Shape) -> bytes:
    return np.array([shape.B, shape.N, shape.d], dtype="<i4").tobytes()


def as_f32_bytes(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a, dtype="<f4").tobytes()
