"""Every program against the float64 reference, the CPU program and each kernel of the GPU
programs alike (those marked gpu skip where there is no NVIDIA GPU): odd shapes, many batches,
stress distributions, a long sequence, inputs spanning several chunks, the shipped suite, the
timing line and the softmax sum at N = 32768; then what only the GPU programs have: the
tensor-core range fallback, kernels and ports agreeing."""
import os
import re
import signal
import subprocess
from pathlib import Path

import numpy as np
import pytest

from helpers import ROOT, build, run_and_check
from fa_cli.cases import generate, suite
from fa_cli.cases.format import AttentionInput, Shape, as_f32_bytes, header_bytes, open_output
from fa_cli.judge import reference, verify
from fa_cli.programs.devices import list_devices

TOL = 1e-4

# (program, environment): the CPU program; every kernel of the CUDA program; the HIP port built
# by nvcc with its default (simt) kernel, its tiled kernel with the NVIDIA tile (Bc = 32) and
# with the AMD CDNA tile (Bc = 64: each row then spans two warps, the reductions combining them
# through shared memory), its MI210 matrix-core kernel (on NVIDIA through the emulated
# MFMA instruction and 64-lane wavefronts of src_hip/mfma_on_cuda.h), and its simt kernel with
# the AMD tiles (make hip-cuda-amd-tiles: one K/V stage, 32 KB).
GPU = pytest.mark.gpu
# Seconds each on a GPU, half a minute each for the CPU program on 2 cores: marked slow there
# (tests/conftest.py), so that make test stays quick; make test-all runs them.
SLOW_ON_CPU = {"test_softmax_sum_keeps_tiny_terms[fa-cpu]", "test_many_batches[fa-cpu-32]", "test_many_batches[fa-cpu-64]",
               "test_long_sequence[fa-cpu]", "test_several_chunks[fa-cpu]"}
VARIANTS = [
    pytest.param(("cpu", {}), id="fa-cpu"),
    pytest.param(("cuda", {"FA_KERNEL": "tiled"}), id="fa-cuda-tiled", marks=GPU),
    pytest.param(("cuda", {"FA_KERNEL": "simt"}), id="fa-cuda-simt", marks=GPU),
    pytest.param(("cuda", {"FA_KERNEL": "tensorcore"}), id="fa-cuda-tensorcore", marks=GPU),
    pytest.param(("cuda", {"FA_KERNEL": "tensorcore", "FA_TC_SPLIT": "fused"}), id="fa-cuda-tensorcore-fused",
                 marks=GPU),
    pytest.param(("hip-cuda", {}), id="fa-hip-cuda-simt", marks=GPU),
    pytest.param(("hip-cuda", {"FA_KERNEL": "tiled", "FA_HIP_BC": "32"}), id="fa-hip-cuda-32", marks=GPU),
    pytest.param(("hip-cuda", {"FA_KERNEL": "tiled", "FA_HIP_BC": "64"}), id="fa-hip-cuda-64", marks=GPU),
    pytest.param(("hip-cuda", {"FA_KERNEL": "mfma"}), id="fa-hip-cuda-mfma", marks=GPU),
    pytest.param(("hip-cuda-amd-tiles", {}), id="fa-hip-cuda-simt-amd-tiles", marks=GPU),
]


TESTED_ELSEWHERE = {("cuda", "wgmma")}  # needs sm_90a code on a Hopper GPU: the wgmma tests below


def test_every_kernel_of_the_registry_is_a_variant_here(listing_programs):
    """A kernel added to the registry (src_common/registry.h) is judged here like the others."""
    from fa_cli.programs import registry
    covered = {(v.values[0][0], v.values[0][1].get("FA_KERNEL", "simt")) for v in VARIANTS}
    for target, path in listing_programs.items():
        if target == "hip":
            continue  # the AMD build: its kernels are the same source as hip-cuda's
        for row in registry.kernels_of(path):
            if not row.family.startswith("ladder-") and (target, row.family) not in TESTED_ELSEWHERE:
                assert (target, row.family) in covered, f"{target}: {row.name} ({row.family}) has no variant"


@pytest.fixture(scope="module", params=VARIANTS)
def variant(request):
    target, env = request.param
    return build(target), {**os.environ, **env}


