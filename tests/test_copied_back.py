"""The copies from the device kept and laid over the right output (fa_cli/judge/copied_back.py):
where the copies lie, and what the step claims, with the run stubbed; on an NVIDIA GPU, the launch
layer's copies (FA_COPIED_BACK) and a planted program whose file is written from a buffer nothing
fills."""
import os
import shutil
import subprocess
from types import SimpleNamespace

import numpy as np
import pytest

from helpers import DATA, fa
from fa_cli.cases.format import Shape
from fa_cli.judge import copied_back, slow_device
from fa_cli.judge.findings import Finding, Kind
from fa_cli.judge.reruns import TrialCase
from fa_cli.judge.steps import Context
from fa_cli.judge.tool_logs import Budget
from fa_cli.programs import gtx1080
from fa_cli.programs.programs import Program

W08 = DATA / "planted_sets" / "set22" / "w08.cu"  # the file written from a vector nothing fills
RNG = np.random.default_rng(5)
RIGHT = RNG.uniform(-1, 1, (2, 16, 8))


def test_copies_a_batch_each_are_placed_whole_and_cover_the_output():
    flat = RIGHT.ravel()
    kept = [flat[:128].astype(np.float32), flat[128:].astype(np.float32)]
    assert [copied_back.placed(c, flat, 5e-3) for c in kept] == [(0, 128), (128, 128)]
    assert copied_back.covered(kept, flat, 5e-3) == (1.0, 2)
    wrong = kept[1] + 1
    assert copied_back.placed(wrong, flat, 5e-3) is None and copied_back.covered([kept[0], wrong], flat, 5e-3) == (0.5, 1)


def test_a_right_copy_with_a_lower_precisions_error_or_more_values_than_the_output_is_placed():
    """A device output right within the tolerance but not to the last bit (fp16, __expf) is the right
    output; so is a buffer copied back with the output and more after it (a row's max and sum)."""
    flat = RIGHT.ravel()
    noisy = (flat + RNG.normal(0, 1e-4, flat.size)).astype(np.float32)
    assert copied_back.placed(noisy, flat, 5e-3) == (0, flat.size)
    longer = np.concatenate([noisy, RNG.uniform(-9, 9, 64)]).astype(np.float32)
    assert copied_back.placed(longer, flat, 5e-3) == (0, flat.size)
    assert copied_back.covered([longer], flat, 5e-3) == (1.0, 1)


def test_a_file_is_what_was_copied_whole_or_end_to_end():
    out = RIGHT.astype(np.float32)
    assert copied_back.file_is_copied([out.ravel()], out)
    assert copied_back.file_is_copied([out.ravel()[:100], out.ravel()[100:]], out)
    assert not copied_back.file_is_copied([out.ravel()[:100]], out)


@pytest.fixture
def ctx(tmp_path, monkeypatch):
    monkeypatch.setattr(slow_device, "student_gpu_program", lambda program: True)
    monkeypatch.setattr(slow_device, "layered", lambda program: True)  # built with the launch layer (a GPU there)
    c = Context(Program("w08", tmp_path / "w08", source=W08), None, tmp_path, Budget(60.0), lambda line: None, 5e-3,
                None, "t01", kind="cuda", verdict="WRONG")
    c.trial = TrialCase("t01", tmp_path / "t01.in", Shape(2, 16, 8), RIGHT)
    return c


def run_keeping(monkeypatch, ctx, kept: list[np.ndarray], out: np.ndarray | None, stderr: str = ""):
    """The run stubbed: it leaves `kept` as its copies in the folder its setting names, and `out`."""
    def run_trial(program, name):
        folder = next(a.split("=", 1)[1] for a in program.interpreter if a.startswith("FA_COPIED_BACK="))
        for k, copy in enumerate(kept, 1):
            copy.astype("<f4").tofile(f"{folder}/copy-{k:04d}.bin")
        return SimpleNamespace(stderr=stderr, error=None if out is not None else "stopped at the time limit"), out
    monkeypatch.setattr(ctx, "run_trial", run_trial)


def test_right_copies_and_a_file_of_zeros_name_the_hosts_writing(ctx, monkeypatch):
    run_keeping(monkeypatch, ctx, [RIGHT.ravel()], np.zeros(RIGHT.shape, np.float32))
    step = copied_back.CopiedBack()
    assert step.applies(ctx)
    [found] = step.run(ctx)
    said = found.lines[0]
    wrong = int((np.abs(RIGHT) > 5e-3).sum())  # zeros where the right value is 0 within the tolerance are right
    assert found.kind == Kind.MEASURED and said.startswith("measured: the copies back from the device held the right "
                                                           "output (1 of 1 copy from the device (1024 bytes) hold it, "
                                                           "100% of its values in place, within 0.005), yet the output "
                                                           "file has "
                                                           f"{wrong} of 256 values wrong, on t01"), said
    assert "61 `if (std::fwrite(out.data()" in said and "213 `CHECK(cudaMemcpyAsync(h_out, d_out" in said


