"""Files placed atomically, as the programs place their outputs (src_common/host/output.h).

Every file fa writes goes through atomic_file: a new name or a regular file is put in place
atomically (an unnamed file linked in, or a temporary name exchanged with the old file), the
path never resolved by fa, a sticky directory's rules kept, a student's file never replaced
unless --force; the format's files (fa_cli/cases/format.py), records, charts and reports alike.
"""
from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import re
import secrets
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from .errors import ExitStatus, FaError, FormatError

# Every file fa writes goes through atomic_file, with the programs' rule (src_common/host/output.h):
# a new name or a regular file is put in place atomically: written as an unnamed file in the
# target's directory (O_TMPFILE), linked to the name where it is new, else to a temporary name
# and exchanged with the old file (renameat2 RENAME_EXCHANGE, which unlike a rename over it does
# not make ext4 write the new file back first), so the path is never missing, two writers both
# succeed (the last one wins) and a kill -9 leaves nothing behind; where the file system has no
# unnamed files, an exclusive ".NAME.PID.XXXXXXXX.tmp" is used and a later write removes those
# of this user whose process is gone. A new file's mode follows the umask; a replaced file keeps
# its mode where the user owns it.
# The path is never resolved by fa: the kernel opens the final directory (following any link on
# the way under its own rules, fs.protected_symlinks included) and every later step is relative
# to that directory's descriptor. Only a symbolic link as the final component is followed by fa,
# to write its target (the link stays): read with readlinkat, its target's directory opened by
# the kernel again, relative to the link's; in a sticky world-writable directory (/tmp) only a
# link of the user's own or of the directory's owner is followed (the kernel's rule for a final
# component), else one line. A device or a FIFO (/dev/null, /dev/stdout) is written in place,
# as cp and dd write it; a directory, an input of the same command, a missing or unwritable
# directory, an existing file the user may not write (as cp says it), another user's file in a
# sticky directory and a name too long are refused before any work.
# A student's work is never replaced: an existing file with a source suffix (STUDENT_SUFFIXES) or
# named as a Makefile is refused in one line unless the command was given --force
# (replace_students_files); what else each writer may replace (fa gen: an input; fa report: its
# own report; a results file: extended, never replaced) is checked by that writer.
STUDENT_SUFFIXES = (".cu", ".hip", ".cpp", ".cc", ".c", ".h", ".py")
MAKEFILES = ("Makefile", "makefile", "GNUmakefile")
_REPLACE_STUDENTS_FILES = False


def replace_students_files(allowed: bool) -> None:
    """--force: this command may replace a source file or a Makefile (the one process-wide switch)."""
    global _REPLACE_STUDENTS_FILES
    _REPLACE_STUDENTS_FILES = allowed


def forced() -> bool:
    return _REPLACE_STUDENTS_FILES


def students_file(name: str) -> str | None:
    """What a file of this name is where fa must not replace it ("a source file (.cu)"), else None."""
    if name in MAKEFILES:
        return "a Makefile"
    suffix = os.path.splitext(name)[1]
    return f"a source file ({suffix})" if suffix.lower() in STUDENT_SUFFIXES else None


@dataclass(frozen=True)
class OutputPlan:
    path: Path      # as the user gave it, for messages
    target: Path    # the file written, for messages: path with its final links followed (not resolved further)
    in_place: bool  # an existing device or FIFO: written as it is, never replaced
    mode: int = 0o644  # of the file put in place
    device: int = 0    # st_dev of the target's directory
    free: int | None = None  # bytes free in the target's file system, where known


@dataclass
class _Place:
    """The target's directory, open, and its name there; `shown`: the target for messages."""
    dir_fd: int
    name: str
    shown: str

    def close(self) -> None:
        os.close(self.dir_fd)


_DIRECTORY = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC


def _sticky_shared(directory: os.stat_result) -> bool:
    return bool(directory.st_mode & stat.S_ISVTX and directory.st_mode & stat.S_IWOTH)