@pytest.mark.parametrize("d", [32, 64])
@pytest.mark.parametrize("N", [1, 7, 33, 129, 1000, 2047])
def test_odd_shapes(variant, tmp_path, N, d):
    program, env = variant
    assert run_and_check(program, tmp_path, Shape(2 if N < 1000 else 1, N, d), seed=N, env=env) <= TOL


@pytest.mark.parametrize("d", [32, 64])
def test_many_batches(variant, tmp_path, d):
    program, env = variant
    assert run_and_check(program, tmp_path, Shape(13000, 128, 32) if d == 32 else Shape(3000, 128, 64),
                         env=env) <= TOL


@pytest.mark.parametrize("dist", ["extreme", "onehot", "constant", "normal"])
@pytest.mark.parametrize("d", [32, 64])
def test_stress_distributions(variant, tmp_path, dist, d):
    program, env = variant
    assert run_and_check(program, tmp_path, Shape(3, 1500, d), dist, env=env) <= TOL


def test_long_sequence(variant, tmp_path):
    program, env = variant
    assert run_and_check(program, tmp_path, Shape(1, 16384 + 5, 64), env=env) <= TOL


def test_several_chunks(variant, tmp_path):
    """A 79 MB input spans two chunks of every program (64 MB of input on the CPU, 48 MB on the
    GPUs): the boundary must not shift batches."""
    program, env = variant
    assert run_and_check(program, tmp_path, Shape(800, 128, 64), env=env) <= TOL


@pytest.mark.parametrize("name", [f"t{i:02d}" for i in range(1, 11)])
def test_shipped_suite(variant, tmp_path, name):
    program, env = variant
    c = suite.case(name)
    out = tmp_path / "o.out"
    subprocess.run([str(program), str(c.input_path), str(out)], check=True, env=env)
    result = verify.against_reference(AttentionInput(c.input_path), open_output(out, c.shape), TOL)
    assert result.passed and result.checked == c.shape.elements, result


def test_timing_line_only_when_asked(variant, tmp_path):
    program, env = variant
    inp = tmp_path / "x.in"
    generate.write_input(inp, Shape(2, 64, 32), 1)
    quiet_env = {k: v for k, v in env.items() if k != "FA_TIMING"}
    proc = subprocess.run([str(program), str(inp), str(tmp_path / "o")], capture_output=True, text=True,
                          env={**quiet_env, "FA_TIMING": "1"}, check=True)
    line = proc.stderr.strip()
    assert line.startswith("fa-timing: init=") and "total=" in line and " impl=" in line
    quiet = subprocess.run([str(program), str(inp), str(tmp_path / "o")], capture_output=True, text=True,
                           env=quiet_env, check=True)
    assert quiet.stderr == ""


def test_softmax_sum_keeps_tiny_terms(variant, tmp_path):
    """Batch 21 of suite case t27 (N = 32768): its row 18623 has one dominant key and 32767
    probabilities far below the running sum's ulp. Adding those one by one into a float lost
    4e-5 of the sum (1.05e-4 in O); the compensated sum keeps the error at fp32 level (the CPU
    program adds each 64-key tile's sum at once: 1.2e-5 there)."""
    c = suite.case("t27")
    shape = Shape(1, c.shape.N, c.shape.d)
    inp, out = tmp_path / "t27-b21.in", tmp_path / "o.out"
    with open(inp, "wb") as f:
        f.write(header_bytes(shape))
        for x in generate.batch(shape, c.seed, c.dist, 21):
            f.write(as_f32_bytes(x))
    program, env = variant
    subprocess.run([str(program), str(inp), str(out)], check=True, env=env)
    rows = np.arange(18623 - 64, 18623 + 64)[None]
    ref = reference.attention(*AttentionInput(inp).qkv(0), rows=rows)[0]
    err = np.abs(open_output(out, shape)[0, rows[0]].astype(np.float64) - ref).max()
    assert err <= 5e-5, f"{program.name}: {err:.2e}"  # fp32 kernels: 3e-5 at most over all of t27


# ----------------------------------------------------------------------------- the GPU programs only


def timing_line(program, inp, out, env):
    proc = subprocess.run([str(program), str(inp), str(out)], capture_output=True, text=True, check=True,
                          env={**env, "FA_TIMING": "1"})
    return dict(item.split("=", 1) for item in proc.stderr.split("fa-timing:")[1].split())


