"""fa sweep over the registry's kernels (fa_cli/measure/sweep.py): parameters, skipped
combinations with the compiler's reason, variants built with nvcc and hipcc here (no GPU needed
with --no-run), and a run on a GPU. A student's own source: test_source_sweep.py."""
import json
import shutil

import pytest

from helpers import ROOT, fa
from fa_cli.errors import FaError
from fa_cli.measure import sweep
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
    assert sweep.grid([], simt, 64) == [{"TM": 8, "TN": 8, "C": 8, "R": 16, "MB": 2, "ST": 1}]
    assert sweep.grid(["TN=4,8"], simt, 32) == [{"TM": 8, "TN": 4, "C": 4, "R": 16, "MB": 4, "ST": 2},
                                                {"TM": 8, "TN": 8, "C": 4, "R": 16, "MB": 4, "ST": 2}]
    assert simt.tile({"TM": 8, "TN": 4, "C": 8, "R": 16, "MB": 2, "ST": 2}) == (128, 32)
    assert simt.flags({"TM": 8, "TN": 4, "C": 8, "R": 16, "MB": 2, "ST": 1}, 64) == (
        "-DFA_SIMT64_ROWS_PER_THREAD=8 -DFA_SIMT64_KEYS_PER_THREAD=4 -DFA_SIMT64_THREADS_PER_ROW=8 "
        "-DFA_SIMT64_ROW_GROUPS=16 -DFA_SIMT64_MIN_BLOCKS=2 -DFA_SIMT64_STAGES=1")
    with pytest.raises(FaError, match="with NAME one of TM, TN, C, R, MB, ST"):
        sweep.parse_param("Br=8", simt)


def test_simt_defaults_are_the_programs_own_tiles(families):
    """What the registry prints and src_common/simt_tile.h's FA_SIMT32_*/FA_SIMT64_* defaults say the same."""
    text = (ROOT / "src_common" / "simt_tile.h").read_text()
    for d in (32, 64):
        p = families["simt"].defaults[d]
        for macro, name in (("ROWS_PER_THREAD", "TM"), ("KEYS_PER_THREAD", "TN"), ("THREADS_PER_ROW", "C"),
                            ("ROW_GROUPS", "R"), ("MIN_BLOCKS", "MB"), ("STAGES", "ST")):
            assert f"#define FA_SIMT{d}_{macro} {p[name]}\n" in text


def test_the_amd_build_offers_no_simt_sweep(listing_programs):
    """On AMD the simt tile is not built from FA_SIMT32_*/FA_SIMT64_*: a sweep of it would build identical
    variants, so its registry row offers none."""
    if "hip" not in listing_programs:
        pytest.skip("needs hipcc")
    assert list(sweep.families_of(Program("hip", listing_programs["hip"], "hip"))) == ["tiled"]


@pytest.mark.skipif(not shutil.which("nvcc"), reason="needs nvcc")
@pytest.mark.slow  # builds fa-cuda first (its registry says the families): minutes from a fresh clone
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
        assert res["kernel"] == f"attention_simt<{d}, {r['TM']}, {r['TN']}, {r['C']}, {r['R']}, {r['MB']}, {r['ST']}>"
        assert res["threads"] == r["C"] * r["R"] and res["dynamic_smem"] > 0 and res["registers"] > 0


def test_skip_reason_is_the_static_assert_message():
    nvcc = ('src_common/attention_tiled.h(96): error: static assertion failed with "Br x Bc threads: a block '
            'holds at most 1024"\n1 error detected')
    clang = "attention_tiled.h:96:3: error: static assertion failed: Br x Bc tiles need more than 48 KB\n"
    assert sweep.skip_reason(nvcc) == "Br x Bc threads: a block holds at most 1024"
    assert sweep.skip_reason(clang) == "Br x Bc tiles need more than 48 KB"
    assert sweep.skip_reason("make: *** [Makefile:49] Error 2") == "make: *** [Makefile:49] Error 2"


@pytest.mark.skipif(not shutil.which("nvcc"), reason="needs nvcc (the parameters are fa-cuda's registry's)")
@pytest.mark.slow  # builds fa-cuda first (its registry says the families)
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