def _name_max(dir_fd: int) -> int:
    try:
        return os.fpathconf(dir_fd, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


def _open_place(path: str | os.PathLike) -> _Place:
    """The directory a path's file goes in, opened by the kernel, and the file's name in it; a
    final symbolic link is followed (checked first, see the rule above), each in turn."""
    shown = where = os.fspath(path)
    dir_fd = None  # None: relative to the current directory; else to the last link's directory
    try:
        for _ in range(40):
            head, name = os.path.split(where)
            try:
                fd = os.open(head or ".", _DIRECTORY, dir_fd=dir_fd)
            except OSError as e:
                shown_dir = os.path.dirname(shown) or "."
                if e.errno == errno.ENOTDIR:
                    raise FormatError(f"{path}: cannot write: {shown_dir} is not a directory") from None
                if e.errno == errno.ELOOP:
                    raise FormatError(f"{path}: too many levels of symbolic links") from None
                raise FormatError(f"{path}: cannot write: {shown_dir}: {e.strerror}") from None
            if dir_fd is not None:
                os.close(dir_fd)
            dir_fd = fd
            if name in ("", ".", ".."):
                raise FormatError(f"{path}: output path is a directory")
            limit = _name_max(dir_fd)
            if len(os.fsencode(name)) > limit:
                raise FormatError(f"{path}: output name is too long ({len(os.fsencode(name))} bytes; "
                                  f"this file system allows {limit})")
            try:
                link = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                link = None
            except OSError as e:
                raise FormatError(f"{path}: cannot write: {e.strerror}") from None
            if link is None or not stat.S_ISLNK(link.st_mode):
                place, dir_fd = _Place(dir_fd, name, shown), None
                return place
            directory = os.fstat(dir_fd)
            if _sticky_shared(directory) and link.st_uid not in (os.geteuid(), directory.st_uid):
                raise FormatError(f"{path}: a symbolic link of another user's in a sticky world-writable directory: "
                                  "not followed (as the kernel's fs.protected_symlinks does)")
            try:
                where = os.fsdecode(os.readlink(name, dir_fd=dir_fd))
            except OSError as e:
                raise FormatError(f"{path}: cannot read output link: {e.strerror}") from None
            shown = where if os.path.isabs(where) else os.path.join(os.path.dirname(shown), where)
        raise FormatError(f"{path}: too many levels of symbolic links")
    finally:
        if dir_fd is not None:
            os.close(dir_fd)


def same_file(a: Path, b: Path) -> bool:
    """Two names of one file: the same inode where both exist, else the same name in the same
    directory once final links are followed (two outputs of one command, neither there yet)."""
    try:
        sa, sb = os.stat(a), os.stat(b)
        return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)
    except OSError:
        pass
    keys = []
    for p in (a, b):
        try:
            place = _open_place(p)
        except (FormatError, OSError):
            return False
        try:
            d = os.fstat(place.dir_fd)
            keys.append((d.st_dev, d.st_ino, place.name))
        finally:
            place.close()
    return keys[0] == keys[1]


def check_output_path(path: str | os.PathLike, inputs: tuple = ()) -> OutputPlan:
    """Where an output goes and how, checked before any work (FormatError, exit 2, otherwise)."""
    plan, place = _plan(path, inputs)
    place.close()
    return plan


def _plan(path: str | os.PathLike, inputs: tuple) -> tuple[OutputPlan, _Place]:
    """The checks of check_output_path, with the target's directory left open for the writer."""
    if str(path) == "":
        raise FormatError("output path is empty")
    place = _open_place(path)  # as given: Path() would drop a trailing "/"
    try:
        plan = _check_place(Path(path), place, inputs)
    except BaseException:
        place.close()
        raise
    return plan, place


