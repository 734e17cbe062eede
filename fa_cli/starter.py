"""fa init: a student's starting folder for the homework.

Copies fa_cli/starter/ (hw4.cu and hw4.hip with the course's input and output done and a plain,
correct kernel; the course's example Makefile; a short README) into a folder. The files are
self-contained: none of fa's headers. Nothing is overwritten: if any of them exists already,
nothing is written at all.
"""
from __future__ import annotations

from importlib import resources
from pathlib import Path

from .errors import ExitStatus, FaError

FILES = ("hw4.cu", "hw4.hip", "Makefile", "README.md")


def create(folder: Path) -> list[Path]:
    """Write the starter files into folder (made if missing); returns their paths."""
    if folder.exists() and not folder.is_dir():
        raise FaError(f"{folder}: exists and is not a folder", exit_code=ExitStatus.BAD_INPUT)
    targets = [folder / name for name in FILES]
    present = [str(p) for p in targets if p.exists() or p.is_symlink()]
    if present:
        raise FaError(f"{', '.join(present)}: already there; fa init overwrites nothing (choose another folder)",
                      exit_code=ExitStatus.BAD_INPUT)
    folder.mkdir(parents=True, exist_ok=True)
    source = resources.files("fa_cli") / "starter"
    for name, target in zip(FILES, targets):
        with open(target, "x") as f:  # exclusive: never replaces a file that appeared meanwhile
            f.write((source / name).read_text())
    return targets
