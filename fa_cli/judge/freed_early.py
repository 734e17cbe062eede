"""An ERROR whose program named the line of the call that failed (a CHECK macro's file and line
on stderr): where that call uses a buffer the same function freed on an earlier line, and nothing
allocated it again between, the free comes before a use. The runtime's own words ("invalid
argument", "an illegal memory access") say only that the pointer was bad, not that it was freed.
"""
from __future__ import annotations

import re
from pathlib import Path

from .findings import Finding, Kind
from .leaving_early import SHOWN, code_lines
from .steps import Context, Step

FREE = re.compile(r"\b(?:cuda|hip)(?:Free|FreeHost|HostFree|FreeAsync)\s*\(\s*(\w+)")
ALLOC = r"\b(?:cuda|hip)(?:Malloc\w*|HostAlloc|MallocHost)\s*\(\s*(?:\([^)]*\)\s*)?&\s*{name}\b|\b{name}\s*=[^=]"
FUNCTION_START = re.compile(r"^[A-Za-z_].*\(")  # a top-level line that opens a function: the search stops there


def failed_line(ctx: Context) -> tuple[int, str] | None:
    """The line of the student's source the program's own words on stderr name (FILE:LINE), with
    the rest of those words (the runtime's error)."""
    if ctx.source is None:
        return None
    for said in ctx.run_stderr.splitlines():
        if m := re.search(rf"(?:^|[\s/]){re.escape(ctx.source.name)}:(\d+)\b:?\s*(.*)", said):
            return int(m.group(1)), m.group(2).strip()
    return None


def freed_before(lines: list[str], number: int) -> tuple[str, int] | None:
    """(name, line of its free) for a name the line `number` uses that an earlier line of the same
    function freed, with no allocation or assignment of it between."""
    used = set(re.findall(r"\b[A-Za-z_]\w*\b", lines[number - 1]))
    for at in range(number - 1, 0, -1):
        text = lines[at - 1]
        if FUNCTION_START.match(text):
            return None
        for name in FREE.findall(text):
            if name in used and not any(re.search(ALLOC.format(name=re.escape(name)), between)
                                        for between in lines[at:number - 1]):
                return name, at
    return None


class FreedBeforeUse(Step):
    """An ERROR at a line of the program's own check whose call uses a buffer freed before it."""

    name = "a buffer freed before the call that failed"

    def applies(self, ctx: Context) -> bool:
        return ctx.verdict == "ERROR" and ctx.signal is None and failed_line(ctx) is not None

    def run(self, ctx: Context) -> list[Finding]:
        number, error = failed_line(ctx)
        try:
            lines = code_lines(Path(ctx.source))
        except OSError:
            return []
        if not 0 < number <= len(lines) or (found := freed_before(lines, number)) is None:
            return []
        name, freed = found
        return [Finding(Kind.MEASURED, [
            f"the call that failed, {ctx.source.name} line {number} (`{lines[number - 1].strip()[:SHOWN]}`"
            f"{': ' + error if error else ''}), uses {name}, which line {freed} freed before it "
            f"(`{lines[freed - 1].strip()[:SHOWN]}`), with nothing allocating it again between: a buffer used "
            f"after it was freed (free it after its last use)"], dict(line=number, freed_at=freed))]
