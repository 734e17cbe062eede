"""Results files: the records fa's commands write, and the one place they are made, read and saved.

A results file is one JSON document {"records": [...]}. Every command that measures (run -o,
bench, profile, ladder, sweep) adds records to one; fa resources --json prints the same shape.
Each record says which command made it in `kind` (KINDS; files from before fa wrote a kind are
recognised by their fields, kind_of). Files are written atomically (files.atomic_file), so a
crash mid-write leaves the file as it was, and an existing file is extended, not replaced.

This module imports nothing that measures, judges or reports: those all import it.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import platform
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

from .. import __version__, locations
from ..cases.format import file_kind, open_regular
from ..cases.suite import Target
from ..errors import ExitStatus, FaError
from ..files import atomic_file, check_output_path
from ..programs import devices, system
from ..programs.programs import Launcher, Program

KINDS = ("run", "bench", "profile", "ladder", "sweep", "resources")
NOT_RESULTS = "not a results file of fa"
# A results file is a few MB at most (a whole suite's records: about 100 KB); more is not one.
MAX_BYTES = 64 << 20


def kind_of(record: dict) -> str | None:
    """The command that made a record (one of KINDS), or None for a record fa does not know."""
    if record.get("kind") in KINDS:
        return record["kind"]
    if "profiler" in record:
        return "profile"
    if "target" in record and "registers" in record:
        return "resources"
    if "program" in record and ("wall_s" in record or "error" in record):
        return "bench"
    return None


def read_bounded(path: Path, limit: int = MAX_BYTES, what: str = "results file") -> bytes:
    """A regular file's bytes, up to `limit`: a FIFO, a device (/dev/zero, /dev/urandom) or a
    larger file is refused in one line, without waiting or reading it (format.open_regular)."""
    fd = open_regular(path, what)
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            raise FaError(f"{path}: {size} bytes is larger than a {what} can be ({limit >> 20} MB)")
        data = os.read(fd, limit + 1)
    except OSError as e:
        raise FaError(f"{path}: cannot read {what}: {e.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > limit:  # grown since
        raise FaError(f"{path}: larger than a {what} can be ({limit >> 20} MB)")
    return data


def _records_in(path: Path) -> list:
    """The list of records of a results file; anything else is refused in one line."""
    data = read_bounded(path)
    try:
        records = json.loads(data.decode())["records"]
        if not isinstance(records, list):
            raise TypeError
    except UnicodeDecodeError:  # a ValueError too: caught first, as it says something else
        raise FaError(f"{path}: {NOT_RESULTS} (not text)") from None
    except (ValueError, KeyError, TypeError):
        raise FaError(f"{path}: {NOT_RESULTS} (JSON with a list of records)") from None
    return records


def load(path: Path) -> list[dict]:
    """The records already in a results file, to extend it; none where it is missing or not a
    regular file (a device such as /dev/null, or a FIFO, is written in place and never read)."""
    if not path.is_file():
        return []
    return _records_in(path)


def check_extendable(path: Path | None) -> None:
    """Before any work: the results file can be written, and what it holds is a results file."""
    if path is not None:
        if check_output_path(path).in_place:  # an existing device or FIFO: never read (only /dev/null is taken)
            st, null = os.stat(path), os.stat(os.devnull)
            if (st.st_dev, st.st_ino) != (null.st_dev, null.st_ino):
                raise FaError(f"{path}: results file is {file_kind(st.st_mode)}, not a regular file (fa reads and "
                              f"extends it; {os.devnull} keeps nothing)", exit_code=ExitStatus.BAD_INPUT)
        load(path)


def save(path: Path, records: list[dict]) -> None:
    """Write the records as the whole results file, atomically."""
    with atomic_file(path) as f:
        f.write(json.dumps({"records": records}, indent=1).encode() + b"\n")


def append(path: Path, new: list[dict]) -> None:
    """Add records at the end of a results file (created if missing)."""
    save(path, load(path) + new)


def by_kind(paths: list[Path]) -> dict[str, list[dict]]:
    """Records of every kind from the files, in order, for fa report and fa compare; a file fa
    did not write, a record it does not know, or no records at all is an error."""
    found: dict[str, list[dict]] = {k: [] for k in KINDS}
    for path in paths:
        for r in _records_in(path):
            kind = kind_of(r) if isinstance(r, dict) else None
            if kind is None:
                raise FaError(f"{path}: a record fa does not know ({str(r)[:60]})")
            found[kind].append(r)
    if not any(found.values()):
        raise FaError("no records in " + ", ".join(map(str, paths)))
    return found


# Where a copy of the checkout is sent elsewhere (a GPU node that gets the files, with no .git or
# an older one), `make source-revision` writes the commit beside the Makefile first, and records
# take it from there.
REVISION_FILE = ".source-revision"


def _git(root: Path, *args: str) -> str | None:
    try:
        proc = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


@lru_cache(maxsize=1)
def source_revision() -> dict:
    """What fa and its programs were made from, stored in every record: the checkout's commit and
    whether its tracked files differed from it (dirty), read from the REVISION_FILE that `make
    source-revision` wrote for a copy sent elsewhere, else asked of git; an installed fa gives
    its version."""
    root = locations.checkout()
    if root is not None:
        # The file first: where it is, it was written for this copy of the tree, whose .git (if
        # it has one) may be older than the files.
        try:
            written = json.loads((root / REVISION_FILE).read_text())
            if isinstance(written.get("commit"), str) and isinstance(written.get("dirty"), bool):
                return {"commit": written["commit"], "dirty": written["dirty"], "from": REVISION_FILE}
        except (OSError, ValueError, AttributeError):
            pass
        commit, status = _git(root, "rev-parse", "HEAD"), _git(root, "status", "--porcelain", "--untracked-files=no")
        if commit and status is not None:
            return {"commit": commit.strip(), "dirty": bool(status.strip())}
    return {"version": __version__}


def revision_text(revisions: list[dict]) -> str:
    """The revisions of some records in a few words: 'commit 1a2b3c4', '... (dirty)', or several."""
    names = []
    for rev in revisions:
        name = (f"commit {rev['commit'][:7]}" + (" (dirty)" if rev.get("dirty") else "") if rev.get("commit")
                else f"fa {rev['version']}" if rev.get("version") else "an unrecorded revision")
        if name not in names:
            names.append(name)
    return ", ".join(names) if len(names) <= 3 else f"{len(names)} revisions"


def command_line() -> str:
    """The command that is running, as the user typed it (`fa ...`, however Python started it)."""
    first = "fa" if Path(sys.argv[0]).name in ("fa", "__main__.py") else sys.argv[0]
    return " ".join([first, *sys.argv[1:]])


def new_record(program: Program, target: Target, label: str | None, error: str | None, kind: str = "bench",
               launcher: Launcher | None = None, **fields) -> dict:
    """A results record, the one place they are made: what ran on what, where and when, and
    the machine it ran on (system.describe_where). `kind` says which command made it: bench,
    run, profile, ladder or sweep. A measured record adds wall_s, timing, tflops_process,
    tflops_kernel, max_err, verify_mode and passed (bench.measure); a failed one keeps `error`."""
    record = {
        "kind": kind, "program": program.name, "program_path": str(program.path), "input": target.name,
        "shape": {"B": target.shape.B, "N": target.shape.N, "d": target.shape.d}, "flops": target.shape.flops,
        "label": label, "device": devices.describe_first(), "host": platform.node(), "build": {},
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "command": command_line(),
        "error": error, "system": system.describe_where(launcher), "source": source_revision(),
    }
    record.update(fields)
    return record