def trace_of(stderr: str) -> dict:
    """FA_TIMING=2's lines as numbers: the run's marks, and per chunk (read, submitted, copied,
    written)."""
    number = r"([\d.]+)"
    marks = {}
    for key, pattern in {"read_start": f"read started at {number}", "device_up": f"device up at {number}",
                         "buffers": f"buffers ready at {number}", "first_h2d": f"first h2d at {number}",
                         "copied": f"last chunk copied back at {number}", "committed": f"committed at {number}",
                         "released": f"device released at {number} s$", "exiting": f"exiting at {number}"}.items():
        found = re.search(pattern, stderr, re.MULTILINE)
        assert found, f"no '{pattern}' in:\n{stderr}"
        marks[key] = float(found.group(1))
    marks["chunks"] = [tuple(map(float, m)) for m in re.findall(
        rf"chunk \d+ read {number} submitted {number} copied {number} written {number}", stderr)]
    closed = re.search(rf"driver's files closed at {number}", stderr)
    assert closed or "driver's files left to exit" in stderr, stderr
    marks["files_closed"] = float(closed.group(1)) if closed else None
    return marks


@pytest.mark.gpu
@pytest.mark.parametrize("target", ["cuda", "hip-cuda"])
def test_trace_shows_the_overlap_and_the_device_released_before_the_end(tmp_path, target):
    """FA_TIMING=2 on a three-chunk input: fa-cuda locks the input's pages in place once the
    device is up, fa-hip-cuda reads the whole input while the device starts; the trace's marks
    come in the pipeline's order, the device is released without a warning (and
    the driver's files closed after it, or left to exit), and the output is right; the second
    run replaces the first one's output, which it holds until its drop thread lets it go."""
    program = build(target)
    shape = Shape(600, 256, 64)  # 118 MB of input: three chunks of 48 MB
    inp, out = tmp_path / "x.in", tmp_path / "o.out"
    generate.write_input(inp, shape, 5)
    out.write_bytes(b"an old output of another size")
    for _ in range(2):
        proc = subprocess.run([str(program), str(inp), str(out)], capture_output=True, text=True, check=True,
                              env={**os.environ, "FA_TIMING": "2"})
        assert "warning" not in proc.stderr
        t = trace_of(proc.stderr)
        assert t["read_start"] < t["device_up"] <= t["buffers"] <= t["first_h2d"] <= t["copied"]
        assert len(t["chunks"]) == 3
        if target == "cuda":  # the file's pages locked in place once the device is up: nothing read
            assert f"fa-trace: {MAPPED}\n" in proc.stderr and " read=0.000000 " in proc.stderr
        else:  # HIP 5.2 cannot lock them read-only: 118 MB read while the device started, not after
            assert "fa-trace: input read: " in proc.stderr and t["chunks"][-1][0] < t["device_up"]
        assert all(read <= submitted <= copied <= written for read, submitted, copied, written in t["chunks"])
        assert t["copied"] == max(c[2] for c in t["chunks"]) <= t["released"] <= t["exiting"]
        assert max(c[3] for c in t["chunks"]) <= t["committed"] <= t["exiting"]
        assert t["files_closed"] is None or t["released"] <= t["files_closed"] <= t["exiting"]
        assert verify.against_reference(AttentionInput(inp), open_output(out, shape), TOL).passed
        assert sorted(p.name for p in tmp_path.iterdir()) == ["o.out", "x.in"]


MAPPED = "input mapped: the file's pages locked read-only in place"
INPUT_WAYS = {"": MAPPED, "read": "input read: FA_INPUT=read",
              "refused": "input read: the file's pages could not be locked (FA_INPUT=refused)",
              "refused-later": MAPPED + "; chunk 1 on read: its pages could not be locked (FA_INPUT=refused-later)"}


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [Shape(1, 1, 32), Shape(3, 50, 32), Shape(8000, 33, 32), Shape(800, 128, 64)],
                         ids=["under-a-page", "one-chunk", "chunks-inside-pages", "chunks-on-pages"])
