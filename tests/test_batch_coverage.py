"""fa_cli/judge/batch_coverage.py: the batches each case got wrong, read together. Runs made of
the wrong batches a host-side mistake leaves (computed here from its own model of the program:
which blocks a grid launches, which batches two halves copy, how many floats a copy moves) are
named as that mistake; a run that no model fits, or whose failing cases are wrong everywhere, is not."""
from types import SimpleNamespace

import numpy as np

from fa_cli.cases.format import Shape
from fa_cli.judge import batch_coverage
from fa_cli.judge.steps import Context
from fa_cli.judge.tool_logs import Budget
from fa_cli.programs.programs import Program

SHAPES = [Shape(2, 128, 32), Shape(2, 128, 64), Shape(3, 256, 64), Shape(16, 128, 64), Shape(1, 200, 64),
          Shape(3, 200, 32)]


def case(shape: Shape, wrong: np.ndarray):
    """A case's result as the step reads it: every row checked, `wrong` (B, N) the rows over the tolerance."""
    batches, rows = np.meshgrid(np.arange(shape.B), np.arange(shape.N), indexing="ij")
    arrays = (batches.ravel(), rows.ravel(), wrong.ravel().astype(int))
    check = SimpleNamespace(sampled=False, wrong=SimpleNamespace(arrays=lambda: arrays))
    return SimpleNamespace(verdict="WRONG" if wrong.any() else "PASS", target=SimpleNamespace(shape=shape), check=check)


def swapped_grid_program(shape: Shape, br: int = 128) -> np.ndarray:
    """The blocks dim3(B, tiles) launches, each taken as (tile = blockIdx.x, batch = blockIdx.y):
    the rows no block computed."""
    tiles = -(-shape.N // br)
    written = np.zeros((shape.B, tiles * br), dtype=bool)
    for x in range(shape.B):  # blockIdx.x runs over B, read as the tile
        for y in range(tiles):  # blockIdx.y runs over the tiles, read as the batch
            if x < tiles and y < shape.B:
                written[y, x * br:(x + 1) * br] = True
    return ~written[:, :shape.N]


def two_halves_program(shape: Shape) -> np.ndarray:
    """Two streams, each given B / 2 batches from its start (0 and B / 2)."""
    done = np.zeros((shape.B, shape.N), dtype=bool)
    for start in (0, shape.B // 2):
        done[start:start + shape.B // 2] = True
    return ~done


def part_copied_program(shape: Shape, part: int = 4) -> np.ndarray:
    """The input copy moves 1 / part of the 3*B*N*d-float payload (4: its float count as bytes; 3: the
    output's count of floats): a batch is right where its Q, K and V are all inside it; the batch the
    copy ends in has part of its data, and its row 0 weighs (here) only keys it has: right by chance."""
    per_batch, copied = 3 * shape.N * shape.d, 3 * shape.B * shape.N * shape.d // part
    inside = (np.arange(shape.B) + 1) * per_batch <= copied
    wrong = np.broadcast_to(~inside[:, None], (shape.B, shape.N)).copy()
    cut = copied // per_batch
    if copied % per_batch and cut < shape.B:
        wrong[cut, 0] = False
    return wrong


def said(results, tmp_path, text="dim3 grid(in.B, tiles);\nkernel<<<grid, 128>>>(q, o);\n"):
    source = tmp_path / "hw4.cu"
    source.write_text(text)
    ctx = Context(Program("hw4", source.with_suffix(""), source=source), None, tmp_path, Budget(60), lambda s: None,
                  5e-3, None, "", results=results)
    step = batch_coverage.BatchesCovered()
    return step.run(ctx) if step.applies(ctx) else []


def test_a_grid_with_its_axes_swapped_is_named_with_its_tile_and_lines(tmp_path):
    found = said([case(s, swapped_grid_program(s)) for s in SHAPES], tmp_path)
    assert len(found) == 1 and found[0].is_cause
    text = "\n".join(found[0].lines)
    assert "3x256x64: batch 2 wrong" in text and "launch grid with its axes swapped" in text
    assert "(of 128 rows)" in text and "1 `dim3 grid(in.B, tiles);`, 2 `kernel<<<grid, 128>>>(q, o);`" in text


def test_the_last_batch_left_out_where_b_is_odd_is_named_and_not_taken_for_a_grid(tmp_path):
    found = said([case(s, two_halves_program(s)) for s in SHAPES], tmp_path)
    assert len(found) == 1 and "the last batch left out where B is odd" in found[0].lines[0]
    assert "grid" not in found[0].lines[0]


def test_a_copy_of_a_quarter_is_named(tmp_path):
    found = said([case(s, part_copied_program(s)) for s in SHAPES], tmp_path, "cudaMemcpy(d, h, n, H2D);\n")
    assert len(found) == 1 and "only the first quarter of the input" in found[0].lines[0]
    assert "16x128x64: batches 4..15 wrong" in found[0].lines[0] and "cudaMemcpy(d, h, n, H2D);" in found[0].lines[0]


def test_an_input_copied_with_the_outputs_count_of_floats_is_named_as_a_third(tmp_path):
    """set50's s11: the output vector a reference to the input's, resized to B*N*d before the input's
    copy: a third of the input reaches the GPU, batches b < B / 3 right (t09: 0..4 of 16)."""
    source = "d_o = alloc(n);\nCHECK(hipMemcpy(d_qkv, in.qkv.data(), in.qkv.size() * 4, hipMemcpyHostToDevice));\n"
    found = said([case(s, part_copied_program(s, 3)) for s in SHAPES], tmp_path, source)
    assert len(found) == 1 and "only the first third of the input reaching the GPU" in found[0].lines[0], found
    assert "16x128x64: batches 5..15 wrong" in found[0].lines[0] and "2 `CHECK(hipMemcpy(d_qkv" in found[0].lines[0]


def test_runs_no_model_fits_or_wrong_everywhere_name_nothing(tmp_path):
    every = [case(s, np.ones((s.B, s.N), dtype=bool)) for s in SHAPES]
    assert said(every, tmp_path) == []  # every batch wrong: nothing of its own
    first = [case(s, np.arange(s.B)[:, None] == np.zeros((1, s.N))) for s in SHAPES]
    assert said(first, tmp_path) == []  # batch 0 wrong: no model's
    only = [case(s, two_halves_program(s)) if s.B == 3 and s.N == 256 else case(s, np.zeros((s.B, s.N), dtype=bool))
            for s in SHAPES]
    assert said(only, tmp_path) == []  # one failing case (the others pass): too little to tell


def test_a_grid_whose_batch_axis_counts_tiles_is_not_taken_for_axes_swapped(tmp_path):
    """dim3(tiles, tiles): batches b < tiles right, every row; on cases where B >= tiles it leaves the
    batches axes swapped leaves, and no case shows the rows past B tiles that would tell them apart."""
    shapes = [Shape(2, 128, 32), Shape(3, 256, 64), Shape(16, 128, 64), Shape(4, 256, 32)]

    def square_grid(shape):
        tiles = -(-shape.N // 128)
        return np.broadcast_to((np.arange(shape.B) >= tiles)[:, None], (shape.B, shape.N)).copy()
    assert said([case(s, square_grid(s)) for s in shapes], tmp_path) == []
    with_rows = [*shapes, Shape(1, 200, 64)]  # the case that tells them apart, from the swapped grid
    found = said([case(s, swapped_grid_program(s)) for s in with_rows], tmp_path)
    assert len(found) == 1 and "axes swapped" in found[0].lines[0]
