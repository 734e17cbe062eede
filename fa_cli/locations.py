"""Where fa finds its files, and where it writes the ones it makes.

Two ways to have fa, one set of answers:
  a checkout     the repository itself: testcases/, the sources and their Makefile, and bin/
                 for the programs it builds;
  an installed   a wheel (pip install .): the manifest, the shipped cases t01..t10 and the
  package        programs' sources are package data (fa_cli/testcases, fa_cli/sources; see
                 pyproject.toml); named programs are built from a copy of those sources in the
                 cache directory, since site-packages is no place to build in.
Generated inputs (suite cases t11..t30, bench shapes) and those builds go to the cache
directory: FA_CACHE if set, else the platform's user cache directory (~/.cache/fa on Linux).
Outputs of programs that run on other machines (--launcher slurm) go to a work directory under
the current directory, .fa-slurm/, which the cluster's nodes share (shared_workdir).
"""
from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import os
import re
import secrets
import shutil
import stat
import tempfile
from importlib import resources
from pathlib import Path
from typing import Iterator

import platformdirs

from . import settings
from .errors import FaError
from .files import remove_leftovers

PACKAGE = Path(__file__).resolve().parent
SHARED_WORK = Path(".fa-slurm")  # under the current directory, which compute nodes share


def checkout() -> Path | None:
    """The repository this fa runs from, or None for an installed package."""
    root = PACKAGE.parent
    if (root / "Makefile").is_file() and (root / "testcases" / "manifest.json").is_file():
        return root
    return None


def package_data(name: str) -> Path:
    """A folder shipped inside the installed package (wheels install as plain files)."""
    return Path(str(resources.files("fa_cli").joinpath(name)))


def testcases() -> Path:
    """The folder holding manifest.json and the shipped cases with their expected outputs."""
    root = checkout()
    return root / "testcases" if root else package_data("testcases")


def cache_dir() -> Path:
    """Generated inputs and builds from an installed package's sources (not created here). An
    existing one must be a directory of the user's own: in another user's (a shared FA_CACHE)
    anyone could plant the inputs, expected outputs and programs fa would trust, unless
    FA_SHARED_CACHE=1 says that is wanted."""
    named = settings.cache_override()
    path = Path(named or platformdirs.user_cache_dir("fa", appauthor=False))
    what = f"FA_CACHE={named}" if named else f"the cache directory {path}"
    try:
        st = path.stat()
    except FileNotFoundError:
        return path
    except OSError as e:
        raise FaError(f"{what}: {e.strerror}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise FaError(f"{what} is not a directory")
    if st.st_uid != os.geteuid() and not settings.shared_cache_trusted():
        raise FaError(f"{what} belongs to another user, who could plant the files fa would use: take a cache of "
                      "your own, or set FA_SHARED_CACHE=1 to trust it")
    return path


def sources() -> Path:
    """The folder holding fa's sources (src_cuda, src_hip, src_common): the checkout's, or the
    installed package's own copy, read in place (source_tree() is where they may be built)."""
    return checkout() or package_data("sources")


def source_tree() -> Path:
    """A folder with the Makefile and the sources, where `make cpu|cuda|hip|hip-cuda` may run."""
    root = checkout()
    if root:
        return root
    shipped = package_data("sources")
    files = sorted(p for p in shipped.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    digest = hashlib.sha256()
    for p in files:
        digest.update(str(p.relative_to(shipped)).encode() + b"\0" + p.read_bytes())
    # One build folder per version of the sources: an upgrade of fa never runs stale programs.
    tree = cache_dir() / "build" / digest.hexdigest()[:12]
    if not (tree / "Makefile").is_file():
        staging = tree.with_name(tree.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        for p in files:
            target = staging / p.relative_to(shipped)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(p, target)
        try:
            staging.rename(tree)
        except OSError:  # another fa got there first: its copy is the same
            shutil.rmtree(staging, ignore_errors=True)
    return tree


@contextlib.contextmanager
def shared_workdir(needed: bool = True) -> Iterator[Path | None]:
    """A fresh directory for outputs and job files that programs on other machines (cluster
    nodes) must reach: .fa-slurm/<date-time>/ under the current directory, never a node-local
    /tmp. It is removed on the way out however that comes (done, an error, Ctrl-C, or SIGTERM
    and SIGHUP, which fa raises as exceptions), and .fa-slurm/ with it once no other run uses it.
    Not `needed` (programs run here, each command writing to a temporary directory): None."""
    if not needed:
        yield None
        return
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    path = (SHARED_WORK / stamp).resolve()
    path.mkdir(parents=True)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        try:
            path.parent.rmdir()
        except OSError:
            pass  # another run's directory is still there


SCRATCH = re.compile(r"^fa-[a-z]+-(\d+)-[0-9a-f]{8}$")  # fa-run-PID-XXXXXXXX


@contextlib.contextmanager
def scratch(kind: str, parent: Path | None = None) -> Iterator[Path]:
    """A private folder for one command's temporary files (fa-KIND-PID-XXXXXXXX in the temporary
    directory, or in `parent`), removed on the way out; one left by an fa killed with -9 is
    removed by the next one here, once its process is gone."""
    parent = Path(parent or tempfile.gettempdir())
    remove_stale_scratch(parent)
    path = parent / f"fa-{kind}-{os.getpid()}-{secrets.token_hex(4)}"
    path.mkdir(mode=0o700)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def remove_stale_scratch(parent: Path) -> None:
    """Scratch folders of this user's fa processes that no longer exist."""
    remove_leftovers(parent, SCRATCH)
