"""A program whose own check of its files is what fails: it refuses its input in its own words
where the input is well formed (an end-of-file test after reading exactly the data, a size computed
in another unit, a header read in another order: fa checks the input as the course's format has it
and says the two side by side), or it ends with an error after writing a whole, right output.
"""
from __future__ import annotations

import re

from ..cases.format import FormatError, read_header
from .diagnose import quoted, source_lines
from .findings import Finding, Kind
from .steps import Context, Step

# a program's own complaint about its input file: the file's length, header or end, its opening or
# reading, or the header's values (B, N or d refused: "d must be 32 or 64")
REFUSAL = re.compile(r"\b(file|input)\b.*\b(long|longer|short|shorter|size|bytes|header|truncated|format)\b"
                     r"|\b(too (long|short)|short (read|header)|end of file|eof)\b"
                     r"|\b(cannot|can't|could not|couldn't|failed to|unable to) (open|read)\b"
                     r"|\b(?-i:[BNdD])\b.*\b(must be|should be|unsupported|not supported|invalid|out of range)\b",
                     re.IGNORECASE)
# the runtime's words, not the file's: a CUDA or HIP error that prints the input's name
RUNTIME = re.compile(r"cuda|hip[A-Z_]|\bhip\b|illegal|launch|device|kernel", re.IGNORECASE)
# the lines shown: the first check of the file's end or size, then the first read of it
FILE_CHECKS = (r"feof|\.eof\s*\(|ftell|st_size|\bstat\s*\(|tellg|seekg|fseek", r"fread|\.read\s*\(|\bread\s*\(")


def complaint(ctx: Context) -> str | None:
    """The program's own line on stderr that names its input file and refuses it."""
    if ctx.case_path is None:
        return None
    name = ctx.case_path.name
    for line in ctx.run_stderr.splitlines():
        words = line.replace(str(ctx.case_path), "").replace(name, "")  # the path's own letters are no words
        if name in line and not line.startswith("fa-") and REFUSAL.search(words) and not RUNTIME.search(words):
            return line.strip()
    return None


class RefusedInput(Step):
    """An ERROR whose program said, in its own words, that its input file is wrong; the later steps
    still run (a refusal fa cannot tell from another failure that prints the file's name)."""

    name = "a well-formed input refused"

    def applies(self, ctx: Context) -> bool:
        return ctx.verdict == "ERROR" and ctx.signal is None and complaint(ctx) is not None

    def run(self, ctx: Context) -> list[Finding]:
        said = complaint(ctx)
        try:
            shape = read_header(ctx.case_path)
        except FormatError as e:  # the input itself is wrong: the program was right to refuse it
            return [Finding(Kind.OBSERVED, [f"the program refused its input, and fa finds it malformed too: {e}"])]
        lines = [f"measured: the program refused its input ({said!r}), yet the input is well formed: its header "
                 f"says B={shape.B}, N={shape.N}, d={shape.d} and the file holds 12 + 12*B*N*d = {shape.input_bytes} "
                 "bytes exactly, as the course's format has it; look at how the program opens, reads and checks "
                 "its input (the size it expects, the header's order, its test of B, N or d, an end-of-file test "
                 "after reading exactly the data)"]
        shown = (refusing_line(ctx.source, said, ctx.case_path) + source_lines(ctx.source, FILE_CHECKS)
                 if ctx.source else [])
        if shown:
            lines.append(f"lines that read or check the file in {ctx.source.name}: {quoted(list(dict.fromkeys(shown)))}")
        return [Finding(Kind.MEASURED, lines, dict(refused_input=said))]


def refusing_line(source, said: str, path) -> list[tuple[int, str]]:
    """The source line that holds the refusal's own words (its longest part between colons, the
    input's path left out): the check that refused, first of the lines shown."""
    words = said.replace(str(path), "").replace(path.name, "")
    message = max(re.split(r":\s*", words), key=len).strip()
    return source_lines(source, re.escape(message[:40]), 1) if len(message) >= 6 else []


class RightBeforeExit(Step):
    """An ERROR whose output file fa found whole and right (verdict.written_before_exit says so under
    the case): the attention is not what fails, so no probe runs; the exit status is the finding."""

    name = "a right output, then an exit status of the program's own"

    def applies(self, ctx: Context) -> bool:
        return ctx.verdict == "ERROR" and ctx.signal is None and ctx.right_before_exit

    def run(self, ctx: Context) -> list[Finding]:
        ctx.ended = True
        said = [l for l in ctx.run_stderr.splitlines() if l.strip() and not l.startswith("fa-")][-1:]
        words = re.sub(r"\S*/\S*", "", said[0]) if said else ""  # paths (the output's, a scratch one) are no words
        shown = refusing_line(ctx.source, words, ctx.case_path) if words and ctx.source and ctx.case_path else []
        if shown:  # the line that prints it, and the one above it (its test, most often)
            n = shown[0][0]
            above = ctx.source.read_text(errors="replace").splitlines()[n - 2].strip() if n > 1 else ""
            shown = ([(n - 1, above if len(above) <= 80 else above[:77] + "...")] if above else []) + shown
            where = f"the line that says it in {ctx.source.name}, and the one above it: {quoted(shown)}"
        else:
            where = "no line of the source prints its last words on stderr as fa reads them" if ctx.source else \
                "fa has no source here to show the line that says them"
        return [Finding(Kind.MEASURED, [f"measured: the output right, the exit status not: {where}"],
                        dict(right_before_exit=True))]