def _check_place(path: Path, place: _Place, inputs: tuple) -> OutputPlan:
    target, dir_fd, name = Path(place.shown), place.dir_fd, place.name
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        st = None
    for other in inputs:
        if other is None or st is None:
            continue
        with contextlib.suppress(OSError):
            so = os.stat(other)
            if (so.st_dev, so.st_ino) == (st.st_dev, st.st_ino):
                raise FormatError(f"{path}: output is the input file {other}")
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise FormatError(f"{path}: output path is a directory")
    where = os.fstat(dir_fd)
    if st is not None and not stat.S_ISREG(st.st_mode):
        if stat.S_ISSOCK(st.st_mode):
            raise FormatError(f"{path}: output is a socket")
        return OutputPlan(path, target, True, device=where.st_dev)
    ids = dict(effective_ids=True) if os.access in os.supports_effective_ids else {}
    if not os.access(".", os.W_OK | os.X_OK, dir_fd=dir_fd, **ids) or \
            st is not None and not os.access(name, os.W_OK, dir_fd=dir_fd, **ids):
        raise FormatError(f"{path}: cannot write: {os.strerror(errno.EACCES)}")
    if st is not None and where.st_mode & stat.S_ISVTX and os.geteuid() not in (0, st.st_uid, where.st_uid):
        raise FormatError(f"{path}: cannot write: another user's file in a sticky directory (only its owner may "
                          "replace it)")
    what = students_file(name) if st is not None else None
    if what and not _REPLACE_STUDENTS_FILES:
        raise FormatError(f"{path}: {what} exists there, and fa never replaces one: name another output, or "
                          "give --force to replace it")
    mode = stat.S_IMODE(st.st_mode) if st is not None and st.st_uid == os.geteuid() else 0o666 & ~_umask()
    try:
        fs = os.statvfs(dir_fd)  # the directory's file system, through its descriptor
    except OSError:
        fs = None
    if fs is not None and fs.f_flag & os.ST_RDONLY:
        raise FormatError(f"{path}: cannot write: {os.strerror(errno.EROFS)}")
    if fs is not None and fs.f_blocks == 0:  # proc, sysfs: no blocks of its own, no files to make there
        raise FormatError(f"{path}: cannot write: {os.path.dirname(target) or '.'} is a kernel file system, not "
                          "a place for files")
    try:
        free = shutil.disk_usage(dir_fd).free  # statvfs of the directory's descriptor
    except OSError:
        free = None
    return OutputPlan(path, target, False, mode, where.st_dev, free)


def gigabytes(n: int) -> str:
    return f"{n / 1e9:.3g} GB" if n >= 1e8 else f"{n / 1e6:.3g} MB"


def check_space(plan: OutputPlan, size: int) -> None:
    """Refuse a file larger than the free space of its file system, before writing any of it."""
    if plan.in_place or plan.free is None:
        return
    if size > plan.free:  # an old file there is replaced only at the end
        raise FormatError(f"{plan.path}: needs {gigabytes(size)} ({size} bytes), only {gigabytes(plan.free)} free "
                          f"in {os.path.dirname(plan.target) or '.'}")


class OutputWriter:
    """write(data) in full to a descriptor; a failed write is one line naming the output, exit 1.
    Once the file is in place, `placed` is its (st_dev, st_ino) (None for a device or FIFO)."""

    def __init__(self, fd: int, path: Path):
        self.fd, self.path = fd, path
        self.placed: tuple[int, int] | None = None

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        total = len(view)
        while view:
            try:
                view = view[os.write(self.fd, view):]
            except OSError as e:
                raise FaError(f"{self.path}: write failed: {e.strerror}", exit_code=ExitStatus.FAILED) from None
        return total


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike, inputs: tuple = (), size: int | None = None) -> Iterator[OutputWriter]:
    """An output that appears at `path` only if the block completes (see the rule above). `inputs`:
    files of the same command it must not be; `size`: bytes it will have, checked against the
    free space first."""
    plan, place = _plan(path, inputs)
    dir_fd, name = place.dir_fd, place.name  # every step below is relative to the directory
    try:
        if size is not None:
            check_space(plan, size)
        if plan.in_place:
            yield from _write_in_place(plan, place)
            return
        tmp = None
        try:
            fd, tmp = _temporary(dir_fd, plan, name)
            try:
                writer = OutputWriter(fd, plan.path)
                yield writer
                os.fchmod(fd, plan.mode)
                st = os.fstat(fd)
                if tmp is None:  # unnamed until now: linked to the name where it is new
                    try:
                        os.link(f"/proc/self/fd/{fd}", name, dst_dir_fd=dir_fd)  # linkat, AT_SYMLINK_FOLLOW
                        writer.placed = (st.st_dev, st.st_ino)
                        return
                    except FileExistsError:
                        tmp = _temporary_name(dir_fd, name)
                        os.link(f"/proc/self/fd/{fd}", tmp, dst_dir_fd=dir_fd)
            finally:
                os.close(fd)
            _put_in_place(dir_fd, tmp, name)
            tmp = None
            writer.placed = (st.st_dev, st.st_ino)
        except BaseException:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=dir_fd)
            raise
    finally:
        place.close()


