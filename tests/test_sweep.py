"""fa sweep: parameters, skipped combinations with the compiler's reason, variants built with
nvcc and hipcc here (no GPU needed with --no-run), and a run on a GPU."""
import json
import os
import shutil
from pathlib import Path

import pytest

from helpers import DATA, ROOT, fa, have_nvidia_gpu
from fa_cli.errors import FaError
from fa_cli.measure import c_macros, source_sweep, sweep
from fa_cli.programs.programs import Program


@pytest.fixture(scope="module")
def families(listing_programs):
    """What fa-cuda's kernel registry says fa sweep can build."""
    if "cuda" not in listing_programs:
        pytest.skip("needs nvcc")
    return sweep.families_of(Program("cuda", listing_programs["cuda"], "cuda"))


def test_parameters_and_their_grid(families):
    tiled = families["tiled"]
    assert sweep.parse_param("Br=32,8,16,8", tiled) == ("Br", [8, 16, 32])
    assert sweep.grid(["Bc=16,64"], tiled) == [{"Br": 16, "Bc": 16}, {"Br": 16, "Bc": 64}]
    assert sweep.grid([], tiled) == [{"Br": 16, "Bc": 32}]
    assert tiled.flags({"Br": 8, "Bc": 64}, 32) == "-DFA_TILED_BR=8 -DFA_TILED_BC=64"
    assert tiled.kernel_name({"Br": 8, "Bc": 64}, 32) == "attention_tiled<32, 64>"


@pytest.mark.parametrize("text, why", [
    ("Bk=8", "expected NAME=V1,V2,... with NAME one of Br, Bc"),
    ("Br", "expected NAME=V1,V2,... with NAME one of Br, Bc"),
    ("Br=8,x", "values must be whole numbers"),
    ("Bc=24", "values must be powers of two"),
    ("Bc=", "values must be powers of two"),
])
def test_bad_parameters_are_refused(text, why, families):
    with pytest.raises(FaError, match=why):
        sweep.parse_param(text, families["tiled"])


def test_simt_parameters_start_from_the_programs_tile_for_d(families):
    simt = families["simt"]
    assert sweep.grid([], simt, 64) == [{"TM": 8, "TN": 4, "C": 8, "R": 16, "MB": 2}]
    assert sweep.grid(["TN=4,8"], simt, 32) == [{"TM": 8, "TN": 4, "C": 4, "R": 16, "MB": 4},
                                                {"TM": 8, "TN": 8, "C": 4, "R": 16, "MB": 4}]
    assert simt.tile({"TM": 8, "TN": 4, "C": 8, "R": 16, "MB": 2}) == (128, 32)
    assert simt.flags({"TM": 8, "TN": 4, "C": 8, "R": 16, "MB": 2}, 64) == (
        "-DFA_SIMT64_ROWS_PER_THREAD=8 -DFA_SIMT64_KEYS_PER_THREAD=4 -DFA_SIMT64_THREADS_PER_ROW=8 "
        "-DFA_SIMT64_ROW_GROUPS=16 -DFA_SIMT64_MIN_BLOCKS=2")
    with pytest.raises(FaError, match="with NAME one of TM, TN, C, R, MB"):
        sweep.parse_param("Br=8", simt)


def test_simt_defaults_are_the_programs_own_tiles(families):
    """What the registry prints and src_common/attention_simt.h's FA_SIMT32_*/FA_SIMT64_* defaults say the same."""
    text = (ROOT / "src_common" / "attention_simt.h").read_text()
    for d in (32, 64):
        p = families["simt"].defaults[d]
        for macro, name in (("ROWS_PER_THREAD", "TM"), ("KEYS_PER_THREAD", "TN"), ("THREADS_PER_ROW", "C"),
                            ("ROW_GROUPS", "R"), ("MIN_BLOCKS", "MB")):
            assert f"#define FA_SIMT{d}_{macro} {p[name]}\n" in text


def test_the_amd_build_offers_no_simt_sweep(listing_programs):
    """On AMD the simt tile is not built from FA_SIMT32_*/FA_SIMT64_*: a sweep of it would build identical
    variants, so its registry row offers none."""
    if "hip" not in listing_programs:
        pytest.skip("needs hipcc")
    assert list(sweep.families_of(Program("hip", listing_programs["hip"], "hip"))) == ["tiled"]


