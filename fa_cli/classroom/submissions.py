"""A class's submissions: found in a folder of student folders (one folder a student, named as the
course site exports it) or a site's zip export (unpacked), copied once into the class folder with the sha256 of every file, so that
what is judged is what was handed in, and a re-run knows what changed."""
from __future__ import annotations

import csv
import hashlib
import json
import os
import re
import shutil
import subprocess
import zipfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import FaError
from ..files import atomic_file
from ..programs.processes import run_tool

SOURCES = ("hw4.cu", "hw4.hip", "hw4.cpp")  # what is judged, each on its platform
KEPT = ("Makefile", "makefile", "GNUmakefile")  # copied beside them: the course builds with it
FILE_LIMIT = 4 << 20  # a file larger than this is not a source or a Makefile: not copied
PLATFORM = {".cu": "cuda", ".hip": "hip", ".cpp": "cpu"}
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@+-]{0,99}$")


@dataclass(frozen=True)
class Submission:
    student: str
    folder: Path              # its copy in the class folder
    files: dict[str, str]     # name -> sha256, as copied
    digest: str               # of all its files: what a record is valid for

    def sources(self) -> list[Path]:
        return [self.folder / name for name in SOURCES if name in self.files]


def unpacked(export: Path, class_folder: Path) -> Path:
    """A course site's zip export as a folder of student folders (CLASS/export): an entry under a
    folder is that folder's student's (Moodle: a folder a student); an entry at the top, the
    student its name begins with, up to the first underscore (Canvas: login_id_..._hw4.cu). Only
    sources and Makefiles are taken, each under FILE_LIMIT, written by their base name alone: no
    entry's path can lead out of the class folder. A student's name keeps letters, digits and
    ._@+- (anything else becomes _)."""
    try:
        archive = zipfile.ZipFile(export)
    except (OSError, zipfile.BadZipFile) as e:
        raise FaError(f"{export}: not a zip file a course site exports ({e})") from None
    folder = class_folder / "export"
    shutil.rmtree(folder, ignore_errors=True)
    with archive:
        for entry in archive.infolist():
            parts = [p for p in entry.filename.replace("\\", "/").split("/") if p not in ("", ".", "..")]
            if entry.is_dir() or not parts or entry.file_size > FILE_LIMIT:
                continue
            name = next((n for n in (*SOURCES, *KEPT) if parts[-1] == n or parts[-1].endswith("_" + n)), None)
            if name is None:
                continue
            student = parts[0] if len(parts) > 1 else parts[-1].split("_", 1)[0]
            student = re.sub(r"[^A-Za-z0-9._@+-]", "_", student).lstrip(".") or "unnamed"
            (folder / student).mkdir(parents=True, exist_ok=True)
            (folder / student / name).write_bytes(archive.read(entry)[:FILE_LIMIT])
    return folder


def fetched(listing: Path, class_folder: Path, say=lambda line: None) -> Path:
    """A list of git repositories at a commit (CSV: repository,path,commit; lines starting with #
    and a header row skipped) as a folder of student folders (CLASS/export): each repository's
    file at its commit (named hw4 and its suffix) and the Makefile beside it there, if any. The
    student is the repository's owner (owner/name, fetched from GitHub) or its folder's name (a
    URL or a path). A row that cannot be fetched is said, and left out."""
    folder = class_folder / "export"
    shutil.rmtree(folder, ignore_errors=True)
    rows = [r for r in csv.reader(line for line in listing.read_text().splitlines() if not line.startswith("#"))
            if r and r[0].strip() != "repository"]
    for row in rows:
        if len(row) != 3:
            raise FaError(f"{listing}: {','.join(row)}: a row is repository,path,commit")
        repository, path, commit = (x.strip() for x in row)
        remote, student = _remote_and_student(repository)
        while (folder / student).exists():
            student += "+"
        wanted = {f"hw4{Path(path).suffix}": path, "Makefile": str(Path(path).parent / "Makefile")}
        got = _files_at(remote, commit, wanted, class_folder / "export.git")
        if isinstance(got, str):
            say(f"{student}: {repository} at {commit[:12]} not fetched: {got}")
            continue
        (folder / student).mkdir(parents=True)
        for name, data in got.items():
            (folder / student / name).write_bytes(data[:FILE_LIMIT])
    return folder


