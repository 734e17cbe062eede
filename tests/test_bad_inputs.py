"""Every bad input through fa-cpu and fa: exit code 2, one line naming the problem, no output file."""
import os
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from helpers import build, fa, have_nvidia_gpu
from fa_cli.cases import generate
from fa_cli.cases.format import Shape
from fa_cli.programs import programs

GOOD = Shape(2, 16, 32)


def bad_file(path, kind):
    header = {"zero_B": [0, 16, 32], "negative_N": [2, -16, 32], "zero_d": [2, 16, 0], "d48": [2, 16, 48],
              "overflow": [2**31 - 1, 2**31 - 1, 64], "truncated": [2, 16, 32], "too_long": [2, 16, 32]}
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "short_header":
        path.write_bytes(b"\2\0\0\0\20\0\0\0")
    else:
        floats = {"truncated": GOOD.elements * 3 - 1, "too_long": GOOD.elements * 3 + 1}.get(kind, 0)
        path.write_bytes(np.array(header[kind], "<i4").tobytes() + np.zeros(floats, "<f4").tobytes())
    return path


CASES = {
    "empty": "empty file",
    "short_header": "short header (8 bytes)",
    "zero_B": "B = 0, must be positive",
    "negative_N": "N = -16, must be positive",
    "zero_d": "d = 0, must be positive",
    "d48": "d = 48 is not supported (the programs support d = 32 and 64)",
    "overflow": "overflows 64-bit file sizes",
    "truncated": "file has 12296 bytes, expected 12 + 12*B*N*d = 12300",
    "too_long": "file has 12304 bytes, expected 12 + 12*B*N*d = 12300",
}


def one_line(stderr: str) -> str:
    lines = [l for l in stderr.splitlines() if l.strip()]
    assert len(lines) == 1, stderr
    return lines[0]


# Every program validates its input on the host, before the device starts: the GPU programs'
# checks run wherever their compiler is installed, GPU or not.
# The GPU programs' (their builds: make test-all) check with the same host code as the CPU program's.
PROGRAMS = ["cpu"] + [pytest.param(t, marks=pytest.mark.slow) for t, tool in
                      (("cuda", "nvcc"), ("hip-cuda", "nvcc"), ("hip", "hipcc")) if shutil.which(tool)]


@pytest.fixture(scope="module", params=PROGRAMS, ids=lambda target: programs.BUILT.get(target, target))
def any_program(request):
    """The CPU program, and the GPU programs of the session's one build (conftest.listing_programs):
    their input checks are host code, the same for every GPU target."""
    return build("cpu") if request.param == "cpu" else request.getfixturevalue("listing_programs")[request.param]


@pytest.mark.parametrize("kind", list(CASES))
def test_program_rejects(any_program, tmp_path, kind):
    inp, out = bad_file(tmp_path / "bad.in", kind), tmp_path / "bad.out"
    proc = subprocess.run([str(any_program), str(inp), str(out)], capture_output=True, text=True)
    assert proc.returncode == 2
    line = one_line(proc.stderr)
    assert line.startswith(f"{any_program.name}: error: ") and CASES[kind] in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.in"]


