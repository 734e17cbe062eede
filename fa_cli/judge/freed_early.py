"""An ERROR whose program named the line of the call that failed (a CHECK macro's file and line
on stderr): where that call uses a buffer the same function freed on an earlier line that runs on
the way to it, and nothing allocated or assigned it again between, the free comes before a use.
The runtime's own words ("invalid argument", "an illegal memory access") say only that the pointer
was bad, not that it was freed. Said as an observation beside the tools, never in their place.
"""
from __future__ import annotations

import re

from .findings import Finding, Kind
from .leaving_early import SHOWN, code_lines
from .steps import Context, Step

# a plain pointer freed, `cudaFree(d_out)` or `cudaFree((void*)d_out)`: not a member or an element
FREE = re.compile(r"\b(?:cuda|hip)(?:Free|FreeHost|HostFree|FreeAsync)\s*\(\s*(?:\(\s*void\s*\*\s*\)\s*)?"
                  r"([A-Za-z_]\w*)\s*[,)]")
FUNCTION_START = re.compile(r"^[A-Za-z_].*\(")  # a top-level line that opens a function: the search stops there
CONDITIONAL = re.compile(r"\b(if|else|return|exit|goto|throw|catch|abort)\b")  # a free on a path that may not run
UNBRACED = re.compile(r"^\s*(?:(?:if|for|while)\s*\(.*\)|else)\s*$")  # `if (err)` alone: the next line is its body


def failed_line(ctx: Context) -> tuple[int, str] | None:
    """The line of the student's source the program's own words on stderr name (FILE:LINE), with
    the rest of those words (the runtime's error)."""
    if ctx.source is None:
        return None
    for said in ctx.run_stderr.splitlines():
        if m := re.search(rf"(?:^|[\s/]){re.escape(ctx.source.name)}:(\d+)\b:?\s*(.*)", said):
            return int(m.group(1)), m.group(2).strip()
    return None


def failed_call(ctx: Context) -> tuple[int, str, list[str]] | None:
    """(its line, the runtime's words, the source's lines) of the call the program's own check named,
    where that line is in the source."""
    number, error = failed_line(ctx)
    try:
        lines = code_lines(ctx.source)
    except OSError:
        return None
    return (number, error, lines) if 0 < number <= len(lines) else None


def uses(text: str, name: str) -> bool:
    """The pointer itself on a line, not a member, an element or a name that holds it."""
    return re.search(rf"(?<![\w.>]){re.escape(name)}\b(?!\s*(?:\.|->|\[))", text) is not None


def given_again(text: str, name: str) -> bool:
    """An allocation or assignment of the pointer: its address passed to a call, or `name = ...`."""
    return re.search(rf"&\s*{re.escape(name)}\b|(?<![\w.>]){re.escape(name)}\s*=[^=]", text) is not None


def without_inner_blocks(text: str) -> str:
    """A line with its `{ ... }` parts taken out: what runs on it at the line's own depth."""
    while (shorter := re.sub(r"\{[^{}]*\}", " ", text)) != text:
        text = shorter
    return text


def freed_before(lines: list[str], number: int) -> tuple[str, int] | None:
    """(name, line of its free) for a pointer the line `number` uses that an earlier line of the
    same function freed on the path to it (not inside a block closed before it, not on a branch),
    with no allocation or assignment of it after the free, the failing line included."""
    depth = 0  # blocks closed between the line looked at and the failing line
    for at in range(number - 1, 0, -1):
        text = lines[at - 1]
        if FUNCTION_START.match(text):
            return None
        flat = without_inner_blocks(text)
        here = depth + flat.count("}")
        depth = max(0, here - flat.count("{"))
        before = lines[at - 2] if at > 1 else ""
        if here or CONDITIONAL.search(flat) or UNBRACED.match(before):
            continue
        for m in FREE.finditer(flat):
            name = m.group(1)
            after = [flat[m.end():], *lines[at:number]]
            if uses(lines[number - 1], name) and not any(given_again(t, name) for t in after):
                return name, at
    return None


class FreedBeforeUse(Step):
    """An ERROR at a line of the program's own check whose call uses a buffer freed before it."""

    name = "a buffer freed before the call that failed"

    def applies(self, ctx: Context) -> bool:
        return ctx.verdict == "ERROR" and ctx.signal is None and failed_line(ctx) is not None

    def run(self, ctx: Context) -> list[Finding]:
        if (call := failed_call(ctx)) is None or (found := freed_before(call[2], call[0])) is None:
            return []
        number, error, lines = call
        name, freed = found
        return [Finding(Kind.OBSERVED, [
            f"the call that failed, {ctx.source.name} line {number} (`{lines[number - 1].strip()[:SHOWN]}`"
            f"{': ' + error if error else ''}), uses {name}, which line {freed} freed before it on the way there "
            f"(`{lines[freed - 1].strip()[:SHOWN]}`), with nothing allocating or assigning it again between: a "
            f"buffer used after it was freed (free it after its last use)"], dict(line=number, freed_at=freed))]
