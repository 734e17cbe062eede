"""fa_cli/judge/batch_places.py: chunks of batches that write their output at the output's start
are said by whose output each wrong batch holds, the batches never written, and the chunk."""
import numpy as np

from fa_cli.judge.batch_places import other_batchs_output


def chunked(B: int, C: int, correct: np.ndarray) -> np.ndarray:
    """Each chunk of C batches written at batches 0..: the last chunk wins there, the rest 0."""
    got = np.zeros_like(correct)
    for b0 in range(0, B, C):
        n = min(C, B - b0)
        got[:n] = correct[b0:b0 + n]
    return got


def test_chunks_written_at_the_outputs_start_are_said_with_their_chunk():
    correct = np.random.default_rng(2).uniform(-3, 3, size=(10, 8, 4))
    got = chunked(10, 4, correct)
    said = other_batchs_output(got, correct, np.abs(got - correct) > 5e-3, 5e-3)
    assert said.startswith("batches 0-1 hold the right output of batches 8-9; batches 2-3 hold the right output of "
                           "batches 6-7; batches 4-9 hold 0 (never written)"), said
    assert "every offset a multiple of 4 batches: a chunk of 4 batches" in said  # offsets 8 and 4


def test_wrong_batches_that_hold_no_other_batchs_output_are_not_said():
    correct = np.random.default_rng(2).uniform(-3, 3, size=(6, 8, 4))
    got = correct.copy()
    got[3:] = 0
    assert other_batchs_output(got, correct, np.abs(got - correct) > 5e-3, 5e-3) is None  # a tail: a count's
    got[3] = correct[3] * 1.5
    assert other_batchs_output(got, correct, np.abs(got - correct) > 5e-3, 5e-3) is None


def test_batches_a_grids_map_never_reaches_are_said_as_such():
    """set48's s07: a batch index blockIdx.z * gridDim.z + blockIdx.y where gridDim.y (64) belongs,
    over B = 5000 (gz = 79 groups): batches z * 79 + y, y < 64, the other 15 of every 79 never written."""
    B, gz = 5000, 79
    correct = np.random.default_rng(3).uniform(-3, 3, size=(B, 2, 2))
    reached = sorted({z * gz + y for z in range(gz) for y in range(64)} & set(range(B)))
    got = np.zeros_like(correct)
    got[reached] = correct[reached]
    said = other_batchs_output(got, correct, np.abs(got - correct) > 5e-3, 5e-3)
    lost = B - len(reached)
    assert said.startswith(f"{lost} of the 5000 batches hold 0 in every value checked (never written)"), said
    assert "batches 64-78, 143-157, " in said and "runs)" in said and "with the other axis's size" in said, said


def test_a_chunks_input_base_and_two_swapped_batches_are_not_said_as_an_output_base():
    """Each chunk computed from the first chunk's input (batches hold earlier batches' outputs, none
    unwritten): the input base is said; two swapped batches: no chunk at all."""
    correct = np.random.default_rng(2).uniform(-3, 3, size=(10, 8, 4))
    got = correct[np.arange(10) % 4]
    said = other_batchs_output(got, correct, np.abs(got - correct) > 5e-3, 5e-3)
    assert "each batch holding an earlier batch's output" in said and "its input base without" in said, said
    assert "output base" not in said.split("its input base")[0], said
    got = correct[[0, 1, 2, 4, 3, 5, 6, 7, 8, 9]]
    said = other_batchs_output(got, correct, np.abs(got - correct) > 5e-3, 5e-3)
    assert said.endswith("(no chunk of batches fits the offsets)") and "chunk of 1" not in said, said