def short_file(values: int) -> np.ndarray:
    """The file as a copy back of the first `values` values leaves it: the rest as the host buffer held it (0)."""
    out = np.zeros(RIGHT.size, np.float32)
    out[:values] = RIGHT.ravel()[:values]
    return out.reshape(RIGHT.shape)


def test_a_copy_back_of_a_pointers_size_is_named_with_its_bytes_and_lines(ctx, monkeypatch):
    """sizeof of the output's pointer as the copy's size: 8 bytes of 1024 reach the host."""
    run_keeping(monkeypatch, ctx, [RIGHT.ravel()[:2]], short_file(2))
    [found] = copied_back.CopiedBack().run(ctx)
    said = found.lines[0]
    assert found.kind == Kind.MEASURED and said.startswith(
        "measured on t01: the copies from the device to the host (1 copy) brought 8 bytes of the output's 1,024: the "
        "file's first 2 values, right; "), said
    assert "the rest of the output never left the device (a copy back given too few bytes; 8 bytes, the size of a " \
        "pointer" in said
    assert "213 `CHECK(cudaMemcpyAsync(h_out, d_out" in said


def test_a_copy_back_of_as_many_bytes_as_values_is_named_so_and_a_whole_copy_is_not_short(ctx, monkeypatch):
    run_keeping(monkeypatch, ctx, [RIGHT.ravel()[:64]], short_file(64))
    [found] = copied_back.CopiedBack().run(ctx)
    assert "brought 256 bytes of the output's 1,024" in found.lines[0]
    assert "as many bytes as the output has values: a count of floats given where bytes belong" in found.lines[0]
    assert copied_back.too_few_bytes([RIGHT.ravel()], short_file(64), RIGHT.ravel(), 5e-3) is None
    # the part not copied right all the same (a 0 where 0 is right): not most of it wrong, no claim
    assert copied_back.too_few_bytes([RIGHT.ravel()[:64]], RIGHT.astype(np.float32), RIGHT.ravel(), 5e-3) is None


def test_copies_that_are_not_the_files_first_values_are_no_short_copy_back():
    """A half-precision output copied whole (half the bytes, other values) and converted on the host
    wrong; a 4-byte error flag copied back beside an output in memory the layer does not see: the
    copies are not the file's first values, right, so no short copy back is named."""
    wrong = (RIGHT + 1).astype(np.float32)
    halves = RNG.uniform(-1, 1, RIGHT.size // 2).astype(np.float32)
    assert copied_back.too_few_bytes([halves], wrong, RIGHT.ravel(), 5e-3) is None
    flag = np.array([0.0], np.float32)
    assert copied_back.too_few_bytes([flag], wrong, RIGHT.ravel(), 5e-3) is None
    flag_first = wrong.copy().ravel()
    flag_first[0] = 0.0  # the flag's bits where the file's first value is, that value not right
    assert copied_back.too_few_bytes([flag], flag_first.reshape(RIGHT.shape), RIGHT.ravel(), 5e-3) is None


def test_a_run_that_wrote_no_output_claims_nothing_whatever_its_copies(ctx, monkeypatch):
    """The judged run wrote an output of the right size (a WRONG): a run that then writes none (stopped,
    crashed) failed on its own, and its copies say nothing of the file."""
    run_keeping(monkeypatch, ctx, [RIGHT.ravel()[:128], RIGHT.ravel()[128:]], None)
    assert copied_back.CopiedBack().run(ctx) == []
    assert ctx.done[-1].startswith("the run with every copy from the device kept wrote no output of the right size "
                                   "on t01 (stopped at the time limit): no claim")


def test_right_copies_and_a_file_the_host_scaled_name_the_file_as_not_what_they_brought(ctx, monkeypatch):
    run_keeping(monkeypatch, ctx, [RIGHT.ravel()], (RIGHT * 0.5).astype(np.float32))
    [found] = copied_back.CopiedBack().run(ctx)
    assert "the file is not what the copies brought (written from other memory than their destination, from " \
        "another place in it, before they arrived, or changed on the host after)" in found.lines[0]


def test_copies_the_layer_could_not_keep_are_said_with_what_was_kept(ctx, monkeypatch):
    run_keeping(monkeypatch, ctx, [(RIGHT + 1).ravel()[:8]], np.zeros(RIGHT.shape, np.float32),
                stderr="fa-launch: FA_COPIED_BACK: copy 2 not kept: 536870912 bytes kept already\n")
    assert copied_back.CopiedBack().run(ctx) == []
    assert ctx.done[-1].endswith("0% of the right output among them, within 0.005; not every copy kept (fa's launch "
                                 "layer's lines on stderr)")


def test_a_file_that_is_what_the_device_sent_is_said_among_what_was_tried(ctx, monkeypatch):
    wrong = (RIGHT + 1).astype(np.float32)
    run_keeping(monkeypatch, ctx, [wrong.ravel()], wrong)
    assert copied_back.CopiedBack().run(ctx) == []
    assert ctx.done[-1].startswith("the output file holds what 1 copy from the device (1024 bytes) brought, bit for "
                                   "bit: its wrong values came from the device")


def test_no_copies_seen_claims_nothing(ctx, monkeypatch):
    run_keeping(monkeypatch, ctx, [], np.zeros(RIGHT.shape, np.float32))
    assert copied_back.CopiedBack().run(ctx) == [] and "no copy from the device to the host seen" in ctx.done[-1]


def test_copies_of_other_values_claim_nothing(ctx, monkeypatch):
    run_keeping(monkeypatch, ctx, [(RIGHT + 1).ravel()], np.zeros(RIGHT.shape, np.float32))
    assert copied_back.CopiedBack().run(ctx) == [] and "0% of the right output among them" in ctx.done[-1]


def test_a_race_found_before_leaves_the_step_out(ctx):
    ctx.findings.append(Finding(Kind.INTERMITTENT, ["intermittent: failed 2 of 4 runs"]))
    assert not copied_back.CopiedBack().applies(ctx)


COPIES = r'''
#include <cstdio>
#include <cuda_runtime.h>
int main() {
  float h[4] = {1, 2, 3, 4}, back[4], *d, *pinned;
  cudaMalloc(&d, sizeof h);
  cudaMallocHost(&pinned, sizeof h);
  cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice);       // to the device: not kept
  cudaMemcpy(back, d, sizeof h, cudaMemcpyDeviceToHost);    // kept first
  cudaStream_t s;
  cudaStreamCreate(&s);
  cudaMemcpyAsync(pinned, d, 2 * sizeof(float), cudaMemcpyDefault, s);  // kept second, once waited for
  cudaStreamSynchronize(s);
  printf("%g %g\n", back[3], pinned[1]);
  return 0;
}
'''


@pytest.mark.gpu
def test_the_launch_layer_keeps_each_copy_from_the_device_in_order(tmp_path):
    (tmp_path / "copies.cu").write_text(COPIES)
    nvcc = shutil.which("nvcc") or "nvcc"
    subprocess.run([nvcc, "-O3", "-arch=native", *gtx1080.build_flags(nvcc), "-o", tmp_path / "copies",
                    tmp_path / "copies.cu"], check=True, capture_output=True)
    folder = tmp_path / "kept"
    folder.mkdir()
    proc = subprocess.run([tmp_path / "copies"], capture_output=True, text=True,
                          env={**os.environ, "FA_COPIED_BACK": str(folder)})
    assert proc.returncode == 0 and "4 2" in proc.stdout, proc.stdout + proc.stderr
    assert sorted(p.name for p in folder.iterdir()) == ["copy-0001.bin", "copy-0002.bin"]
    assert np.fromfile(folder / "copy-0001.bin", "<f4").tolist() == [1, 2, 3, 4]
    assert np.fromfile(folder / "copy-0002.bin", "<f4").tolist() == [1, 2]


@pytest.mark.gpu
def test_a_file_written_from_a_buffer_nothing_fills_is_named_with_its_lines():
    proc = fa("run", "t01", "--program", W08)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    said = proc.stdout.replace("\n    ", " ")
    line = next(l for l in said.splitlines() if "copies back from the device held the right output" in l)
    assert "yet the output file has" in line and "w08.cu: 61" in line and "213 `CHECK(cudaMemcpyAsync(h_out" in line


def test_right_copies_and_a_file_written_from_batch_1_on_say_where_the_file_holds_them(ctx, monkeypatch):
    """The file written from the right buffer at another place: the layout's formula said too."""
    out = np.zeros(RIGHT.shape, np.float32)
    out[0] = RIGHT[1]
    run_keeping(monkeypatch, ctx, [RIGHT.ravel()], out)
    [found] = copied_back.CopiedBack().run(ctx)
    assert "; the file holds the value of batch b, row r, column c at offset 8*r + c of the output (in batch 0 " \
        "whatever b" in found.lines[0], found.lines[0]
