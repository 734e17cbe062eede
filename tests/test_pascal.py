"""fa resources --arch sm_61 where this nvcc has no sm_61 (CUDA 13): nvcc's PTX assembled by CUDA
12's ptxas (the optional dependency, fa-toolkit[gtx1080]; make test-all installs it). The report
is the assembler's; what Pascal lacks is refused by the assembler, on the source line; a path
kept for sm_80 and later is not. No GPU needed."""
from __future__ import annotations

import json
import os
import shutil

import pytest

from helpers import fa
from fa_cli.measure import pascal

HAVE = bool(shutil.which("nvcc")) and pascal.needs_old_ptxas("sm_61") and pascal.ptxas() is not None
needs_ptxas = pytest.mark.skipif(not HAVE, reason="needs nvcc without sm_61 and CUDA 12's ptxas "
                                                   "(pip install nvidia-cuda-nvcc-cu12)")

COPY = ('asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" :: '
        '"r"((unsigned)__cvta_generic_to_shared(s)), "l"(y));')
MMA_TF32 = ('asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, '
            '{%0,%1,%2,%3};" : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), '
            '"r"(a[3]), "r"(b[0]), "r"(b[1]));')
MMA_BF16 = ('asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, '
            '{%8,%9}, {%0,%1,%2,%3};" : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : "r"(a[0]), "r"(a[1]), '
            '"r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));')


def source(tmp_path, body: str, guarded: bool = False) -> tuple:
    """A hw4.cu whose kernel holds `body` (optionally under #if __CUDA_ARCH__ >= 800); the line
    number the body is on."""
    lines = ["#include <cstdio>", "__global__ void __launch_bounds__(128) k(float* y) {",
             "  __shared__ float s[128];", "  float c[4] = {0, 0, 0, 0}; unsigned a[4] = {1, 2, 3, 4}, b[2] = {5, 6};",
             *(["#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800"] if guarded else []),
             "  " + body, *(["#endif"] if guarded else []),
             "  y[threadIdx.x] = s[threadIdx.x] + c[0];", "}", "int main() { return 0; }"]
    path = tmp_path / "hw4.cu"
    path.write_text("\n".join(lines) + "\n")
    return path, lines.index("  " + body) + 1


@needs_ptxas
def test_a_real_hw4_gets_its_sm61_report(tmp_path):
    """The starter hw4.cu (fa init): registers and shared memory for sm_61, from CUDA 12's ptxas."""
    assert fa("init", tmp_path / "hw4").returncode == 0
    proc = fa("resources", "--program", tmp_path / "hw4" / "hw4.cu", "--arch", "sm_61", "--json")
    assert proc.returncode == 0, proc.stderr
    records = json.loads(proc.stdout)["records"]
    assert records and {r["target"] for r in records} == {"sm_61"}
    assert all(r["registers"] > 0 and r["threads"] for r in records)
    assert any("ptxas" in c and "sm_61" in c for c in json.loads(proc.stdout)["commands"])


@needs_ptxas
@pytest.mark.parametrize("body, feature", [(COPY, "cp.async"), (MMA_TF32, "mma"), (MMA_BF16, "mma")],
                         ids=["cp.async", "tf32", "bf16"])
def test_what_pascal_lacks_is_refused_on_its_line(tmp_path, body, feature):
    path, line = source(tmp_path, body)
    proc = fa("resources", "--program", path, "--arch", "sm_61")
    assert proc.returncode == 1
    error = [l for l in proc.stderr.splitlines() if l.startswith("fa: error:")]
    assert error and "does not build for the GTX 1080 (sm_61)" in error[0], proc.stderr
    assert f"hw4.cu:{line}: " in error[0] and feature in error[0] and "requires .target sm_80" in error[0]


@needs_ptxas
def test_a_path_kept_for_sm80_is_not_refused(tmp_path):
    path, _ = source(tmp_path, COPY, guarded=True)
    proc = fa("resources", "--program", path, "--arch", "sm_61")
    assert proc.returncode == 0, proc.stderr
    assert "compiled as for 7.5" in proc.stdout


@pytest.mark.skipif(not shutil.which("nvcc") or not pascal.needs_old_ptxas("sm_61"), reason="needs nvcc without sm_61")
def test_without_the_old_ptxas_one_line_says_how_to_get_it(tmp_path):
    path, _ = source(tmp_path, "y[0] = 1;")
    proc = fa("resources", "--program", path, "--arch", "sm_61",
              env={**os.environ, "FA_PTXAS_SM61": str(tmp_path / "none")})
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("fa: error: fa resources sm_61: this nvcc has no sm_61") \
        and "pip install" in proc.stderr