def _remote_and_student(repository: str) -> tuple[str, str]:
    """Where to fetch from, and whose it is: owner/name is GitHub's and its owner's; a URL or a
    path is fetched as it is, named by its last part."""
    elsewhere = "://" in repository or repository.startswith(("/", ".", "~")) or Path(repository).exists()
    parts = repository.rstrip("/").split("/")
    remote = repository if elsewhere else f"https://github.com/{repository}.git"
    name = parts[-1].removesuffix(".git") if elsewhere else parts[0]
    return remote, re.sub(r"[^A-Za-z0-9._@+-]", "_", name).lstrip(".") or "unnamed"


def _files_at(remote: str, commit: str, wanted: dict[str, str], scratch: Path) -> dict[str, bytes] | str:
    """The files (name -> path in the repository) at the commit, those there; else git's reason."""
    shutil.rmtree(scratch, ignore_errors=True)
    git = ["git", "-C", str(scratch)]
    steps = [["git", "init", "-q", str(scratch)], [*git, "fetch", "-q", "--depth", "1", remote, commit]]
    for step in steps:
        proc = run_tool(step, env={**os.environ, "GIT_TERMINAL_PROMPT": "0"})
        if proc.returncode != 0:
            return (proc.stderr.strip().splitlines() or [f"git exited {proc.returncode}"])[-1]
    got = {}
    for name, path in wanted.items():
        proc = subprocess.run([*git, "show", f"FETCH_HEAD:{path.lstrip('./')}"], capture_output=True)
        if proc.returncode == 0:
            got[name] = proc.stdout
    shutil.rmtree(scratch, ignore_errors=True)
    return got if any(n != "Makefile" for n in got) else f"no {next(iter(wanted.values()))} at that commit"


def found(where: Path, besides: Path | None = None) -> list[tuple[str, Path]]:
    """(student, folder) for each student folder under `where` (but `besides`, the class folder),
    in name order; a name that is not a plain one (a space, a slash, a leading dot) is refused, so
    that every path fa makes of it stays in the class folder."""
    if not where.is_dir():
        raise FaError(f"{where}: not a folder of student folders")
    students = []
    for folder in sorted(p for p in where.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if besides is not None and folder.resolve() == besides.resolve():
            continue  # the class folder itself, made inside the submissions' folder
        if not NAME.match(folder.name):
            raise FaError(f"{folder}: a student folder's name must be letters, digits and ._@+- (rename it)")
        students.append((folder.name, folder))
    if not students:
        raise FaError(f"{where}: no student folders in it")
    return students


def copied(student: str, source_folder: Path, class_folder: Path) -> Submission:
    """The student's sources and Makefile copied into CLASS/submissions/STUDENT (regular files
    only, no links followed), with their sha256s (submission.json)."""
    folder = class_folder / "submissions" / student
    wanted = [source_folder / n for n in (*SOURCES, *KEPT)]
    files = {p.name: p for p in wanted if p.is_file() and not p.is_symlink() and p.stat().st_size <= FILE_LIMIT}
    fresh = folder.with_name(folder.name + ".new")
    shutil.rmtree(fresh, ignore_errors=True)
    fresh.mkdir(parents=True)
    sums = {}
    for name, path in sorted(files.items()):
        data = path.read_bytes()
        (fresh / name).write_bytes(data)
        sums[name] = hashlib.sha256(data).hexdigest()
    digest = hashlib.sha256(json.dumps(sums, sort_keys=True).encode()).hexdigest()
    with atomic_file(fresh / "submission.json") as f:
        f.write(json.dumps({"student": student, "files": sums, "sha256": digest}, indent=1).encode())
    if folder.exists():
        shutil.rmtree(folder)
    fresh.rename(folder)
    return Submission(student, folder, sums, digest)
