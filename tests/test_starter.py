"""fa init: a student's starting folder that builds with the course's lines and is correct."""
import json
import re
import shutil
import subprocess

import pytest

from helpers import fa, verdicts
from fa_cli import starter
from fa_cli.measure import c_macros, source_sweep
from fa_cli.programs import timing


def test_init_writes_the_starter_and_overwrites_nothing(tmp_path):
    folder = tmp_path / "hw"
    proc = fa("init", folder)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in folder.iterdir()) == sorted(starter.FILES)
    assert "make hw4 && fa run t01 --program ./hw4" in proc.stdout
    (folder / "hw4.cu").write_text("// mine\n")
    again = fa("init", folder)
    assert again.returncode == 2 and "already there" in again.stderr and len(again.stderr.splitlines()) == 1
    assert (folder / "hw4.cu").read_text() == "// mine\n"


def test_init_refuses_a_file_as_folder(tmp_path):
    (tmp_path / "f").write_text("")
    proc = fa("init", tmp_path / "f")
    assert proc.returncode == 2 and "not a folder" in proc.stderr


@pytest.mark.parametrize("name", ["hw4.cu", "hw4.hip"])
def test_starter_is_self_contained_with_the_todo_marked(name):
    text = (starter.resources.files("fa_cli") / "starter" / name).read_text()
    assert not re.search(r'^\s*#\s*include\s*"', text, re.MULTILINE)
    assert "TODO(tiles)" in text and "1.0f / sqrtf((float)D)" in text


def test_makefile_has_the_course_lines(tmp_path):
    fa("init", tmp_path)
    dry = subprocess.run(["make", "-n", "-B", "-C", str(tmp_path), "hw4", "hw4-amd", "CUDA_ARCH=sm_61"],
                         capture_output=True, text=True, check=True).stdout
    assert 'nvcc -std=c++11 -O3 -Xptxas="-v" -arch=sm_61 -o hw4 hw4.cu -lm' in dry
    assert "hipcc -std=c++14 -O3 --offload-arch=gfx908 -o hw4-amd hw4.hip -lm" in dry


@pytest.mark.skipif(not shutil.which("nvcc"), reason="needs nvcc")
def test_starter_builds_with_nvcc(tmp_path):
    fa("init", tmp_path)
    proc = subprocess.run(["make", "-C", str(tmp_path), "hw4"], capture_output=True, text=True)
    assert proc.returncode == 0 and (tmp_path / "hw4").exists(), proc.stderr[-2000:]
    assert "warning" not in proc.stderr


@pytest.mark.slow  # hipcc
@pytest.mark.skipif(not shutil.which("hipcc"), reason="needs hipcc (apt-get install hipcc)")
def test_starter_builds_with_hipcc(tmp_path):
    fa("init", tmp_path)
    proc = subprocess.run(["make", "-C", str(tmp_path), "hw4-amd"], capture_output=True, text=True)
    assert proc.returncode == 0 and (tmp_path / "hw4-amd").exists(), proc.stderr[-2000:]
    assert "warning" not in proc.stderr


def local_sm() -> str:
    out = subprocess.run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"], capture_output=True,
                         text=True).stdout
    return "sm_" + out.split()[0].replace(".", "")


@pytest.mark.gpu
def test_starter_passes_the_small_cases(tmp_path):
    fa("init", tmp_path)
    subprocess.run(["make", "-C", str(tmp_path), "hw4", f"CUDA_ARCH={local_sm()}"], check=True, capture_output=True)
    proc = fa("run", "t01", "t04", "t07", "c01", "--program", tmp_path / "hw4", "--tol", "1e-4")
    assert proc.returncode == 0 and verdicts(proc.stdout) == ["PASS"] * 4, proc.stdout + proc.stderr


TIMING_FORMAT = re.compile(r'"(fa-timing: [^"]*)"\s*"([^"]*)"')


@pytest.mark.parametrize("name", ["hw4.cu", "hw4.hip"])
def test_starter_timing_line_is_fa_programs_own(name):
    """The optional fa-timing line, filled as the starter prints it: the parser of fa's programs
    (fa_cli/programs/timing.py) reads every stage and fact of it (tests/test_timing.py runs the starter)."""
    text = (starter.resources.files("fa_cli") / "starter" / name).read_text()
    [theirs] = ["".join(m.groups()) for m in TIMING_FORMAT.finditer(text)]
    line = theirs.replace("\\n", "\n").replace("%.6f", "%f") % (0.3, 0.08, 0.1, 1.5, 0.05, 0.02, 2.1, "attention_rows",
                                                                "sm_90", "NVIDIA_H100_80GB_HBM3")
    parsed = timing.parse("some output\n" + line)
    assert parsed.problem is None and list(parsed.seconds) == list(timing.STAGES) and parsed.seconds["kernel"] == 1.5
    assert parsed.facts == {"impl": "attention_rows", "arch": "sm_90", "device": "NVIDIA_H100_80GB_HBM3"}
    assert "FA_TIMING" in text and "optional" in text


@pytest.mark.slow  # make test-all (docs/testing.md: what make test keeps of it)
@pytest.mark.skipif(not shutil.which("nvcc"), reason="needs nvcc")
def test_fa_resources_gives_the_starters_occupancy(tmp_path):
    fa("init", tmp_path)
    proc = fa("resources", "--program", "hw4.cu", "--arch", "sm_80", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    kernels = json.loads(proc.stdout)["records"]
    assert {r["kernel"].split("<")[0] for r in kernels} == {"attention_rows"}
    assert all(r["threads"] == 128 and r["occupancy"] is not None for r in kernels), kernels


@pytest.mark.parametrize("name", ["hw4.cu", "hw4.hip"])
def test_starter_takes_its_tile_sizes_as_macros(name, tmp_path):
    """BR and BC in #ifndef, so that `fa sweep --program hw4.cu --param BR=... --param BC=...` works on it."""
    fa("init", tmp_path)
    macros = c_macros.tested_macros(tmp_path / name)
    assert {"BR", "BC"} <= macros.tested and macros.defaults["BR"] == "128" and macros.defaults["BC"] == "32"
    assert source_sweep.own_grid(["BR=64,128", "BC=16"], tmp_path / name) == [{"BR": "64", "BC": "16"},
                                                                      {"BR": "128", "BC": "16"}]


@pytest.mark.slow  # make test-all (docs/testing.md: what make test keeps of it)
@pytest.mark.skipif(not shutil.which("nvcc"), reason="needs nvcc")
def test_starter_builds_with_other_tiles(tmp_path):
    fa("init", tmp_path)
    proc = subprocess.run(["make", "-C", str(tmp_path), "hw4", "NVCC=nvcc -DBR=64 -DBC=16"], capture_output=True,
                          text=True)
    assert proc.returncode == 0 and "warning" not in proc.stderr, proc.stderr[-2000:]
    assert "attention_rows" in proc.stderr  # ptxas's report of the kernel