def test_the_ways_in_agree(tmp_path, shape):
    """fa-cuda takes its input one of four ways (HostInput in src_common/host/host_input.h): the
    file's own pages locked in place (the default), read into host slots (FA_INPUT=read), read
    once the device has refused chunk 0's pages, or each later chunk read on its own once its
    pages are refused (FA_INPUT=refused and refused-later stand in for the refusals). The trace
    names the way; the outputs are the same bytes, and right. Inputs: under a page (all of it
    through the tail slot), one chunk, three chunks whose boundaries fall inside pages
    (12672-byte batches: each chunk's last bytes through the tail slot), and two chunks whose
    data ends 12 bytes into a page. (With d = 32 or 64 no chunk ends on a page boundary.)"""
    program = build("cuda")
    inp = tmp_path / "x.in"
    generate.write_input(inp, shape, 3)
    outputs = {}
    for way, line in INPUT_WAYS.items():
        out = tmp_path / f"{way or 'mapped'}.out"
        env = {**os.environ, "FA_TIMING": "2", "FA_INPUT": way}
        proc = subprocess.run([str(program), str(inp), str(out)], capture_output=True, text=True, check=True, env=env)
        several_chunks = shape.B * 12 * shape.N * shape.d > 48 << 20
        assert f"fa-trace: {line if several_chunks or way != 'refused-later' else MAPPED}\n" in proc.stderr
        outputs[way] = out.read_bytes()
    assert outputs[""] == outputs["read"] == outputs["refused"] == outputs["refused-later"]
    assert verify.against_reference(AttentionInput(inp), open_output(tmp_path / "mapped.out", shape), TOL).passed


@pytest.mark.gpu
def test_input_in_shared_memory(tmp_path):
    """An input on tmpfs (/dev/shm): its pages are shared memory, locked in place like a file's."""
    shm = Path("/dev/shm")
    if not shm.is_dir() or not os.access(shm, os.W_OK):
        pytest.skip("no writable /dev/shm")
    program = build("cuda")
    shape = Shape(800, 128, 64)
    inp = shm / f"fa-test-{os.getpid()}.in"
    try:
        generate.write_input(inp, shape, 4)
        proc = subprocess.run([str(program), str(inp), str(tmp_path / "o.out")], capture_output=True, text=True,
                              check=True, env={**os.environ, "FA_TIMING": "2"})
        assert f"fa-trace: {MAPPED}\n" in proc.stderr
        assert verify.against_reference(AttentionInput(inp), open_output(tmp_path / "o.out", shape), TOL).passed
    finally:
        inp.unlink(missing_ok=True)


@pytest.mark.gpu
def test_two_runs_lock_the_same_input_at_once(tmp_path):
    """Two fa-cuda processes on one input at the same time (a judge running cases side by side):
    each locks the same page-cache pages read-only, and both outputs are right and the same."""
    program = build("cuda")
    shape = Shape(800, 128, 64)  # two chunks
    inp = tmp_path / "x.in"
    generate.write_input(inp, shape, 6)
    runs = [subprocess.Popen([str(program), str(inp), str(tmp_path / f"{k}.out")], stderr=subprocess.PIPE, text=True)
            for k in range(2)]
    for run in runs:
        assert run.wait(timeout=60) == 0, run.stderr.read()
    assert (tmp_path / "0.out").read_bytes() == (tmp_path / "1.out").read_bytes()
    assert verify.against_reference(AttentionInput(inp), open_output(tmp_path / "0.out", shape), TOL).passed


def hopper_program() -> Path:
    """fa-cuda as make builds it on a Hopper GPU (sm_90a code: the wgmma kernel); the test skips
    on other GPUs."""
    if not any(d.arch == "sm_90" for d in list_devices()):
        pytest.skip("the wgmma kernel needs a Hopper GPU (sm_90)")
    return build("cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("d", [32, 64])
@pytest.mark.parametrize("N", [1, 33, 64, 65, 100, 128, 129, 257, 1000, 4097])
def test_wgmma_kernel_on_odd_shapes(tmp_path, N, d):
    """Tile counts odd and even, a last tile of 1 to 63 keys, rows past N in the last block; up
    to N = 128 the fused-split variant."""
    env = {**os.environ, "FA_KERNEL": "wgmma"}
    assert run_and_check(hopper_program(), tmp_path, Shape(3, N, d), seed=N, env=env) <= TOL


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [Shape(13000, 128, 32), Shape(3000, 128, 64), Shape(1000, 100, 32),
                                   Shape(500, 65, 64)], ids=str)
