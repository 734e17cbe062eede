"""fa sweep --program hw4.cu (fa_cli/measure/source_sweep.py): a student's own tile sizes, as -D
macros of the source; each combination built with the course's line, judged and timed; every
refusal before any work."""
import json
import os
import shutil
from pathlib import Path

import pytest

from helpers import DATA, fa, have_nvidia_gpu
from fa_cli.measure import source_sweep


def test_values_and_their_grid(tmp_path):
    source = tmp_path / "hw4.cu"
    source.write_text("#ifndef BR\n#define BR 16\n#endif\n#ifdef BC\n#endif\n#if defined(KIND)\n#endif\n")
    assert source_sweep.own_grid(["BR=32,8,16,8", "KIND=fast,_slow"], source) == [
        {"BR": v, "KIND": k} for v in ("8", "16", "32") for k in ("fast", "_slow")]
    assert source_sweep.own_grid(["BC=0x20,1.5f,-2"], source) == [{"BC": "0x20"}, {"BC": "1.5f"}, {"BC": "-2"}]
    assert source_sweep.flags_of({"BR": "8", "BC": "64"}) == ("-DBR=8", "-DBC=64")


@pytest.fixture
def student(tmp_path):
    """A student's CPU hw4.cpp (tests/data/student_hw4.cpp: BR and BC in #ifndef) and a cache of its own."""
    folder = tmp_path / "hw"
    folder.mkdir()
    shutil.copy(DATA / "student_hw4.cpp", folder / "hw4.cpp")
    cache = tmp_path / "cache"
    return folder, {**os.environ, "FA_CACHE": str(cache)}, cache


@pytest.mark.parametrize("args, line", [
    (["--param", "BQ=1"], "--param BQ: hw4.cpp never tests BQ with #ifndef/#ifdef, so -DBQ=... would build the "
                          "same program (the macros it tests: BC, BR, D, MISTAKE)"),
    (["--param", "COMMENTED=1"], "--param COMMENTED: hw4.cpp never tests COMMENTED with #ifndef/#ifdef"),
    (["--param", "BR=8,1x"], "--param 'BR=8,1x': '1x' is not a C name or number"),
    (["--param", "BR=8;rm"], "--param 'BR=8;rm': '8;rm' is not a C name or number"),
    (["--param", "BR="], "--param 'BR=': give one value at least"),
    (["--param", "BR=8", "--param", "BR=16"], "--param BR: given twice"),
    (["--param", "2X=8"], "--param '2X=8': expected NAME=V1,V2,... with NAME a macro of hw4.cpp"),
    ([], "give --param NAME=V1,V2,... with a macro hw4.cpp tests with #ifndef (BC, BR, D, MISTAKE)"),
    (["--param", "BR=8", "--arch", "sm_90"], "--arch: not for a source of yours"),
    (["--param", "BR=8", "--kernel", "simt"], "--kernel: not for a source of yours"),
])
def test_a_bad_sweep_of_a_source_is_one_line_before_any_work(student, args, line):
    folder, env, cache = student
    text = (folder / "hw4.cpp").read_text()
    (folder / "hw4.cpp").write_text(text + "// #ifndef COMMENTED\n")
    proc = fa("sweep", "t01", "--program", "hw4.cpp", *args, cwd=folder, env=env)
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    [said] = proc.stderr.splitlines()
    assert said.startswith(f"fa: error: {line}"), said
    assert not cache.exists()  # nothing built, no input generated


def test_a_binary_is_refused_with_its_source_named(student):
    folder, env, cache = student
    (folder / "hw4").write_bytes(b"\x7fELF")
    (folder / "hw4").chmod(0o755)
    proc = fa("sweep", "t01", "--program", "./hw4", "--param", "BR=8", cwd=folder, env=env)
    assert proc.returncode == 2 and proc.stderr.strip() == (
        "fa: error: --program ./hw4: a built program cannot be rebuilt with other tile sizes: give its source "
        "(--program hw4.cpp), which fa builds with the course's line and -D flags")
    proc = fa("sweep", "t01", "--program", "hw4.txt", "--param", "BR=8", cwd=folder, env=env)
    assert proc.returncode == 2 and "or a source of yours (hw4.cu, hw4.hip, hw4.cpp)" in proc.stderr


@pytest.mark.skipif(have_nvidia_gpu(), reason="about a machine without an NVIDIA GPU")
def test_a_cuda_source_without_gpu_is_refused_after_the_arguments(student):
    folder, env, cache = student
    (folder / "hw4.cu").write_text("#ifndef BR\n#define BR 16\n#endif\nint main() {}\n")
    proc = fa("sweep", "t01", "--program", "hw4.cu", "--param", "BQ=8", cwd=folder, env=env)
    assert proc.returncode == 2 and "never tests BQ" in proc.stderr
    proc = fa("sweep", "t01", "--program", "hw4.cu", "--param", "BR=16,32", cwd=folder, env=env)
    assert proc.returncode == 2 and proc.stdout == ""
    [line] = proc.stderr.splitlines()
    assert "hw4.cu is a CUDA program, and this machine has no NVIDIA GPU to run it" in line
    assert "srun -p nvidia --gres=gpu:1 fa sweep t01 --program hw4.cu --param BR=16,32" in line
    assert not cache.exists()
    proc = fa("sweep", "t01", "--program", "hw4.cu", cwd=folder, env=env)  # no GPU: said before --param is asked for
    assert proc.returncode == 2 and "this machine has no NVIDIA GPU" in proc.stderr and "--param" not in proc.stderr