def test_source_lines_come_from_the_ptx_line_information():
    ptx = '.file 1 "/x/hw4.cu"\n.entry k(\n{\n.loc 1 7 3\nld.global.f32 %f1, [%rd1];\n.loc 1 9 1\ncp.async\n}\n'
    assert pascal.source_line(ptx, 5) == "hw4.cu:7" and pascal.source_line(ptx, 7) == "hw4.cu:9"
    out = "ptxas x.ptx, line 7; error   : Feature 'cp.async' requires .target sm_80 or higher\n"
    assert pascal.refusals(out, ptx) == ["hw4.cu:9: Feature 'cp.async' requires .target sm_80 or higher"]
    assert ".target sm_61" in pascal.retargeted(".version 9.0\n.target sm_75\n", "sm_61")


@needs_ptxas
def test_fa_runs_notes_say_only_what_the_gtx1080_would_not_take(tmp_path):
    """gtx1080_report (fa run's notes for a hw4.cu under the rules): a kernel of 64 KB of static
    shared memory does not build for sm_61, in ptxas's words; cp.async on its line; the starter
    gives no note; the notes, with each kernel's registers, are made once per build and kept
    beside the program."""
    from fa_cli.measure import gtx1080_report
    from fa_cli.programs.programs import Program

    big = tmp_path / "big.cu"
    big.write_text("__global__ void big(float* y) { __shared__ float s[16384]; s[threadIdx.x] = y[threadIdx.x];\n"
                   "  __syncthreads(); y[threadIdx.x] = s[(threadIdx.x + 1) % 16384]; }\nint main() { return 0; }\n")
    [line] = gtx1080_report.report_for(big)[0]
    assert line.startswith("big.cu does not build for the GTX 1080 (sm_61): ") and "too much shared data" in line
    path, at = source(tmp_path, COPY)
    [line] = gtx1080_report.report_for(path)[0]
    assert f"hw4.cu:{at}: " in line and "cp.async" in line
    assert fa("init", tmp_path / "starter").returncode == 0
    built = tmp_path / "build"
    built.mkdir()
    prog = Program("hw4.cu", built / "hw4", source=tmp_path / "starter" / "hw4.cu")
    assert gtx1080_report.run_notes(prog) == []
    kept = json.loads((built / gtx1080_report.KEPT).read_text())
    assert kept["notes"] == [] and kept["registers"] and all(r > 0 for r in kept["registers"].values())
    assert gtx1080_report.registers(prog) == kept["registers"]  # the estimate's sm_61 registers, by kernel
    (built / gtx1080_report.KEPT).write_text(json.dumps({"notes": ["kept"], "registers": {"k<64>": 40}}))
    assert gtx1080_report.run_notes(prog) == ["kept"] and gtx1080_report.registers(prog) == {"k<64>": 40}


def test_the_missing_ptxas_line_is_said_once_per_installation_and_the_report_made_once_installed(tmp_path,
                                                                                                monkeypatch):
    """A batch of hw4.cu runs on a CUDA 13 machine: the line that CUDA 12's ptxas is missing comes
    with the first run of this installation only; once it is installed, the report is made."""
    from types import SimpleNamespace
    from fa_cli.measure import gtx1080_report

    monkeypatch.setenv("FA_CACHE", str(tmp_path / "cache"))
    (tmp_path / "cache").mkdir()  # (the first build made it)
    monkeypatch.setattr(pascal, "needs_old_ptxas", lambda target: True)
    monkeypatch.setattr(pascal, "ptxas", lambda: None)
    builds = []
    for name in ("alice", "bob", "carol"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "hw4.cu").write_text("// a student's\n")
        builds.append(SimpleNamespace(source=tmp_path / name / "hw4.cu", path=tmp_path / name / "hw4"))
    said = [gtx1080_report.run_notes(b) for b in builds]
    assert len(said[0]) == 1 and gtx1080_report.NO_PTXAS in said[0][0] and said[1:] == [[], []]
    monkeypatch.setattr(pascal, "ptxas", lambda: "/opt/cuda12/ptxas")  # installed now
    monkeypatch.setattr(gtx1080_report.resources, "report", lambda *a, **k: ([], [], None))
    assert gtx1080_report.run_notes(builds[0]) == [] and gtx1080_report.kept_report(builds[0])["registers"] == {}