def test_wgmma_fused_over_many_batches(tmp_path, shape):
    """The fused-split variant's blocks take batch after batch (more batches than SMs, several
    chunks at 13000 x 128 x 32): the staging slots and split tiles are reused many times."""
    env = {**os.environ, "FA_KERNEL": "wgmma"}
    assert run_and_check(hopper_program(), tmp_path, shape, seed=shape.N, env=env) <= TOL


@pytest.mark.gpu
@pytest.mark.parametrize("N, kernel", [(128, "wgmma-fused"), (129, "tensorcore-fused"), (256, "tensorcore-fused"),
                                       (257, "wgmma")])
def test_hopper_default_kernel(tmp_path, N, kernel):
    """On Hopper the default is wgmma: its fused-split variant up to N = 128, the fused mma.sync
    kernel from 129 to 256, the wgmma kernel with its split pass beyond."""
    program, inp = hopper_program(), tmp_path / "x.in"
    generate.write_input(inp, Shape(2, N, 64), 0)
    assert timing_line(program, inp, tmp_path / "o.out", dict(os.environ))["impl"] == kernel


@pytest.mark.gpu
def test_wgmma_needs_sm90a_code(tmp_path):
    """A build for plain sm_90 has no wgmma: FA_KERNEL=wgmma is refused, the default is mma.sync."""
    hopper_program()
    subprocess.run(["make", "-s", "-C", str(ROOT), "BIN=bin/sm_90", "CUDA_ARCH=sm_90", "cuda"], check=True)
    program, inp = ROOT / "bin" / "sm_90" / "fa-cuda", tmp_path / "x.in"
    generate.write_input(inp, Shape(1, 300, 32), 0)
    proc = subprocess.run([str(program), str(inp), str(tmp_path / "o.out")], capture_output=True, text=True,
                          env={**os.environ, "FA_KERNEL": "wgmma"})
    assert proc.returncode == 2 and not (tmp_path / "o.out").exists()
    assert proc.stderr.strip().endswith("rebuild it with CUDA_ARCH=sm_90a")
    assert timing_line(program, inp, tmp_path / "o.out", dict(os.environ))["impl"] == "tensorcore"


@pytest.mark.gpu
@pytest.mark.parametrize("split", ["prepass", "fused", "wgmma", "wgmma-fused"])
def test_values_past_the_split_range_fall_back_to_fp32(tmp_path, split):
    """|x| > 64 would overflow the tensor-core split: such a chunk runs on the tiled kernel."""
    program = hopper_program() if split.startswith("wgmma") else build("cuda")
    env = {**os.environ, "FA_KERNEL": "wgmma"} if split.startswith("wgmma") else {**os.environ, "FA_TC_SPLIT": split}
    impl = {"prepass": "tensorcore", "fused": "tensorcore-fused"}.get(split, split)
    N = 100 if split == "wgmma-fused" else 200
    shape = Shape(2, N, 64)
    inp, out = tmp_path / "big.in", tmp_path / "o.out"
    q, k, v = (np.stack(x) for x in zip(*(generate.batch(shape, 3, "uniform", b) for b in range(2))))
    with open(inp, "wb") as f:
        f.write(np.array([2, N, 64], "<i4").tobytes())
        for b in range(2):
            for x in (q[b] * 40, k[b] / 10, v[b] * 40):  # |q| up to 120, |v| up to 120
                f.write(x.astype("<f4").tobytes())
    info = timing_line(program, inp, out, env)
    assert info["impl"] == impl + "+tiled"
    result = verify.against_reference(AttentionInput(inp), open_output(out, shape), 1e-3)
    assert result.passed, result
    # In-range inputs stay on the tensor cores.
    generate.write_input(inp, shape, 1)
    assert timing_line(program, inp, out, env)["impl"] == impl