@pytest.mark.slow  # make test-all (docs/testing.md: what make test keeps of it)
def test_one_build_per_combination_with_its_flags(student, tmp_path):
    """A stand-in compiler (CXX) that logs its arguments: one build per combination, with the
    course's line and that combination's -D flags, each into a folder of its own, and none again."""
    folder, env, cache = student
    log = tmp_path / "cxx.log"
    stub = tmp_path / "cxx"
    stub.write_text(f"#!/bin/sh\necho \"$@\" >> {log}\nexec g++ \"$@\"\n")
    stub.chmod(0o755)
    env = {**env, "CXX": str(stub)}
    args = ["sweep", "t01", "--program", "hw4.cpp", "--param", "BR=8,16", "--param", "BC=32,64", "--no-run",
            "-o", "s.json"]
    proc = fa(*args, cwd=folder, env=env)
    assert proc.returncode == 0, proc.stderr
    lines = log.read_text().splitlines()
    assert len(lines) == 4 and all(l.startswith("-std=c++11 -O3 ") and l.endswith("hw4.cpp -lm") for l in lines)
    assert sorted(" ".join(w for w in l.split() if w.startswith("-D")) for l in lines) == [
        "-DBR=16 -DBC=32", "-DBR=16 -DBC=64", "-DBR=8 -DBC=32", "-DBR=8 -DBC=64"]
    records = json.loads((folder / "s.json").read_text())["records"]
    assert [(r["BR"], r["BC"], r["flags"]) for r in records] == [
        ("8", "32", "-DBR=8 -DBC=32"), ("8", "64", "-DBR=8 -DBC=64"), ("16", "32", "-DBR=16 -DBC=32"),
        ("16", "64", "-DBR=16 -DBC=64")]
    assert len({r["program_path"] for r in records}) == 4 and all(Path(r["program_path"]).exists() for r in records)
    assert fa(*args, cwd=folder, env=env).returncode == 0
    assert len(log.read_text().splitlines()) == 4  # the same source and flags: reused


def test_a_sweep_of_a_cpu_source_judges_every_combination(student):
    folder, env, cache = student
    proc = fa("sweep", "t01", "--program", "hw4.cpp", "--param", "BC=16,64", "--param", "BR=8,16", "--repeat", 1,
              "-o", "s.json", "--plot", "s.png", cwd=folder, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "fa sweep: hw4.cpp built for the CPU, t01" in proc.stdout
    records = json.loads((folder / "s.json").read_text())["records"]
    assert [(r["BC"], r["BR"]) for r in records] == [("16", "8"), ("16", "16"), ("64", "8"), ("64", "16")]
    assert all(r["kind"] == "sweep" and r["passed"] and r["max_err"] < 1e-4 and r["sweep_source"] == "hw4.cpp"
               and r["sweep_params"] == ["BC", "BR"] and r["arch"] == "cpu" for r in records)
    assert (folder / "s.png").read_bytes()[:4] == b"\x89PNG"
    proc = fa("report", "s.json", "-o", "report", cwd=folder, env=env)
    assert proc.returncode == 0, proc.stderr
    text = (folder / "report" / "report.md").read_text()
    mine = text.split("Your tile sizes (`fa sweep`):")[1].split("## For reference")[0]
    assert "hw4.cpp built for the CPU, input t01" in mine and "| BC | BR |" in mine and "PASS" in mine
    assert "fa's own programs" not in text.split("## Commands")[0].split("## 5.")[0]


@pytest.mark.slow  # make test-all (docs/testing.md: what make test keeps of it)
def test_a_combination_that_does_not_build_is_a_record(student):
    folder, env, cache = student
    (folder / "big.cpp").write_text('#ifndef BR\n#define BR 16\n#endif\n#if BR > 32\n#error "BR over 32: too much '
                                    f'shared memory"\n#endif\n#include "{folder / "hw4.cpp"}"\n')
    proc = fa("sweep", "t01", "--program", "big.cpp", "--param", "BR=16,64", "--repeat", 1, "-o", "s.json",
              cwd=folder, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ok, failed = json.loads((folder / "s.json").read_text())["records"]
    assert ok["passed"] and ok["skipped"] is None
    assert failed["skipped"].startswith("big.cpp:5:") and "BR over 32: too much shared memory" in failed["skipped"]
    assert failed["error"] == f"skipped: {failed['skipped']}" and "wall_s" not in failed
    assert "not built: big.cpp:5:" in proc.stdout


@pytest.mark.slow  # nvcc builds of every tile
@pytest.mark.skipif(not shutil.which("nvcc"), reason="needs nvcc")
def test_the_starters_tiles_build_and_a_block_too_large_is_refused_by_the_compiler(tmp_path):
    fa("init", tmp_path)
    proc = fa("sweep", "t01", "--program", "hw4.cu", "--param", "BR=64,2048", "--no-run", "-o", "s.json",
              cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    built, refused = json.loads((tmp_path / "s.json").read_text())["records"]
    assert built["skipped"] is None and Path(built["program_path"]).exists()
    assert 'static assertion failed with "BR: a block holds 1 to 1024 threads"' in refused["skipped"]


@pytest.mark.gpu
def test_a_sweep_of_the_starter_runs_and_verifies_every_combination(tmp_path):
    fa("init", tmp_path)
    proc = fa("sweep", "t03", "--program", "hw4.cu", "--param", "BR=64,128", "--param", "BC=16,32", "--repeat", 1,
              "-o", "s.json", "--plot", "s.png", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    records = json.loads((tmp_path / "s.json").read_text())["records"]
    assert [(r["BR"], r["BC"]) for r in records] == [("64", "16"), ("64", "32"), ("128", "16"), ("128", "32")]
    assert all(r["passed"] and r["tflops_kernel"] > 0 for r in records)
