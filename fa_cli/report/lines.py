"""fa's own words folded to the terminal: notes and errors on stderr, paragraphs and tables on
stdout. The width is COLUMNS where it is set, else the terminal's where the stream is one; in a
file or a pipe a message stays whole on one line (a log to grep) and a table as wide as it needs.
"""
from __future__ import annotations

import shutil
import sys
import textwrap

import click

from .. import settings


def fitting_width(err: bool = False) -> int | None:
    """The width to fit, or None: written whole (a file or a pipe, with no COLUMNS)."""
    if columns := settings.columns():
        return columns
    stream = sys.stderr if err else sys.stdout
    try:
        return shutil.get_terminal_size().columns if stream.isatty() else None
    except (AttributeError, ValueError, OSError):
        return None


def fold(text: str, width: int | None) -> str:
    """Each line of text on lines of at most width characters, broken at spaces, continued under
    its start (four spaces in, past an "fa: " prefix; two otherwise); a word longer than the width
    goes whole on a line of its own, never cut."""
    if not width:
        return text
    out = []
    for line in text.split("\n"):
        if len(line) <= width:
            out.append(line)
            continue
        body = line.lstrip(" ")
        lead = len(line) - len(body)
        hang = " " * (lead + (4 if body.startswith("fa: ") else 2))
        out.append(textwrap.fill(line, width, subsequent_indent=hang, break_long_words=False,
                                 break_on_hyphens=False, replace_whitespace=False))
    return "\n".join(out)


def echo(text: str = "", err: bool = False, nl: bool = True) -> None:
    """click.echo of fa's own words, folded to the width (fitting_width)."""
    click.echo(fold(text, fitting_width(err)), err=err, nl=nl)
