"""A GPU program that passes with an error no float32 program makes at its size: a lower precision
somewhere (an input copied as fp16, tiles or products in half or tf32). Measured on the course's
cases: float32 programs stay under 2e-5 up to N = 4096 (24 students' programs, fa's own about
1e-6) and reach 3.4e-4 only at N = 32768; a value of about 3 rounded to a format with an 11-bit
significand (fp16, tf32) is off by up to 1.5e-3. Said as a warning, with the source's lines of
such formats: the error grows with the rows, and the course's larger cases may pass its limit.
"""
from __future__ import annotations

from .diagnose import quoted, source_lines
from .findings import Finding, Kind
from .probes.precision import LOOK
from .race_check import applies as students_gpu_program
from .steps import Context, Step

FLOAT32_AT_MOST = 2e-5  # the largest error of a float32 program on a case of N <= MOST_N (measured: above)
MOST_N = 4096
LOWER = 50  # times FLOAT32_AT_MOST: an error past it is no float32 rounding (1e-3)


class ErrorOfAPass(Step):
    """The largest error of the passed cases of N <= MOST_N, against what float32 gives there."""

    name = "the size of a passing program's error"

    def applies(self, ctx: Context) -> bool:
        return students_gpu_program(ctx.program) and worst_pass(ctx.results) is not None

    def run(self, ctx: Context) -> list[Finding]:
        err, case = worst_pass(ctx.results)
        said = (f"passes {case}, but its largest error there, {err:.2g}, is {err / FLOAT32_AT_MOST:.0f} times the most "
                f"a float32 program makes at N <= {MOST_N} ({FLOAT32_AT_MOST:g}, measured on the course's cases): "
                "as large as a lower precision's rounding (fp16 or tf32: up to 1.5e-3 on values near 3), or a formula "
                "a little off; such an error grows with the rows, and a larger case may pass the limit")
        scaled = [f.fields["logit_factor"] for f in ctx.findings if "logit_factor" in f.fields]
        if scaled:  # measured on a failing case: the scale alone gives errors of this order
            said += (f"; the scores of a failing case were measured scaled by {scaled[0]:.6f} times the right scale "
                     "(above)")
            return [Finding(Kind.WARNING, [said], dict(error=err, case=case))]
        shown = source_lines(ctx.source, LOOK) if ctx.source else []
        if shown:
            said += f"; lines with a lower precision in {ctx.source.name}: {quoted(shown)}"
        return [Finding(Kind.WARNING, [said], dict(error=err, case=case))]


def worst_pass(results: list) -> tuple[float, str] | None:
    """(error, case) of the passed case of N <= MOST_N with the largest error, where it is past
    LOWER times FLOAT32_AT_MOST; None else."""
    errors = [(r.check.max_err, r.target.name) for r in results
              if r.verdict == "PASS" and r.check is not None and r.target.shape.N <= MOST_N]
    worst = max(errors, default=None)
    return worst if worst and worst[0] > LOWER * FLOAT32_AT_MOST else None
