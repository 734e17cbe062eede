"""Files filled through memory: a writer's pages mapped so that many threads draw into them at
once, a scratch file of fa's own rewritten in place (its pages reused), and the folder in memory
that fa run's drawn inputs go to where it has room."""
from __future__ import annotations

import contextlib
import errno
import mmap
import os
import stat
from pathlib import Path
from typing import Iterator

from .errors import ExitStatus, FaError, FormatError
from .files import OutputWriter


@contextlib.contextmanager
def mapped(writer: OutputWriter, size: int, populate: bool = False,
           reserved: int | None = None) -> Iterator[mmap.mmap | None]:
    """The file's first `size` bytes as writable memory, for writers that fill a file in place
    from many threads; None (write() instead) where the file is not a regular one or its blocks
    cannot be reserved here. The blocks are reserved first, so that a full disk is this one
    line now, never a SIGBUS on a page written later. populate: the pages are mapped at once
    (a file rewritten in place: its pages are there, and one call maps them faster than a
    fault each). reserved: only the first so many bytes reserved here, for a caller that has the
    rest reserved part by part where it is written (reserve(), in the drawing processes: on a file
    system in memory, reserving is allocating and zeroing pages, on one core)."""
    if not stat.S_ISREG(os.fstat(writer.fd).st_mode) or size == 0 or copy_on_write(writer.fd):
        yield None
        return
    try:
        os.posix_fallocate(writer.fd, 0, size if reserved is None else max(1, min(reserved, size)))
        flags = mmap.MAP_SHARED | (getattr(mmap, "MAP_POPULATE", 0) if populate else 0)
        pages = mmap.mmap(writer.fd, size, flags=flags)
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            raise FaError(f"{writer.path}: write failed: {e.strerror}", exit_code=ExitStatus.FAILED) from None
        yield None
        return
    try:
        yield pages
    finally:
        with contextlib.suppress(BufferError):  # views still held (an error mid-way): unmapped when they go
            pages.close()


def reserve(fd: int, path, offset: int, length: int) -> None:
    """Blocks reserved for a part of a file about to be written through memory (see mapped); a
    full disk is this one line."""
    try:
        os.posix_fallocate(fd, offset, length)
    except OSError as e:
        raise FaError(f"{path}: write failed: {e.strerror}", exit_code=ExitStatus.FAILED) from None


# File systems that write a block anew on every change: blocks reserved beforehand do not hold, so a
# full disk would come as a SIGBUS on a page written through memory; such a file is written instead.
COPY_ON_WRITE = ("btrfs", "zfs", "bcachefs")


def copy_on_write(fd: int) -> bool:
    """Whether the file's file system is one of COPY_ON_WRITE."""
    return file_system_type(os.fstat(fd).st_dev) in COPY_ON_WRITE


def file_system_type(device: int) -> str | None:
    """The type of the file system on a device number (st_dev), from Linux's mount table; None
    elsewhere, or where it is not listed."""
    wanted = f"{os.major(device)}:{os.minor(device)}"
    try:
        with open("/proc/self/mountinfo") as table:
            for line in table:
                fields, _, rest = line.partition(" - ")
                if fields.split()[2:3] == [wanted]:
                    return rest.split()[0] if rest.split() else None
    except OSError:
        pass
    return None


# ---------------------------------------------------------------- inputs drawn into memory
# fa run's drawn inputs go to a file system in memory where one is there with room: their pages
# are written without a disk file system's bookkeeping for each (suite c's large inputs drew 35%
# faster on the H200 into /dev/shm than into /tmp's ext4, the drawing itself as fast as into plain
# memory), and never go to disk. Such pages cannot be reclaimed while the file is there, so only
# a small part of the memory available is taken.
MEMORY_FOLDER = Path("/dev/shm")
MEMORY_SHARE = 4  # the drawn inputs take at most 1/MEMORY_SHARE of the memory available


def memory_folder_for(needed: int) -> Path | None:
    """MEMORY_FOLDER, where it is a file system in memory (tmpfs) with `needed` bytes free, and
    `needed` is at most 1/MEMORY_SHARE of the memory available; else None."""
    try:
        st, vfs = os.stat(MEMORY_FOLDER), os.statvfs(MEMORY_FOLDER)
    except OSError:
        return None
    writable = os.access(MEMORY_FOLDER, os.W_OK | os.X_OK)
    roomy = vfs.f_bavail * vfs.f_frsize >= needed and needed * MEMORY_SHARE <= available_memory()
    return MEMORY_FOLDER if writable and roomy and file_system_type(st.st_dev) == "tmpfs" else None


def available_memory() -> int:
    """The memory that can be had without swapping: Linux's estimate (MemAvailable), or less where
    fa runs under a memory limit (a Slurm job's cgroup: pages of a file system in memory count
    against it, and cannot be reclaimed); 0 where unknown."""
    try:
        with open("/proc/meminfo") as info:
            available = next(int(line.split()[1]) * 1024 for line in info if line.startswith("MemAvailable:"))
    except (OSError, ValueError, IndexError, StopIteration):
        return 0
    return min([available, *cgroup_memory_left()])


CGROUP_ROOT = Path("/sys/fs/cgroup")


def cgroup_memory_left(membership: str | None = None) -> list[int]:
    """What each memory limit over this process leaves (its cgroup's and its parents', cgroup v2
    or v1); none where there is no limit or it cannot be read. membership: /proc/self/cgroup's text."""
    left = []
    try:
        lines = (membership if membership is not None else Path("/proc/self/cgroup").read_text()).splitlines()
    except OSError:
        return left
    for line in filter(None, lines):
        _, controllers, where = line.split(":", 2)
        v2 = controllers == ""
        if not v2 and "memory" not in controllers.split(","):
            continue
        base = CGROUP_ROOT if v2 else CGROUP_ROOT / "memory"
        limit, usage = ("memory.max", "memory.current") if v2 else ("memory.limit_in_bytes", "memory.usage_in_bytes")
        folder = base / where.lstrip("/")
        while folder != base.parent:
            try:
                text = (folder / limit).read_text().strip()
                if text != "max" and int(text) < 1 << 60:
                    left.append(max(0, int(text) - int((folder / usage).read_text())))
            except (OSError, ValueError):
                pass
            if folder == base:
                break
            folder = folder.parent
    return left


@contextlib.contextmanager
def rewritten_file(path: str | os.PathLike, size: int) -> Iterator[OutputWriter]:
    """A file of fa's own private scratch folder written again in place, at `size` bytes: the
    pages it holds are reused, not freed and then allocated and zeroed again (fa run draws a
    suite's inputs into the files of the cases already judged). Not atomic: for a file no one
    reads until the writer is done; never a user's path (no link followed, none of files.py's rules)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as e:
        raise FormatError(f"{path}: cannot write: {e.strerror}") from None
    try:
        os.ftruncate(fd, size)
        writer = OutputWriter(fd, Path(path))
        yield writer
        st = os.fstat(fd)
        writer.placed = (st.st_dev, st.st_ino)
    finally:
        os.close(fd)