@pytest.mark.parametrize("target,compiler,message", [
    ("cuda", "nvcc", "no CUDA device available"),
    ("hip-cuda", "nvcc", "no HIP device available"),
    ("hip", "hipcc", "no HIP device available"),
])
def test_gpu_program_without_gpu(tmp_path, listing_programs, target, compiler, message):
    """With no device, a valid input gets one line and exit 1, and no output file."""
    if not shutil.which(compiler) or have_nvidia_gpu():
        pytest.skip(f"needs {compiler} and a machine without a GPU")
    program = listing_programs[target]
    inp = tmp_path / "x.in"
    generate.write_input(inp, GOOD, 1)
    proc = subprocess.run([str(program), str(inp), str(tmp_path / "o.out")], capture_output=True, text=True)
    assert proc.returncode == 1 and message in one_line(proc.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.in"]


# fa verify reads a header with the same checks as the programs (every kind above): three kinds in
# make test, every one in make test-all.
@pytest.mark.parametrize("kind", [k if k in ("empty", "zero_B", "truncated") else pytest.param(k, marks=pytest.mark.slow)
                                  for k in CASES])
def test_fa_verify_rejects(tmp_path, kind):
    inp = bad_file(tmp_path / "bad.in", kind)
    out = tmp_path / "o.out"
    out.write_bytes(b"\0" * 4)
    proc = fa("verify", out, "--input", inp)
    assert proc.returncode == 2
    line = one_line(proc.stderr)
    assert line.startswith("fa: error: ") and CASES[kind] in line and "Traceback" not in proc.stderr


@pytest.mark.parametrize("kind", ["d48", "truncated"])
def test_fa_run_rejects(cpu_program, tmp_path, kind):
    inp = bad_file(tmp_path / "bad.in", kind)
    proc = fa("run", inp, "--program", "cpu")
    assert proc.returncode == 2 and CASES[kind] in one_line(proc.stderr)


def test_missing_input(any_program, tmp_path):
    proc = subprocess.run([str(any_program), str(tmp_path / "nope.in"), str(tmp_path / "o")], capture_output=True,
                          text=True)
    assert proc.returncode == 2 and "cannot open input: No such file" in one_line(proc.stderr)


@pytest.mark.parametrize("where", ["missing_dir", "is_dir", "read_only_dir"])
def test_unwritable_output(any_program, tmp_path, where):
    inp = tmp_path / "x.in"
    generate.write_input(inp, GOOD, 1)
    target = {"missing_dir": tmp_path / "no" / "o.out", "is_dir": tmp_path, "read_only_dir": tmp_path / "ro" / "o"}
    if where == "read_only_dir":
        (tmp_path / "ro").mkdir(mode=0o555)
        if subprocess.run(["test", "-w", str(tmp_path / "ro")]).returncode == 0:
            pytest.skip("running as root: permissions do not stop writes")
    proc = subprocess.run([str(any_program), str(inp), str(target[where])], capture_output=True, text=True)
    assert proc.returncode == 2 and f"{any_program.name}: error: " in one_line(proc.stderr)
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == ["x.in"]


def test_fa_gen_unwritable(tmp_path):
    proc = fa("gen", "-B", 2, "-N", 4, "-d", 32, "-o", tmp_path / "no" / "x.in")
    assert proc.returncode == 2 and "cannot write" in one_line(proc.stderr)


def test_fa_gen_rejects_bad_shape(tmp_path):
    proc = fa("gen", "-B", 0, "-N", 4, "-d", 32, "-o", tmp_path / "x.in")
    assert proc.returncode == 2 and "B = 0, must be positive" in one_line(proc.stderr)
    assert not (tmp_path / "x.in").exists()


# Those that name fa-cuda build it first (its registry says the families): make test-all.
BUILDS = pytest.mark.slow
@pytest.mark.parametrize("args, line", [
    (["ladder", "t01", "--program", "cpu"], "fa: error: cpu lists no kernels ("),
    pytest.param(["ladder", "nope.in", "--program", "cuda"], "fa: error: nope.in: cannot read input: No such file or "
                 "directory", marks=BUILDS),
    (["sweep", "t01", "--program", "cpu", "--arch", "sm_90"], "fa: error: --program cpu: fa sweep builds cuda, hip-cuda, hip"),
    pytest.param(["sweep", "t01", "--param", "Br=6", "--arch", "sm_90"], "fa: error: --param 'Br=6': values must be "
                 "powers of two (1, 2, 4, ...)", marks=BUILDS),
    pytest.param(["sweep", "t01", "--arch", "sm_99", "--no-run"], "fa: error: --arch sm_99: give one of ", marks=BUILDS),
    pytest.param(["sweep", "t01", "--no-run", "--profile", "--arch", "sm_90"],
                 "fa: error: --no-run and --profile exclude each other", marks=BUILDS),
])
def test_ladder_and_sweep_refuse_in_one_line(cpu_program, tmp_path, args, line):
    proc = fa(*args, cwd=tmp_path)
    assert proc.returncode == 2 and line in one_line(proc.stderr), proc.stderr
    assert "Traceback" not in proc.stderr and list(tmp_path.iterdir()) == []


@pytest.mark.gpu
@pytest.mark.parametrize("cut", ["inside-a-later-chunk", "at-the-first-chunk-tail"])
def test_mapped_input_cut_short_while_running(tmp_path, cut):
    """fa-cuda maps its input, touches its pages while the device starts and locks them chunk by
    chunk once it is up (HostInput in src_common/host/host_input.h). An input cut short after it
    was checked and mapped, before the device came up: the CPU's touch or read past the new end
    raises SIGBUS, or a chunk's pages cannot be locked (the error then says what changed),
    whichever comes first (on a device that refuses the pages, the read comes up short); each
    way one line naming the input, exit 1, and no output."""
    program = build("cuda")
    shape = Shape(8, 16384, 64)  # 12.6 MB per batch: chunks of 4 batches, the first ending 12 bytes into a page
    inp, out = tmp_path / "x.in", tmp_path / "o.out"
    generate.write_input(inp, shape, 2)
    batch = 12 * shape.N * shape.d
    size = {"inside-a-later-chunk": 12 + 6 * batch, "at-the-first-chunk-tail": (12 + 4 * batch) // 4096 * 4096}[cut]
    proc = subprocess.Popen([str(program), str(inp), str(out)], stderr=subprocess.PIPE, text=True)
    maps, deadline = Path(f"/proc/{proc.pid}/maps"), time.monotonic() + 10
    while str(inp.resolve()) not in maps.read_text() and time.monotonic() < deadline:  # mapped: checked already
        time.sleep(0.001)
    os.truncate(inp, size)
    stderr = proc.communicate(timeout=60)[1]
    assert proc.returncode == 1, stderr
    assert one_line(stderr) in {f"{program.name}: error: {inp}: input cut short while running",
                                f"{program.name}: error: {inp}: input changed while running (now {size} bytes)",
                                f"{program.name}: error: {inp}: read failed: unexpected end"}  # a refusing device
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.in"]


def test_a_program_whose_compiler_is_missing_says_which(tmp_path, monkeypatch):
    """fa's CUDA program where nvcc is not on PATH: one line naming nvcc, not make's last words."""
    from fa_cli.programs import programs
    from fa_cli.errors import FaError

    monkeypatch.setattr(programs.shutil, "which", lambda tool: None if tool in ("nvcc", "hipcc") else "/usr/bin/make")
    for name, compiler in (("cuda", "nvcc"), ("hip", "hipcc")):
        program = programs.Program(name, tmp_path / "bin" / programs.BUILT[name], name)
        with pytest.raises(FaError, match=rf"^program '{name}' is built with {compiler}, which is not installed here"):
            programs.ensure_built(program)
