"""fa resources: compiler reports parsed, occupancy checked against CUDA's own calculator, and the
command run for the course's targets (nvcc and hipcc; no GPU)."""
import json
import os
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from helpers import fa
from fa_cli.measure import resources
from fa_cli.measure.resources import KernelUsage
from fa_cli.programs import registry

DATA = Path(__file__).with_name("data")


def cuda_include() -> Path | None:
    """The CUDA toolkit's include folder, as nvcc itself reports its install (TOP=)."""
    if not shutil.which("nvcc"):
        return None
    dry = subprocess.run(["nvcc", "--dryrun", "-E", "-x", "cu", os.devnull], capture_output=True, text=True).stderr
    top = next((line.split("TOP=", 1)[1].strip() for line in dry.splitlines() if "TOP=" in line), None)
    include = Path(top) / "include" if top else None
    return include.resolve() if include and (include / "cuda_occupancy.h").is_file() else None


@pytest.fixture(scope="module")
def cuda_calculator(tmp_path_factory):
    """CUDA's occupancy calculator (cuda_occupancy.h, host code) built into a small program."""
    include = cuda_include()
    if include is None:
        pytest.skip("needs the CUDA toolkit's cuda_occupancy.h (nvcc)")
    exe = tmp_path_factory.mktemp("occ") / "reference"
    subprocess.run(["g++", "-std=c++17", f"-I{include}", "-o", str(exe), str(DATA / "cuda_occupancy_reference.cpp")],
                   check=True)
    return exe


