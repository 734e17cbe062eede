"""fa ladder: the steps each program runs, the speed-ups between them, the table; end to end on
a GPU (the kernels' own correctness is in test_programs.py)."""
import json

import pytest

from helpers import fa
from fa_cli.measure import ladder
from fa_cli.programs import registry
from fa_cli.programs.programs import Program


def test_each_gpu_program_has_its_ladder(listing_programs):
    """The steps come from each program's kernel registry (`--kernels`)."""
    if "hip-cuda" not in listing_programs:
        pytest.skip("needs nvcc")
    cuda = ladder.steps_for(Program("cuda", listing_programs["cuda"], "cuda"))
    hip = ladder.steps_for(Program("hip-cuda", listing_programs["hip-cuda"], "hip-cuda"))
    cuda_rows = registry.ladder(registry.kernels_of(listing_programs["cuda"]))
    hip_rows = registry.ladder(registry.kernels_of(listing_programs["hip-cuda"]))
    assert [s.env["FA_KERNEL"] for s in cuda] == [r.family for r in cuda_rows]  # in step order
    assert [s.env for s in hip] == [{"FA_KERNEL": r.family, **r.rung.env} for r in hip_rows]
    homework = registry.homework_family(hip_rows)
    # the AMD step: the homework kernel again, with the wavefront-64 tile
    assert [(s.env["FA_KERNEL"], s.env.get("FA_HIP_BC")) for s in hip if s.env["FA_KERNEL"] == homework] == \
        [(homework, "32"), (homework, "64")]
    assert registry.homework_family(cuda_rows) == homework
    assert cuda[:5] == hip[:5]  # the same first steps (src_common/ladder.h)


def test_speedups_are_over_the_step_before_and_the_first():
    records = [{"timing": {"kernel": 8.0}}, {"error": "boom"}, {"timing": {"kernel": 2.0}}, {"timing": {"kernel": 0.5}}]
    ladder.add_speedups(records)
    assert [r["speedup"] for r in records] == [None, None, 4.0, 4.0]
    assert [r["speedup_total"] for r in records] == [1.0, None, 4.0, 16.0]


def test_a_failed_step_shows_as_an_error_row():
    records = [{"step": 1, "step_name": "naive", "idea": "x", "timing": {"kernel": 0.002}, "tflops_kernel": 1.5,
                "max_err": 2e-6, "passed": True, "speedup": None, "speedup_total": 1.0},
               {"step": 2, "step_name": "warp per row", "idea": "y", "error": "exit code 1", "speedup": None}]
    header, rows = ladder.rows(records)
    assert header[:4] == ["step", "what changes", "kernel ms", "TFLOP/s"]
    assert rows[0][2:5] == ["2", "1.5", "-"] and rows[0][-1] == "PASS"
    assert rows[1][-1] == "ERROR: exit code 1" and rows[1][2] == "-"  # each ERROR row carries its reason


def test_the_cpu_program_has_no_ladder(cpu_program, tmp_path):
    proc = fa("ladder", "t01", "--program", "cpu", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("fa: error: cpu lists no kernels (") and "--program cuda, hip or hip-cuda" \
        in proc.stderr


@pytest.mark.gpu
@pytest.mark.parametrize("program", ["cuda", "hip-cuda"])
def test_ladder_end_to_end(tmp_path, program):
    proc = fa("ladder", "t03", "--program", program, "--repeat", 1, "-o", "l.json", "--plot", "l.png", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    records = json.loads((tmp_path / "l.json").read_text())["records"]
    assert [r["step"] for r in records] == list(range(1, 9 if program == "cuda" else 10))
    assert all(r["kind"] == "ladder" and r["passed"] and r["max_err"] < 1e-4 for r in records)
    assert records[5]["build"]["impl"].startswith("tiled") and records[0]["build"]["impl"] == "ladder-1"
    assert records[6 if program == "cuda" else 7]["build"]["impl"] == "simt"
    assert records[-1]["build"]["impl"] == ("tensorcore-fused" if program == "cuda" else "mfma")
    assert (tmp_path / "l.png").read_bytes()[:4] == b"\x89PNG"
