"""The course's binary format: one reader, one writer, one set of checks.

Input, little-endian: int32 B, N, d, then for each batch b: Q_b, K_b, V_b, each N x d float32
row-major (interleaved per batch). Output: B*N*d float32, O_0 O_1 ..., no header.

Inputs are opened as a numpy memmap, so the 654 MB course input costs no copy: batch b's
Q, K and V are views into the page cache.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from .errors import FaError

HEADER_BYTES = 12
SUPPORTED_D = (32, 64)
# 12 + 12*B*N*d must fit in a signed 64-bit size; anything near that is absurd anyway.
MAX_ELEMENTS = (2**63 - 1 - HEADER_BYTES) // 12


class FormatError(FaError):
    """The file cannot be used as it is (exit code 2)."""


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
    if d not in SUPPORTED_D:
        supported = " and ".join(str(x) for x in SUPPORTED_D)
        raise FormatError(f"{what}: d = {d} is not supported (the programs support d = {supported})")
    if B * N * d > MAX_ELEMENTS:
        raise FormatError(f"{what}: B*N*d = {B}*{N}*{d} overflows 64-bit file sizes")
    return Shape(B, N, d)


def read_header(path: str | os.PathLike) -> Shape:
    """Read and validate an input file's header against the file's size."""
    path = Path(path)
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            raw = f.read(HEADER_BYTES)
    except OSError as e:
        raise FormatError(f"{path}: cannot read input: {e.strerror}") from None
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
    """A validated input file; Q, K, V of a batch (or a range of batches) are memmap views."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.shape = read_header(self.path)
        s = self.shape
        self._qkv = np.memmap(self.path, dtype="<f4", mode="r", offset=HEADER_BYTES, shape=(s.B, 3, s.N, s.d))

    def qkv(self, b0: int, b1: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Q, K, V of batches b0..b1-1, each shaped (batches, N, d); b1 defaults to b0+1."""
        block = self._qkv[b0 : b0 + 1 if b1 is None else b1]
        return block[:, 0], block[:, 1], block[:, 2]


def open_output(path: str | os.PathLike, shape: Shape, what: str = "output") -> np.ndarray:
    """An output file as a (B, N, d) float32 memmap, after checking its size."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError as e:
        raise FormatError(f"{path}: cannot read {what}: {e.strerror}") from None
    if size != shape.output_bytes:
        raise FormatError(
            f"{path}: {what} has {size} bytes, expected 4*B*N*d = {shape.output_bytes} for {shape}"
        )
    return np.memmap(path, dtype="<f4", mode="r", shape=(shape.B, shape.N, shape.d))


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike) -> Iterator:
    """A binary file that appears at `path` only if the block completes (temporary + rename)."""
    path = Path(path)
    directory = path.parent if str(path.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    except OSError as e:
        raise FormatError(f"{path}: cannot write: {e.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def header_bytes(shape: Shape) -> bytes:
    return np.array([shape.B, shape.N, shape.d], dtype="<i4").tobytes()


def as_f32_bytes(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a, dtype="<f4").tobytes()