@pytest.mark.skipif(not shutil.which("nvcc"), reason="needs nvcc")
def test_simt_variants_build_and_report_their_kernel(tmp_path):
    proc = fa("sweep", "t01", "--kernel", "simt", "--param", "TN=2,4", "--arch", "sm_90", "--no-run",
              "-o", "s.json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    records = json.loads((tmp_path / "s.json").read_text())["records"]
    d = records[0]["shape"]["d"]
    C = records[0]["C"]
    assert [(r["TN"], r["Bc"], r["sweep_kernel"]) for r in records] == [(2, 2 * C, "simt"), (4, 4 * C, "simt")]
    for r in records:
        res = r["resources"]
        assert res["kernel"] == f"attention_simt<{d}, {r['TM']}, {r['TN']}, {r['C']}, {r['R']}, {r['MB']}>"
        assert res["threads"] == r["C"] * r["R"] and res["dynamic_smem"] > 0 and res["registers"] > 0


def test_skip_reason_is_the_static_assert_message():
    nvcc = ('src_common/attention_tiled.h(96): error: static assertion failed with "Br x Bc threads: a block '
            'holds at most 1024"\n1 error detected')
    clang = "attention_tiled.h:96:3: error: static assertion failed: Br x Bc tiles need more than 48 KB\n"
    assert sweep.skip_reason(nvcc) == "Br x Bc threads: a block holds at most 1024"
    assert sweep.skip_reason(clang) == "Br x Bc tiles need more than 48 KB"
    assert sweep.skip_reason("make: *** [Makefile:49] Error 2") == "make: *** [Makefile:49] Error 2"


@pytest.mark.skipif(not shutil.which("nvcc"), reason="needs nvcc (the parameters are fa-cuda's registry's)")
def test_an_unknown_parameter_is_one_line(tmp_path):
    proc = fa("sweep", "t01", "--param", "Bq=4", "--arch", "sm_90", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == ("fa: error: --param 'Bq=4': expected NAME=V1,V2,... with NAME one of Br, Bc "
                                   "(--kernel tiled)")


@pytest.mark.skipif(not shutil.which("nvcc"), reason="needs nvcc")
@pytest.mark.slow
def test_nvcc_variants_build_and_an_impossible_one_is_skipped(tmp_path):
    """Br = 8 with Bc = 64 builds (its resources read from ptxas); Br = 32 with Bc = 64 would be
    2048 threads: skipped with the kernel's own static_assert message."""
    proc = fa("sweep", "t01", "--param", "Br=8,32", "--param", "Bc=64", "--arch", "sm_90", "--no-run",
              "-o", "s.json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    built, skipped = json.loads((tmp_path / "s.json").read_text())["records"]
    assert (built["Br"], built["Bc"], built["skipped"], built["kind"]) == (8, 64, None, "sweep")
    res = built["resources"]
    assert res["kernel"] == "attention_tiled<32, 64>" and res["threads"] == 512 and 0 < res["registers"] <= 255
    assert 0 < res["occupancy"] <= 1 and res["static_smem"] > 2 * 64 * 33 * 4  # two K tiles of pitch d + 1
    assert skipped["skipped"] == "Br x Bc threads: a block holds at most 1024" and skipped["resources"] is None


@pytest.mark.skipif(not shutil.which("hipcc"), reason="needs hipcc")
@pytest.mark.slow
def test_hip_variant_builds_for_an_amd_target(tmp_path):
    proc = fa("sweep", "t01", "--program", "hip", "--param", "Br=8", "--param", "Bc=64", "--arch", "gfx90a",
              "--no-run", "-o", "s.json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [record] = json.loads((tmp_path / "s.json").read_text())["records"]
    res = record["resources"]
    assert res["kernel"] == "attention_tiled<32, 64>" and res["threads"] == 512 and res["registers"] > 0


@pytest.mark.gpu
@pytest.mark.parametrize("program", ["cuda", "hip-cuda"])
def test_sweep_runs_and_verifies_every_variant(tmp_path, program):
    proc = fa("sweep", "t03", "--program", program, "--param", "Br=8,16", "--param", "Bc=32,64", "--repeat", 1,
              "-o", "s.json", "--plot", "s.png", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    records = json.loads((tmp_path / "s.json").read_text())["records"]
    assert [(r["Br"], r["Bc"]) for r in records] == [(8, 32), (8, 64), (16, 32), (16, 64)]
    assert all(r["passed"] and r["max_err"] < 1e-4 and r["tflops_kernel"] > 0 for r in records)
    assert (tmp_path / "s.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.gpu
def test_simt_sweep_runs_and_verifies_every_variant(tmp_path):
    proc = fa("sweep", "t03", "--kernel", "simt", "--param", "TN=2,4", "--repeat", 1, "-o", "s.json", "--plot", "s.png",
              cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    records = json.loads((tmp_path / "s.json").read_text())["records"]
    assert [r["TN"] for r in records] == [2, 4] and all(r["build"]["impl"] == "simt" for r in records)
    assert all(r["passed"] and r["max_err"] < 1e-4 and r["tflops_kernel"] > 0 for r in records)


# ---------------------------------------------------------------- a student's own source
OWN = '''// BR and BC replaced by -D flags
#include <cstdio>
#include "tiles.h"
// #ifndef COMMENTED
/* #ifdef BLOCKED
#ifndef ALSO_BLOCKED */
#ifndef BR
#define BR 16  // rows
#endif
#  ifdef \\
  CONTINUED
#endif
#if defined(WITH_X) && defined WITH_Y
#elif defined ( WITH_Z ) || OTHER
#endif
const char* s = "// #ifndef IN_A_STRING";
'''


def test_the_macros_a_source_tests_comments_left_out(tmp_path):
    (tmp_path / "tiles.h").write_text("#ifndef BC\n#define BC 32\n#endif\n#define UNTESTED 1\n")
    (tmp_path / "hw4.cu").write_text(OWN)
    macros = c_macros.tested_macros(tmp_path / "hw4.cu")
    assert macros.tested == {"BR", "BC", "CONTINUED", "WITH_X", "WITH_Y", "WITH_Z"}
    assert macros.defaults == {"BR": "16", "BC": "32"}
    assert c_macros.strip_comments('a // b\nc /* d\ne */ f "g // h"') == 'a  \nc  \n f "g // h"'


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
