"""What fa keeps in its cache directory (FA_CACHE, else ~/.cache/fa), how big, and clearing it.

The cache holds four kinds of files, each in its own place:
  inputs            generated suite cases and bench shapes kept for later runs (NAME.in and its
                    .stamp at the top; fa run keeps them only with --keep-inputs), and stamps/,
                    the checks of shipped inputs against the manifest;
  expected outputs  expected/SHA256.out, the float64 reference of each input judged;
  student builds    student/, a source of yours built with the course's line (--program hw4.cu);
  fa's builds       build/, fa's programs built from an installed package's sources.
Anything else there is not fa's and is neither counted nor removed.
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from .. import locations
from ..programs.ready import human_bytes

KINDS = ("inputs", "expected outputs", "student builds", "fa's builds")
FOLDERS = {"expected": "expected outputs", "student": "student builds", "build": "fa's builds", "stamps": "inputs"}
INPUT_SUFFIXES = (".in", ".in.stamp")


@dataclass
class Kept:
    kind: str
    files: int = 0
    bytes: int = 0


def _kind_of(entry: os.DirEntry) -> str | None:
    if entry.is_dir(follow_symlinks=False):
        return FOLDERS.get(entry.name)
    if entry.is_file(follow_symlinks=False) and entry.name.endswith(INPUT_SUFFIXES):
        return "inputs"
    return None


def _size(path: str) -> tuple[int, int]:
    """(files, bytes) of a file or of a folder's files, links not followed."""
    if not os.path.isdir(path) or os.path.islink(path):
        return 1, os.lstat(path).st_size
    files = size = 0
    for root, _, names in os.walk(path):
        for name in names:
            try:
                size += os.lstat(os.path.join(root, name)).st_size
                files += 1
            except OSError:
                pass
    return files, size


def usage(folder: Path | None = None) -> list[Kept]:
    """Each kind of file kept, with its count and bytes (file sizes)."""
    folder = folder or locations.cache_dir()
    kept = {k: Kept(k) for k in KINDS}
    if folder.is_dir():
        for entry in os.scandir(folder):
            kind = _kind_of(entry)
            if kind is None:
                continue
            try:
                files, size = _size(entry.path)
            except OSError:
                continue
            kept[kind].files += files
            kept[kind].bytes += size
    return list(kept.values())


def total(kept: list[Kept]) -> int:
    return sum(k.bytes for k in kept)


def clear(folder: Path | None = None) -> list[Kept]:
    """Remove every file of fa's kinds; returns what was removed. Files that are not fa's stay."""
    folder = folder or locations.cache_dir()
    removed = usage(folder)
    if folder.is_dir():
        for entry in os.scandir(folder):
            if _kind_of(entry) is None:
                continue
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                try:
                    os.unlink(entry.path)
                except FileNotFoundError:
                    pass
    return removed


def summary(kept: list[Kept]) -> str:
    """"554.2 MB (554168320 bytes: 3 expected outputs 554.2 MB, ...)": what is kept, in one line."""
    parts = [f"{k.kind} {human_bytes(k.bytes)}" for k in kept if k.files]
    return f"{human_bytes(total(kept))} ({total(kept)} bytes" + (": " + ", ".join(parts) if parts else "") + ")"