def remove_placed(path: str | os.PathLike, placed: tuple[int, int] | None) -> None:
    """Take back a file atomic_file put at `path` (its `placed`), found as atomic_file found it,
    and only while that name is still that file."""
    if placed is None:
        return
    with contextlib.suppress(OSError, FormatError):
        place = _open_place(path)
        try:
            st = os.stat(place.name, dir_fd=place.dir_fd, follow_symlinks=False)
            if (st.st_dev, st.st_ino) == placed:
                os.unlink(place.name, dir_fd=place.dir_fd)
        finally:
            place.close()


def _put_in_place(dir_fd: int, tmp: str, name: str) -> None:
    """The temporary onto the name: exchanged with the file there, which is then unlinked from the
    temporary name; renamed where there is none or the file system cannot exchange names."""
    if _exchange(dir_fd, tmp, name):
        os.unlink(tmp, dir_fd=dir_fd)
    else:
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


RENAME_EXCHANGE = 2


def _exchange(dir_fd: int, a: str, b: str) -> bool:
    """renameat2(RENAME_EXCHANGE) of two names in one directory; False where b does not exist or
    the system or file system cannot exchange (then a rename does it)."""
    renameat2 = getattr(_libc(), "renameat2", None)
    if renameat2 is None:
        return False
    if renameat2(dir_fd, os.fsencode(a), dir_fd, os.fsencode(b), RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOENT, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), b)


@functools.cache
def _libc():
    return ctypes.CDLL(None, use_errno=True)


TEMPORARY = re.compile(r"^\..*\.(\d+)\.[A-Za-z0-9_]{8}\.tmp$")  # .NAME.PID.XXXXXXXX.tmp


def _temporary_name(dir_fd: int, name: str) -> str:
    """".NAME.PID.XXXXXXXX.tmp" beside the target, or a shorter name where that would not fit."""
    if len(os.fsencode(name)) + 32 > _name_max(dir_fd):
        name = "fa"
    return f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"


def _temporary(dir_fd: int, plan: OutputPlan, name: str) -> tuple[int, str | None]:
    """An unnamed file in the directory (None: no name), or where the file system has none an
    exclusive named one, after removing this user's temporaries whose process is gone."""
    if os.path.isdir("/proc/self/fd"):
        try:
            return os.open(".", os.O_TMPFILE | os.O_RDWR | os.O_CLOEXEC, 0o600, dir_fd=dir_fd), None
        except OSError as e:
            if e.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL, errno.ENOENT):
                raise FormatError(f"{plan.path}: cannot write: {e.strerror}") from None
    remove_leftovers(".", TEMPORARY, dir_fd=dir_fd)
    tmp = _temporary_name(dir_fd, name)
    try:
        return os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600, dir_fd=dir_fd), tmp
    except OSError as e:
        raise FormatError(f"{plan.path}: cannot write: {e.strerror}") from None


def remove_stale_temporaries(directory: Path) -> None:
    """Temporaries of this user's fa whose process no longer exists (killed with -9, say)."""
    remove_leftovers(directory, TEMPORARY)


def remove_leftovers(directory: str | os.PathLike, pattern: re.Pattern, dir_fd: int | None = None) -> None:
    """Entries of `directory` (relative to dir_fd, if given) whose name matches `pattern` (its
    group 1: the pid of the fa that made it), made by this user, whose process is gone: files
    unlinked, folders removed whole, each relative to the directory opened once. The one
    mechanism for whatever a SIGKILLed fa leaves (temporaries, scratch folders)."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return
    try:
        for entry in os.scandir(fd):
            match = pattern.match(entry.name)
            with contextlib.suppress(OSError):
                if not match or entry.stat(follow_symlinks=False).st_uid != os.geteuid() or alive(int(match.group(1))):
                    continue
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.name, dir_fd=fd, ignore_errors=True)
                else:
                    os.unlink(entry.name, dir_fd=fd)
    finally:
        os.close(fd)


def alive(pid: int) -> bool:
    """A process with this pid exists (another user's counts: signalling it is refused)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def _write_in_place(plan: OutputPlan, place: _Place) -> Iterator[OutputWriter]:
    try:  # a FIFO waits here for its reader, as with cp
        fd = os.open(place.name, os.O_WRONLY | os.O_CLOEXEC | os.O_NOFOLLOW, dir_fd=place.dir_fd)
    except OSError as e:
        raise FormatError(f"{plan.path}: cannot write: {e.strerror}") from None
    try:
        yield OutputWriter(fd, plan.path)
    finally:
        os.close(fd)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask

