"""Shared memory read before any thread wrote it (fa_cli/judge/shared_poison.py): the runs the step
makes and what it claims from them, with the runs stubbed; on an NVIDIA GPU, the launch layer's
fill (FA_SHARED_POISON) read by a kernel that never writes its shared array, left unseen by one
that does, and a planted program named."""
import os
import shutil
import subprocess

import numpy as np
import pytest

from helpers import DATA, build, fa
from fa_cli.cases import generate
from fa_cli.cases.format import Shape
from fa_cli.judge import shared_poison, slow_device
from fa_cli.judge.findings import Finding, Kind
from fa_cli.judge.reruns import TrialCase
from fa_cli.judge.steps import Context
from fa_cli.judge.tool_logs import Budget
from fa_cli.programs import gtx1080, wave64
from fa_cli.programs.programs import Program

W09 = DATA / "planted_sets" / "set22" / "w09.cu"  # float2 tiles counted as float4 at d = 32
BUILT = np.full((1, 4, 2), 0.5, np.float32)


@pytest.fixture
def ctx(tmp_path, monkeypatch):
    monkeypatch.setattr(slow_device, "student_gpu_program", lambda program: True)
    monkeypatch.setattr(slow_device, "layered", lambda program: True)  # built with the launch layer (a GPU there)
    c = Context(Program("w09", tmp_path / "w09", source=W09), None, tmp_path, Budget(60.0), lambda line: None, 5e-3,
                None, "t01", kind="cuda", verdict="WRONG")
    c.trial = TrialCase("t01", tmp_path / "t01.in", None, np.zeros((1, 4, 2)))
    return c


def runs_giving(monkeypatch, ctx, with_nan, with_value, built=BUILT, filled=True):
    """The poisoned runs give with_nan, then with_value (the layer's fill whole or not); the run as
    built gives built."""
    given = [with_nan, with_value]
    monkeypatch.setattr(shared_poison, "poisoned", lambda ctx, value: (given.pop(0), filled))
    monkeypatch.setattr(ctx, "run_trial", lambda program, name: (None, built))


def test_nan_where_there_was_none_names_shared_memory_read_before_it_was_written(ctx, monkeypatch):
    with_nan = BUILT.copy()
    with_nan[0, :2] = np.nan
    runs_giving(monkeypatch, ctx, with_nan, BUILT + 1)
    step = shared_poison.UnwrittenShared()
    assert step.applies(ctx)
    [found] = step.run(ctx)
    assert found.kind == Kind.MEASURED
    said = found.lines[0]
    assert "filled with NaN before each of its launches, 4 of 8 values are NaN where as built they are not" in said
    assert "with 1000 there 8 of 8 values change by more than 0.005, on t01" in said
    assert "reads shared memory that no thread of its block wrote first" in said
    assert "lines that store into its shared arrays (Ks, Vs) in w09.cu: 145 `put(Ks + r" in said, said


def test_an_output_the_fill_leaves_alone_claims_nothing(ctx, monkeypatch):
    runs_giving(monkeypatch, ctx, BUILT.copy(), BUILT.copy())
    assert shared_poison.UnwrittenShared().run(ctx) == []
    assert ctx.done[-1].startswith("the same output with shared memory filled with NaN and with 1000")


def test_nan_as_built_too_is_not_counted(ctx, monkeypatch):
    """A NaN the program writes anyway is not the fill's: only what changes counts."""
    built = BUILT.copy()
    built[0, 0] = np.nan
    runs_giving(monkeypatch, ctx, built.copy(), built.copy(), built=built)
    assert shared_poison.UnwrittenShared().run(ctx) == []


def test_values_not_finite_as_built_that_the_fill_turns_another_non_number_are_not_counted(ctx, monkeypatch):
    """set39's s06: rows of inf (a weight that overflowed a half) become NaN or -inf with 1000 in
    shared memory: no evidence of a read of unwritten memory. A finite value turned inf is."""
    built = BUILT.copy()
    built[0, 1] = np.inf
    turned = built.copy()
    turned[0, 1] = [np.nan, -np.inf]
    runs_giving(monkeypatch, ctx, built.copy(), turned, built=built)
    assert shared_poison.UnwrittenShared().run(ctx) == []
    assert ctx.done[-1].endswith("but 2 of the values not finite as built became other non-numbers (no claim from "
                                 "it)"), ctx.done  # never "the same output": it was not
    turned[0, 2] = np.inf
    runs_giving(monkeypatch, ctx, built.copy(), turned, built=built)
    [found] = shared_poison.UnwrittenShared().run(ctx)
    assert "with 1000 there 2 of 8 values change" in found.lines[0], found.lines


def test_noise_under_the_tolerance_is_no_change_and_a_fill_not_whole_is_said(ctx, monkeypatch):
    """A program whose last bits change from run to run (float atomics' order): not a read of
    unwritten shared memory; where the layer could not fill it all, the unchanged output says so."""
    runs_giving(monkeypatch, ctx, BUILT + 6e-8, BUILT - 6e-8, filled=False)
    assert shared_poison.UnwrittenShared().run(ctx) == []
    assert ctx.done[-1].endswith("(fa's launch layer could not fill all of it: see its lines on stderr)")


def test_nan_that_spreads_where_a_finite_value_changes_nothing_is_no_cause(ctx, monkeypatch):
    """Padding read and multiplied by 0: NaN there spreads (NaN * 0), 1000 there changes nothing;
    said as observed, and the probes still run (no cause)."""
    with_nan = BUILT.copy()
    with_nan[0, 0] = np.nan
    runs_giving(monkeypatch, ctx, with_nan, BUILT.copy())
    [found] = shared_poison.UnwrittenShared().run(ctx)
    assert found.kind == Kind.OBSERVED and not found.is_cause
    assert "a finite value there changes nothing: not what makes the output wrong" in found.lines[0]


def test_a_run_with_no_output_claims_nothing(ctx, monkeypatch):
    runs_giving(monkeypatch, ctx, None, BUILT)
    [found] = shared_poison.UnwrittenShared().run(ctx)
    assert found.kind == Kind.OBSERVED and "no claim" in found.lines[0]


def test_a_race_or_a_cause_found_before_leaves_the_step_out(ctx):
    for kind in (Kind.RACE, Kind.HARMLESS):  # runs that differ, past the tolerance or within it
        ctx.findings[:] = [Finding(kind, ["the output changes between runs"])]
        assert not shared_poison.UnwrittenShared().applies(ctx)
    ctx.findings[:] = []
    ctx.verdict = "ERROR"
    assert not shared_poison.UnwrittenShared().applies(ctx)


def test_a_source_without_shared_arrays_shows_no_lines(ctx, tmp_path):
    plain = tmp_path / "plain.cu"
    plain.write_text("__global__ void k(float* o) { o[0] = 1.f; }\n")
    ctx.program = Program("plain", tmp_path / "plain", source=plain)
    assert shared_poison.store_lines(ctx) == ""


def test_the_loop_that_makes_the_stores_is_shown_with_them(ctx, tmp_path):
    tiled = tmp_path / "tiled.cu"
    tiled.write_text("__global__ void k(const float* kt, int bc) {\n  __shared__ float Ks[32 * 33];\n"
                     "  for (int e = threadIdx.x; e < bc * 32; e += 128) {  // the block copies the tile\n"
                     "    const int r = e / 32, c = e % 32;\n    Ks[r * 33 + c] = kt[e];\n  }\n}\n")
    ctx.program = Program("tiled", tmp_path / "tiled", source=tiled)
    assert shared_poison.store_lines(ctx) == (
        "; lines that store into its shared arrays (Ks) in tiled.cu: 5 `Ks[r * 33 + c] = kt[e];`; the loop that makes "
        "those stores (its start, bound and stride): 3 `for (int e = threadIdx.x; e < bc * 32; e += 128) {`")
    tiled.write_text("__global__ void k(const float* kt, int n) {\n  __shared__ float Ks[1024];\n"
                     "  for (int t = 0; t < n; t += 32) {\n    __syncthreads();\n"
                     "    for (int e = threadIdx.x; e < 1024; e += 128) Ks[e] = kt[t * 32 + e];\n  }\n}\n")
    assert shared_poison.store_lines(ctx) == (  # a one-line loop: its own line, not the tile loop above it
        "; lines that store into its shared arrays (Ks) in tiled.cu: 5 `for (int e = threadIdx.x; e < 1024; e += "
        "128) Ks[e] = kt[t * 32 + e];`")


def test_a_loop_over_the_whole_tile_where_the_load_stops_at_its_count_is_shown(ctx, tmp_path):
    """set45's s05: the tile loaded up to bc keys, its weights and P V taken over BC: the loop
    bounded by the load's bound in the other case is shown after the load's."""
    tiled = tmp_path / "tiled.cu"
    tiled.write_text("#define BC 157\n__global__ void k(const float* kt, int bc) {\n  __shared__ float Vs[BC * 32];\n"
                     "  for (int e = threadIdx.x; e < bc * 32; e += 128) {\n    Vs[e] = kt[e];\n  }\n"
                     "  for (int jj = 0; jj < BC; ++jj) acc += Vs[jj * 32];\n}\n")
    ctx.program = Program("tiled", tmp_path / "tiled", source=tiled)
    assert shared_poison.store_lines(ctx).endswith(
        "; loops over the tile bounded by its whole size where the load stops at its count (a case apart: bc): 7 `for "
        "(int jj = 0; jj < BC; ++jj) acc += Vs[jj * 32];` (a short tile's slots past its count read there: what the "
        "tile before left, or what nothing wrote?)"), shared_poison.store_lines(ctx)


def test_a_return_above_a_load_that_strides_over_the_blocks_threads_is_shown(ctx, tmp_path):
    """set47's s04: a warp whose row is past N returns before the block's tile load, which strides
    by blockDim.x: its share of every tile is never written. A return in another kernel is not it."""
    tiled = tmp_path / "tiled.cu"
    tiled.write_text("__global__ void other(float* o) { if (!o) return; }\n"
                     "__global__ void k(const float* kt, int N) {\n  __shared__ float Ks[32 * 33];\n"
                     "  const int i = blockIdx.x * 8 + threadIdx.x / 32;\n  if (i >= N) return;\n"
                     "  for (int e = threadIdx.x; e < 32 * 32; e += blockDim.x) {\n    Ks[e] = kt[e];\n  }\n}\n")
    ctx.program = Program("tiled", tmp_path / "tiled", source=tiled)
    assert shared_poison.store_lines(ctx).endswith(
        "; a return above that loop in its function: 5 `if (i >= N) return;` (threads that leave there, where not the "
        "whole block does, never make their share of the loop's stores, which strides over all the block's threads)"), \
        shared_poison.store_lines(ctx)
    helper = tiled.read_text().replace("__global__ void k(", "__global__ void k0(float* o) { if (!o) return; }\n"
                                       "__device__ void load(").replace("  if (i >= N) return;\n", "")
    tiled.write_text(helper)  # a return in the kernel before the helper that loads: not the helper's
    assert "a return above" not in shared_poison.store_lines(ctx), shared_poison.store_lines(ctx)
    tiled.write_text(tiled.read_text().replace("e += blockDim.x", "e += 32"))  # a warp's own loop: not the block's
    assert "a return above" not in shared_poison.store_lines(ctx)


UNWRITTEN = r'''
#include <cstdio>
#include <cuda_runtime.h>
__global__ void unwritten(float* out) {  // reads its shared array, writes none of it
  __shared__ float tile[256];
  out[threadIdx.x] = tile[threadIdx.x];
}
__global__ void written(float* out) {
  __shared__ float tile[256];
  tile[threadIdx.x] = threadIdx.x;
  __syncthreads();
  out[threadIdx.x] = tile[255 - threadIdx.x];
}
int main() {
  float *d, h[256];
  cudaMalloc(&d, sizeof h);
  unwritten<<<1, 256>>>(d);
  cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
  printf("unwritten %g %g\n", h[0], h[255]);
  written<<<1, 256>>>(d);
  cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
  printf("written %g %g\n", h[0], h[255]);
  return cudaGetLastError() != cudaSuccess;
}
'''


@pytest.mark.gpu
def test_the_launch_layer_fills_shared_memory_that_a_kernel_then_reads(tmp_path):
    (tmp_path / "unwritten.cu").write_text(UNWRITTEN)
    nvcc = shutil.which("nvcc") or "nvcc"
    subprocess.run([nvcc, "-O3", "-arch=native", *gtx1080.build_flags(nvcc), "-o", tmp_path / "unwritten",
                    tmp_path / "unwritten.cu"], check=True, capture_output=True)
    for value, shown in (("nan", "nan nan"), ("1000", "1000 1000"), ("-2.5", "-2.5 -2.5")):
        proc = subprocess.run([tmp_path / "unwritten"], capture_output=True, text=True,
                              env={**os.environ, "FA_SHARED_POISON": value})
        assert proc.returncode == 0 and f"unwritten {shown}" in proc.stdout, proc.stdout + proc.stderr
        assert "written 255 0" in proc.stdout  # a kernel that writes before it reads never sees the fill


@pytest.mark.gpu
@pytest.mark.parametrize("source", [DATA / "planted_hw4.cu", DATA / "planted_sets" / "set1" / "wave_ok.hip"],
                         ids=["hw4.cu", "hw4.hip-emulated"])
def test_the_fill_changes_nothing_of_a_correct_program(tmp_path, source):
    """Neither the student's kernel nor the MI210 emulation's own use of shared memory (a
    wavefront's two warps meet there) reads shared memory before writing it."""
    nvcc = shutil.which("nvcc") or "nvcc"
    line = [nvcc, "-O3", "-arch=native", *gtx1080.build_flags(nvcc)] if source.suffix == ".cu" else \
        wave64.build_line(nvcc, "native")
    subprocess.run([*line, "-o", tmp_path / "hw4", source], check=True, capture_output=True)
    inp = tmp_path / "x.in"
    generate.write_input(inp, Shape(2, 200, 32), 3)
    outs = []
    for env in ({}, {"FA_SHARED_POISON": "nan"}, {"FA_SHARED_POISON": "1000"}):
        subprocess.run([tmp_path / "hw4", inp, tmp_path / "x.out"], check=True, env={**os.environ, **env})
        outs.append(np.fromfile(tmp_path / "x.out", dtype="<f4"))
    assert all(np.array_equal(o, outs[0]) for o in outs[1:])


@pytest.mark.gpu
def test_float2_tiles_counted_as_float4_are_named_as_shared_memory_never_written():
    proc = fa("run", "t01", "--program", W09)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    line = next(l for l in proc.stdout.replace("\n    ", " ").splitlines() if "filled with NaN" in l)
    assert "reads shared memory that no thread of its block wrote first" in line and "w09.cu: 145" in line, line


@pytest.mark.parametrize("value, refused", [("abc", True), ("1e3x", True), ("nan", False), ("-2.5", False)])
def test_a_fill_that_is_no_number_is_refused_in_one_line(tmp_path, value, refused):
    """Every program reads the settings at start (src_common/host/settings.h): a bad value is an
    error before any work; a good one is nothing to a program without fa's launch layer."""
    inp = tmp_path / "x.in"
    generate.write_input(inp, Shape(1, 8, 32), 1)
    proc = subprocess.run([build("cpu"), inp, tmp_path / "o"], capture_output=True, text=True,
                          env={**os.environ, "FA_SHARED_POISON": value})
    if refused:
        assert proc.returncode == 2 and f"FA_SHARED_POISON={value}: expected nan or a number" in proc.stderr
        assert not (tmp_path / "o").exists()
    else:
        assert proc.returncode == 0, proc.stderr
