"""fa measures what a failing program computes: probe inputs designed to isolate one part of the
computation, and what the program wrote on them (docs/diagnosis.md).

The steps (STEPS), in order; each is a Probe (step.py): a question, its inputs, its measurement
and its words. A step runs where it applies (from what the earlier steps measured, Context.facts)
and while the time budget lasts; once a step has named a mechanism from its measurements, the
later readings stand aside. Where none names one, Summary says what was measured.

  ProbeRuns          the case's Q, K, V at a small N (same remainders modulo the tiles), twice:
                     the same output each time? still wrong?             weights.py, design.py
  Wavefronts         hw4.hip: right with 32-lane wavefronts, wrong with 64?   experiments.py
  Precision          a lower precision's rounding (fp16, bf16, tf32) of a part   precision.py
  OutputLayout       the right values in other places: the mapping        layout.py
  InputReading       attention of other elements of the input: which index formula   indexing.py
  LinearMap          the output as a linear map of V, read whole in one run: weights by
                     column, scores by dim, values moved, a band of keys  linear_map.py
  ScoreInputs        the scores read back with Q one-hot by dim and K coded: which element of
                     K each term took, by formula                         score_inputs.py
  ReadWeights        W from runs with one-hot V; is the output W V?       weights.py
  RowsNotWritten, OtherRows, KeysWithoutWeight   W against P              readings.py
  SoftmaxSteps       the online softmax with one step written otherwise, any tile  softmax_steps.py
  Factors            W / P per row, per key tile; log W against the logits   factors.py
  NotFinite, BatchAlone, WholeTiles   the probe again with one thing changed   experiments.py
  Summary            W against P in numbers, where nothing was pinned down  readings.py
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

from ...programs.programs import Launcher, Program
from ..findings import Finding, Kind
from ..tool_logs import Budget
from . import design, picture
from .experiments import BatchAlone, NotFinite, Wavefronts, WholeTiles
from .indexing import InputReading
from .layout import OutputLayout
from .linear_map import LinearMap
from .precision import Precision
from .factors import Factors
from .readings import KeysWithoutWeight, OtherRows, RowsNotWritten, Summary
from .score_inputs import ScoreInputs
from .softmax_steps import SoftmaxSteps
from .step import Context, Probe
from .weights import ProbeRuns, ReadWeights

STEPS: tuple[Probe, ...] = (ProbeRuns(), Wavefronts(), NotFinite(), Precision(), OutputLayout(), InputReading(),
                            LinearMap(), ScoreInputs(), ReadWeights(), RowsNotWritten(), OtherRows(), KeysWithoutWeight(),
                            SoftmaxSteps(), Factors(), BatchAlone(), WholeTiles(), Summary())
MIN_STEP_S = 1.0  # a step is started only with this much of the budget left


def measure(program: Program, input_path: Path, shape, case_label: str, tol: float, launcher: Launcher | None,
            work: Path, budget: Budget, say: Callable[[str], None], kind: str = "cpu",
            picture_path: Path | None = None, steps: tuple[Probe, ...] = STEPS) -> list[Finding]:
    """Every step that applies to this failing case, in order, within the budget."""
    ctx = Context(program, launcher, work, budget, say, tol, design.from_case(input_path, shape, case_label),
                  case_label, case_path=input_path, case_shape=shape, kind=kind)
    found: list[Finding] = []
    for step in steps:
        if ctx.facts.get("stop"):
            break
        if not step.applies(ctx):
            continue
        if budget.left < MIN_STEP_S:
            found.append(Finding(Kind.MISSING_TOOL, [f"probe: out of time before {step.name}"]))
            break
        say(f"why {case_label}: probe: {step.name} ({budget.used:.0f} s of {budget.seconds:g} s)")
        try:
            found += step.run(ctx)
        except Exception as e:  # fa's own fault: said as such, the verdict and the other steps stand
            found.append(Finding(Kind.MISSING_TOOL, [f"probe: {step.name} stopped on an error of fa's own "
                                                     f"({type(e).__name__}: {e}); the other steps went on"]))
    if picture_path is not None and "W" in ctx.facts:
        found += drawn(ctx, picture_path)
    return found


def drawn(ctx: Context, path: Path) -> list[Finding]:
    """The picture of W against P, for the first batch the probe got wrong."""
    wrong = ~(np.abs(ctx.facts["out"] - ctx.facts["true"]) <= ctx.tol)
    batch = int(np.argmax(wrong.any(axis=(1, 2))))
    try:
        picture.draw(ctx.facts["W"], ctx.facts["P"], batch, ctx.probe.label, path)
    except OSError as e:
        return [Finding(Kind.MISSING_TOOL, [f"picture of W against P not written: {e}"])]
    return [Finding(Kind.OBSERVED, [f"picture: P, W and W / P for the first rows of batch {batch}: {path}"],
                    dict(picture=str(path)))]
