"""fa measures what a failing program computes: probe inputs designed to isolate one part of the
computation, and what the program wrote on them (docs/diagnosis.md).

The probes (PROBES), in order, are rows of the investigation's one table (judge/investigation.py);
each is a Probe (step.py): a question, its inputs, its measurement and its words. A probe runs
where it applies (from what the earlier ones measured, Context.facts) and while the time budget
lasts; once one has named a mechanism from its measurements, the later readings stand aside.
Where none names one, Summary says what was measured; Picture draws W against P.

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
  QueryInputs        then Q's side, with Q coded and each key one-hot at a dim: which element
                     of Q each term took, by formula or batch             query_inputs.py
  ReadWeights        W from runs with one-hot V; is the output W V?       weights.py
  RowsNotWritten, OtherRows, TilesAlike,
  KeysWithoutWeight,
  KeysLeftOutByRow   W against P                                          readings.py
  SkippedTiles       whole key tiles with no weight, under a threshold on the running max  skipped_tiles.py
  OneKeyRangeARow    each row's keys one range of N/S, by a formula of the row  key_ranges.py
  TransposedTiles    each tile's weights met with V by the other index    tile_transposed.py
  SoftmaxSteps       the online softmax with one step written otherwise, any tile  softmax_steps.py
  Factors            W / P per row, per key tile, per key (keys counted twice), by the places
                     of row and key in a group of lanes; log W against the logits
                                     factors.py, partial_sums.py, key_places.py, logit_scale.py
  RowFactors         where W was not read (out of time): each wrong row the right row times a
                     factor, from the output alone: which sum l           row_factors.py, sum_terms.py
  LogitsByTile,
  LogitsByRow        the logits at a factor of their key tile's, or their row's, own  tile_logits.py
  NotFinite, BatchAlone, WholeTiles   the probe again with one thing changed   experiments.py
  InputsAcrossBatches  one batch's Q, K or V drawn anew: which other batches move  cross_batch.py
  WeightFloor        every weight far under the row's max raised to one floor  floors.py
  Summary            W against P in numbers, where nothing was pinned down  readings.py
  Picture            P, W and W / P as a PNG                              picture.py
"""
from __future__ import annotations

from . import design
from .cross_batch import InputsAcrossBatches
from .experiments import BatchAlone, NotFinite, Wavefronts, WholeTiles
from .factors import Factors
from .floors import WeightFloor
from .indexing import InputReading
from .layout import OutputLayout
from .linear_map import LinearMap
from .picture import Picture
from .precision import Precision
from .key_ranges import OneKeyRangeARow
from .row_factors import RowFactors
from .readings import KeysLeftOutByRow, KeysWithoutWeight, OtherRows, RowsNotWritten, Summary, TilesAlike
from .query_inputs import QueryInputs
from .score_inputs import ScoreInputs
from .skipped_tiles import SkippedTiles
from .softmax_steps import SoftmaxSteps
from .tile_logits import LogitsByRow, LogitsByTile
from .tile_transposed import TransposedTiles
from .step import Step
from .weights import ProbeRuns, ReadWeights

PROBES: tuple[Step, ...] = (ProbeRuns(), Wavefronts(), NotFinite(), Precision(), OutputLayout(),
                             InputReading(), LinearMap(), ScoreInputs(), QueryInputs(), ReadWeights(), RowsNotWritten(),
                             OtherRows(), TilesAlike(), KeysWithoutWeight(), KeysLeftOutByRow(), SkippedTiles(),
                             OneKeyRangeARow(), TransposedTiles(), SoftmaxSteps(), Factors(), RowFactors(),
                             LogitsByTile(), LogitsByRow(),
                             BatchAlone(), InputsAcrossBatches(), WholeTiles(), WeightFloor(), Summary(), Picture())

__all__ = ["PROBES", "design"]
