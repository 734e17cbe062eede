"""The C preprocessor's tests of a student's source, read without a compiler: the macros it tests
with #ifndef, #ifdef or defined() (in it and in the files it includes with quotes, beside it),
and the value of each one's first #define. fa sweep --program hw4.cu sweeps those macros.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MAX_INCLUDES = 32  # quoted includes followed from the source, at most


def strip_comments(text: str) -> str:
    """C/C++ source without its comments (each a space; a block comment keeps its newlines) and
    with backslash-newline continuations joined; string and character literals are kept."""
    text = text.replace("\\\r\n", "").replace("\\\n", "")
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c == "/" and text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
            out.append(" ")
        elif c == "/" and text.startswith("/*", i):
            end = text.find("*/", i + 2)
            comment = text[i:n if end < 0 else end + 2]
            out.append(" " + "\n" * comment.count("\n"))
            i += len(comment)
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


DIRECTIVE = re.compile(r"^[ \t]*#[ \t]*(ifndef|ifdef|elifndef|elifdef|if|elif|define|include)\b(.*)$", re.M)
DEFINED = re.compile(r"\bdefined\s*(?:\(\s*([A-Za-z_]\w*)\s*\)|([A-Za-z_]\w*))")


@dataclass
class Macros:
    """What a source tests with the preprocessor, and the value it defines each to by default."""
    tested: set[str]
    defaults: dict[str, str]


def tested_macros(source: Path) -> Macros:
    """The macros a source (and the files it includes with quotes, beside it) tests with #ifndef,
    #ifdef or defined(), comments left out; with the value of the first #define of each."""
    found = Macros(set(), {})
    todo, seen = [source], set()
    while todo and len(seen) < MAX_INCLUDES:
        path = todo.pop(0)
        key = path.resolve()
        if key in seen or not path.is_file():
            continue
        seen.add(key)
        text = strip_comments(path.read_text(errors="replace"))
        for directive, rest in DIRECTIVE.findall(text):
            if directive in ("ifndef", "ifdef", "elifndef", "elifdef"):
                if m := IDENTIFIER.match(rest.strip()):
                    found.tested.add(m.group())
            elif directive in ("if", "elif"):
                found.tested.update(a or b for a, b in DEFINED.findall(rest))
            elif directive == "define":
                if m := re.match(r"\s+([A-Za-z_]\w*)(?!\()\s*(.*)", rest):
                    found.defaults.setdefault(m.group(1), m.group(2).strip())
            elif m := re.match(r'\s*"([^"]+)"', rest):
                todo.append(path.parent / m.group(1))
    found.defaults = {k: v for k, v in found.defaults.items() if k in found.tested}
    return found