@pytest.mark.gpu
def test_a_declined_chunk_larger_than_the_fallback_grid(tmp_path):
    """The fallback's blocks stride over the row tiles (a grid of only what fits the GPU at once):
    a declined chunk of 24 x 63 row tiles, several strides on any GPU, comes out right in every row."""
    shape = Shape(24, 1000, 32)
    inp, out = tmp_path / "big.in", tmp_path / "o.out"
    generate.write_input(inp, shape, 6)
    data = np.fromfile(inp, dtype="<f4", offset=12)
    data[-1] = 100.0  # one value past the split's range (the last batch's V) declines the chunk
    with open(inp, "r+b") as f:
        f.seek(12)
        f.write(data.tobytes())
    assert timing_line(build("cuda"), inp, out, dict(os.environ))["impl"].endswith("+tiled")
    result = verify.against_reference(AttentionInput(inp), open_output(out, shape), 1e-4)
    assert result.passed, result


@pytest.mark.gpu
@pytest.mark.parametrize("split", ["prepass", "fused", "wgmma", "wgmma-fused"])
def test_nan_input_falls_back_to_fp32(tmp_path, split):
    """A NaN cannot be split either: the chunk runs on the tiled kernel, and only the rows that
    see the NaN (all of them, through its key) come out NaN, as in the reference."""
    program = hopper_program() if split.startswith("wgmma") else build("cuda")
    env = {**os.environ, "FA_KERNEL": "wgmma"} if split.startswith("wgmma") else {**os.environ, "FA_TC_SPLIT": split}
    shape = Shape(2, 200 if split == "wgmma" else 100, 32)
    inp, out = tmp_path / "nan.in", tmp_path / "o.out"
    generate.write_input(inp, shape, 4)
    data = np.fromfile(inp, dtype="<f4", offset=12)
    data[shape.N * shape.d + 5 * shape.d + 3] = np.nan  # batch 0, K row 5
    with open(inp, "r+b") as f:
        f.seek(12)
        f.write(data.tobytes())
    impl = {"prepass": "tensorcore", "fused": "tensorcore-fused"}.get(split, split)
    assert timing_line(program, inp, out, env)["impl"] == impl + "+tiled"
    got = np.fromfile(out, dtype="<f4").reshape(2, shape.N, shape.d)
    assert np.isnan(got[0]).all() and np.isfinite(got[1]).all()


@pytest.mark.gpu
def test_kernels_agree(tmp_path):
    program = build("cuda")
    inp = tmp_path / "x.in"
    generate.write_input(inp, Shape(4, 777, 64), 5)
    outs = {}
    hopper = any(d.arch == "sm_90" for d in list_devices())
    for kernel in ("tiled", "tensorcore") + (("wgmma",) if hopper else ()):
        out = tmp_path / f"{kernel}.out"
        subprocess.run([str(program), str(inp), str(out)], check=True, env={**os.environ, "FA_KERNEL": kernel})
        outs[kernel] = np.fromfile(out, dtype="<f4")
    for kernel in outs:
        assert np.abs(outs["tiled"] - outs[kernel]).max() <= 2e-5, kernel


@pytest.mark.gpu
@pytest.mark.parametrize("setting", ["FA_KERNEL=magic", "FA_INPUT=mmap"])
def test_bad_setting(tmp_path, setting):
    program = build("cuda")
    inp = tmp_path / "x.in"
    generate.write_input(inp, Shape(1, 8, 32), 1)
    name, value = setting.split("=")
    proc = subprocess.run([str(program), str(inp), str(tmp_path / "o")], capture_output=True, text=True,
                          env={**os.environ, name: value})
    assert proc.returncode == 2 and f"error: {setting}: expected " in proc.stderr and not (tmp_path / "o").exists()


@pytest.mark.gpu
def test_hip_port_matches_cuda_program(tmp_path):
    """The HIP source run through CUDA and the CUDA program agree to 1e-5, whatever tile each uses."""
    inp = tmp_path / "x.in"
    generate.write_input(inp, Shape(3, 1025, 64), 8)
    runs = {"cuda": (build("cuda"), {}), "hip32": (build("hip-cuda"), {"FA_KERNEL": "tiled", "FA_HIP_BC": "32"}),
            "hip64": (build("hip-cuda"), {"FA_KERNEL": "tiled", "FA_HIP_BC": "64"}), "hipsimt": (build("hip-cuda"), {}),
            "hipmfma": (build("hip-cuda"), {"FA_KERNEL": "mfma"}), "hipsimtamd": (build("hip-cuda-amd-tiles"), {})}
    outs = {}
    for name, (program, env) in runs.items():
        out = tmp_path / f"{name}.out"
        info = timing_line(program, inp, out, {**os.environ, **env})
        assert info["arch"].startswith("sm_")
        assert name != "hipmfma" or info["impl"] == "mfma"
        outs[name] = np.fromfile(out, dtype="<f4")
    for name in ("hip32", "hip64", "hipsimt", "hipmfma", "hipsimtamd"):
        assert np.abs(outs[name] - outs["cuda"]).max() <= 1e-5