@pytest.mark.parametrize("name", [n for n in resources.TARGETS if n.startswith("sm_")])
def test_nvidia_occupancy_matches_cudas_calculator(cuda_calculator, name):
    t = resources.TARGETS[name]
    rng = random.Random(name)
    cases = [(rng.randint(16, 255), rng.choice([32, 64, 96, 128, 256, 384, 512, 1024]),
              rng.choice([0, 1000, 18688, 35072]), rng.choice([0, 0, 40960, 73728, 100000]))
             for _ in range(300)]
    cases = [c for c in cases if c[2] + c[3] <= t.smem_per_block]
    major, minor = int(name[3]), int(name[4])
    proc = subprocess.run([str(cuda_calculator), str(major), str(minor), str(t.max_warps * 32), str(t.smem_per_sm),
                           str(t.smem_per_block), str(t.reserved_smem)],
                          input="".join(f"{r} {th} {s} {d}\n" for r, th, s, d in cases), capture_output=True,
                          text=True, check=True)
    expected = [int(x) for x in proc.stdout.split()]
    for (regs, threads, smem, dyn), blocks in zip(cases, expected):
        u = KernelUsage(name, "k", threads=threads, registers=regs, static_smem=smem, dynamic_smem=dyn)
        resources.nvidia_occupancy(u, t)
        assert u.blocks == blocks, (regs, threads, smem, dyn)
        assert u.warps == blocks * -(-threads // 32) and u.limited_by


def test_amd_occupancy_by_hand():
    """gfx90a, worked by hand: 92 VGPRs -> 96 (granule 8) -> 512 // 96 = 5 waves; a 37376-byte
    workgroup of 16 waves: one per 64 KB CU, 16 / 4 SIMDs = 4 waves, the limit."""
    u = KernelUsage("gfx90a", "k", threads=1024, registers=92, sgprs=30, static_smem=37376)
    resources.amd_occupancy(u, resources.TARGETS["gfx90a"])
    assert (u.blocks, u.warps, u.limited_by) == (1, 4, ["LDS"]) and u.occupancy == 0.5
    # gfx908 keeps AGPRs in a file of their own: 83 VGPRs -> 84 -> 256 // 84 = 3 waves.
    u = KernelUsage("gfx908", "k", threads=512, registers=83, agprs=10, sgprs=30, static_smem=18688)
    resources.amd_occupancy(u, resources.TARGETS["gfx908"])
    assert (u.warps, u.limited_by) == (3, ["VGPRs"])


def test_short_names():
    assert resources.short_name("void fa::attention_tiled<64, 32>(float const*, float*)") == "attention_tiled<64, 32>"
    assert resources.short_name("flash(float*)") == "flash"
    assert resources.short_name("void a::b<c::d<1>>::run(int)") == "run"


def test_parse_ptxas_and_ptx():
    """Lines as nvcc 13 prints them (-Xptxas -v) and as its PTX declares an entry."""
    text = ("ptxas info    : Compiling entry function '_Z1kPf' for 'sm_90'\n"
            "ptxas info    : Function properties for _Z1kPf\n"
            "    64 bytes stack frame, 68 bytes spill stores, 68 bytes spill loads\n"
            "ptxas info    : Used 255 registers, used 1 barriers, 35072 bytes smem\n"
            "ptxas info    : Compiling entry function '_Z1kPf' for 'sm_80'\n"
            "ptxas info    : Used 12 registers, used 0 barriers\n")
    (u,) = resources.parse_ptxas(text, "sm_90").values()
    assert (u.registers, u.spill_bytes, u.static_smem) == (255, 68, 35072)
    ptx = ".visible .entry _Z1kPf(\n\t.param .u64 _Z1kPf_param_0\n)\n.maxntid 128, 1, 1\n{\n}\n" \
          ".visible .entry _Z1gv()\n{\n}\n"
    assert resources.parse_ptx_threads(ptx) == {"_Z1kPf": 128}


def test_records_name_the_commit_of_fa_they_were_made_with():
    """Like every other record, so that make results' resources files say which code they measured."""
    from fa_cli.report import records

    [record] = resources.as_records([KernelUsage(target="sm_90", kernel="k", registers=64)], "cuda")
    assert record["source"] == records.source_revision() and record["source"].get("commit")
    assert (record["kind"], record["program"], record["registers"]) == ("resources", "cuda", 64)
    assert records.kind_of(record) == "resources"


def run_resources(*args):
    proc = fa("resources", *args, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.skipif(not shutil.which("nvcc"), reason="needs nvcc")
@pytest.mark.slow
def test_cuda_program_on_course_targets():
    data = run_resources("--program", "cuda", "--arch", "sm_75,sm_80,sm_90")
    by = {(r["target"], r["kernel"]): r for r in data["records"]}
    assert {t for t, _ in by} == {"sm_75", "sm_80", "sm_90"}
    for target in ("sm_75", "sm_80", "sm_90"):
        tiled = by[(target, "attention_tiled<64, 32>")]
        # two stages of K (pitch 65) and V, P, and the row reductions' parts (one per row at Bc = 32)
        assert tiled["threads"] == 512 and \
            tiled["static_smem"] == 32 * 65 * 4 * 2 + 32 * 64 * 4 * 2 + 16 * 32 * 4 + 16 * 1 * 4
        assert 0 < tiled["occupancy"] <= 1 and tiled["limited_by"]
    # The tensor-core kernel exists from sm_80 on, with the dynamic shared memory its launch asks.
    for target in ("sm_80", "sm_90"):
        tc = by[(target, "attention_tensorcore<64, false>")]
        assert tc["threads"] == 128 and tc["dynamic_smem"] == 2 * 4 * 64 * 72 * 2 and tc["registers"] > 128
    assert "-Xptxas -v" in data["commands"][0]


@pytest.mark.skipif(not shutil.which("hipcc"), reason="needs hipcc (apt-get install hipcc)")
@pytest.mark.slow
def test_hip_program_on_course_targets(listing_programs):
    if "hip" not in listing_programs:
        pytest.skip("needs hipcc, to list fa-hip's kernels")
    data = run_resources("--program", "hip", "--arch", "gfx908,gfx90a")
    kernels = {(r["target"], r["kernel"]) for r in data["records"]}
    # the ladder's first steps (src_common/ladder.h), which the registry lists by step, not by kernel
    ladder = [f"naive<{d}, 128>" for d in (32, 64)] + [f"warp_per_row<{d}, 128>" for d in (32, 64)] + \
        [f"smem_tiles<{d}, {br}, {pad}>" for d in (32, 64) for br, pad in ((4, "false"), (4, "true"), (16, "true"))]
    # the registry's kernels with tiles (AMD's): attention_FAMILY<d, ...> for each d; the homework
    # kernel's exactly, by its sweep row's kernel name
    rows = [r for r in registry.kernels_of(listing_programs["hip"]) if r.tiles]
    swept = {r.sweep.kernel_name.format(d=d, **tiles) for r in rows if r.sweep for d, tiles in r.tiles.items()}
    others = sorted(f"attention_{r.family}<{d}" for r in rows if not r.sweep for d in r.tiles)
    for target in ("gfx908", "gfx90a"):
        reported = {k for t, k in kernels if t == target}
        assert set(ladder) <= reported and swept <= reported, target
        rest = sorted(reported - set(ladder) - swept)
        assert [k.split(",")[0].rstrip(">") for k in rest] == others, target
    assert {t for t, _ in kernels} == {"gfx908", "gfx90a"}
    # the ladder's (src_common/ladder.h) and the MFMA kernel's four wavefronts
    threads = {"naive": 128, "warp_per_row": 128, "attention_mfma": 256}
    for r in data["records"]:
        name, args = r["kernel"].rstrip(">").split("<")
        args = args.split(", ")
        if name == "attention_simt":  # R x C threads; dynamic LDS within 32 KB: two blocks a CU, two waves a SIMD
            assert r["threads"] == int(args[3]) * int(args[4]) and 0 < r["dynamic_smem"] <= 32768, r["kernel"]
            assert r["spill_bytes"] == 0 and r["warps"] >= 2, r
            continue
        expected = 16 * int(args[1]) if name == "attention_tiled" else threads.get(name) or 32 * int(args[1])
        if name == "attention_mfma":
            assert r["spill_bytes"] == 0 and r["agprs"] is not None, r
        assert r["threads"] == expected, r["kernel"]
        assert r["registers"] > 0 and r["sgprs"] > 0 and r["compiler_waves"] and r["limited_by"]
        assert r["warps"] <= resources.TARGETS[r["target"]].max_waves_per_simd


@pytest.mark.skipif(not shutil.which("nvcc"), reason="needs nvcc")
def test_a_students_own_source(tmp_path):
    src = tmp_path / "hw4.cu"
    src.write_text("__global__ void __launch_bounds__(256) scale(float* x) { x[threadIdx.x] *= 2.f; }\n"
                   "__global__ void plain(float* x) { x[0] = 1.f; }\nint main() {}\n")
    data = run_resources("--program", src, "--arch", "sm_75")
    by = {r["kernel"]: r for r in data["records"]}
    assert by["scale"]["threads"] == 256 and by["scale"]["occupancy"] == 1.0
    assert by["plain"]["threads"] is None and "threads per block unknown" in by["plain"]["note"]


def test_bad_arguments(tmp_path):
    proc = fa("resources", "--arch", "sm_99")
    assert proc.returncode == 2 and "sm_99: not one of" in proc.stderr
    proc = fa("resources", "--program", tmp_path / "nope.cu")
    assert proc.returncode == 2 and "no such source" in proc.stderr
    proc = fa("resources", "--program", "hip", "--arch", "sm_90")
    assert proc.returncode == 2 and "not a target of hip" in proc.stderr


@pytest.mark.slow  # make test-all: nvcc builds (docs/testing.md)
@pytest.mark.skipif(not shutil.which("nvcc"), reason="needs nvcc")
def test_a_source_the_courses_standard_does_not_build_is_said_so(tmp_path):
    """fa resources compiles a student's source as the course does (-std=c++11 for a .cu): one that
    needs C++17 still gets its report (C++17's) and a line that the course's build will fail."""
    source = tmp_path / "hw4.cu"
    starter = Path(__file__).parent.parent / "fa_cli" / "starter" / "hw4.cu"
    source.write_text("#include <optional>\nstatic std::optional<int> unused17;\n" + starter.read_text())
    proc = fa("resources", "--program", str(source), "--arch", "sm_80", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["records"]
    assert "hw4.cu does not build as the course builds it (-std=c++11)" in proc.stderr
    assert "-std=c++17" in json.loads(proc.stdout)["commands"][0]
    source.write_text(starter.read_text())
    proc = fa("resources", "--program", str(source), "--arch", "sm_80", "--json", cwd=tmp_path)
    assert proc.returncode == 0 and "does not build" not in proc.stderr
    assert "-std=c++11" in json.loads(proc.stdout)["commands"][0]


@pytest.mark.slow  # make test-all: nvcc builds (docs/testing.md)
@pytest.mark.skipif(not shutil.which("nvcc"), reason="needs nvcc")
def test_a_source_whose_toolkit_headers_refuse_cxx11_is_not_said_to_need_cxx17(tmp_path):
    """Cooperative groups under CUDA 13: its own headers stop -std=c++11, not the source; the report
    (C++17's) says so, and not that the course's build will fail (the judge's CUDA 12 takes it)."""
    from test_student_build import toolkit_refuses_cxx11
    if not toolkit_refuses_cxx11():
        pytest.skip("needs CUDA 13's nvcc")
    source = tmp_path / "hw4.cu"
    starter = Path(__file__).parent.parent / "fa_cli" / "starter" / "hw4.cu"
    source.write_text("#include <cooperative_groups.h>\n" + starter.read_text())
    proc = fa("resources", "--program", str(source), "--arch", "sm_80", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "-std=c++11 stops in this toolkit's own headers" in proc.stderr and "the course's build will fail" not in \
        proc.stderr, proc.stderr