@pytest.mark.gpu
def test_the_amd_simt_tiles_fit_two_blocks_in_a_cus_lds():
    """The build that runs the AMD tiles on NVIDIA launches simt blocks of four 64-lane wavefronts
    in at most 32 KB of shared memory: two blocks in a CU's 64 KB of LDS (fa resources counts the
    waves per SIMD from hipcc's own report)."""
    listing = subprocess.run([str(build("hip-cuda-amd-tiles")), "--launches"], capture_output=True, text=True,
                             check=True).stdout.splitlines()
    simt = [line.split("\t") for line in listing if line.startswith("attention_simt<")]
    assert {name for name, _, _ in simt} == {"attention_simt<32, 2, 4, 8, 32, 1, 1>",
                                             "attention_simt<64, 2, 2, 8, 32, 1, 1>"}
    assert all(int(threads) == 256 and 2 * int(smem) <= 65536 for _, threads, smem in simt), simt


def test_a_crash_hint_names_the_source_beside_the_program(tmp_path, monkeypatch):
    from fa_cli.programs import programs
    monkeypatch.chdir(tmp_path.parent)
    (tmp_path / "segv").write_bytes(b"")
    assert programs.source_hint(tmp_path / "segv") == "SOURCE (the .cu, .hip or .cpp it was built from)"
    (tmp_path / "segv.cpp").write_text("int main() {}")
    assert programs.source_hint(tmp_path / "segv") == f"{tmp_path.name}/segv.cpp"  # as typed from here
    (tmp_path / "hw4.cu").write_text("")
    monkeypatch.chdir(tmp_path)
    assert programs.source_hint(tmp_path / "hw4") == "hw4.cu"


def test_a_runs_wall_time_is_when_it_exits(tmp_path):
    """programs.run times the whole process to its exit, not to the next poll, and from its exec,
    not from fa's fork: a program of about 0.07 s is timed as the same program started and waited
    for by plain blocking calls (Popen.wait with a timeout polls at most every 50 ms and read such
    a program as 0.11 s; fa's fork, in a process as large as a long test run, cost 25 ms more)."""
    from fa_cli.programs import programs
    import statistics
    import time
    script = tmp_path / "sleeper"
    script.write_text("#!/bin/sh\nexec sleep 0.07\n")
    script.chmod(0o755)

    def blocking() -> float:
        start = time.perf_counter()
        subprocess.run([str(script), "in", "out"], check=True)
        return time.perf_counter() - start

    program = programs.Program("sleeper", script)
    fa_walls = [programs.run(program, tmp_path / "in", tmp_path / "out", timeout=30).wall_s for _ in range(5)]
    direct = [blocking() for _ in range(5)]
    assert abs(statistics.median(fa_walls) - statistics.median(direct)) < 0.015, (fa_walls, direct)


@pytest.mark.slow  # make test-all (docs/testing.md: what make test keeps of it)
def test_a_program_killed_at_its_time_limit_is_said_killed(tmp_path, monkeypatch):
    """A program that ignores SIGTERM is SIGKILLed at its limit, and its exit code says so every
    time: while fa's stop waits for it too, the run's own waiter may reap it first (Popen's wait
    then finds no child and would take the code for 0)."""
    from fa_cli.programs import programs
    monkeypatch.setattr(programs, "KILL_GRACE_S", 0.2)
    script = tmp_path / "stubborn"
    script.write_text("#!/bin/sh\ntrap '' TERM\nsleep 30 & wait\nsleep 30\n")
    script.chmod(0o755)
    program = programs.Program("stubborn", script)
    codes = {programs.run(program, tmp_path / "in", tmp_path / "out", timeout=0.2).returncode for _ in range(12)}
    assert codes == {-signal.SIGKILL}, codes
