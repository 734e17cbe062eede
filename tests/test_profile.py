"""fa profile: the profilers' command lines, their outputs parsed (ncu: a real log from the H100;
nvprof and rocprof: files written by hand in the layouts their documentation gives, since
neither a Pascal nor an AMD GPU is reachable), per-kernel figures, and the command end to end
with a stand-in profiler that replays the real ncu log."""
import json
import os
import sys

import pytest

from helpers import DATA, fa
from fa_cli.errors import FaError
from fa_cli.measure import profile
from fa_cli.programs import ready


def test_ncu_command(tmp_path):
    argv = profile.command("ncu", tmp_path, "attention", False)
    assert argv[0] == "ncu" and "--csv" in argv and argv[argv.index("--page") + 1] == "raw"
    metrics = argv[argv.index("--metrics") + 1].split(",")
    assert "sm__warps_active.avg.pct_of_peak_sustained_active" in metrics and "gpu__time_duration.sum" in metrics
    assert argv[argv.index("--kernel-name") + 1] == "regex:attention"
    assert argv[argv.index("--log-file") + 1] == str(tmp_path / "ncu.csv")
    assert "--set" in profile.command("ncu", tmp_path, None, True)


def test_nvprof_and_rocprof_commands(tmp_path):
    argv = profile.command("nvprof", tmp_path, None, False)
    assert argv[:2] == ["nvprof", "--csv"] and "achieved_occupancy" in argv[argv.index("--metrics") + 1]
    argv = profile.command("rocprof", tmp_path, None, False)
    assert argv[:3] == ["rocprof", "-i", str(tmp_path / "input.txt")]
    lines = (tmp_path / "input.txt").read_text().splitlines()
    assert lines == ["pmc: SQ_WAVES SQ_INSTS_VALU SQ_INSTS_LDS SQ_INSTS_VMEM_RD",
                     "pmc: SQ_INSTS_VMEM_WR SQ_LDS_BANK_CONFLICT SQ_BUSY_CYCLES GRBM_GUI_ACTIVE"]
    argv = profile.command("rocprofv3", tmp_path, None, False)
    assert argv[0] == "rocprofv3" and argv[-1] == "--" and "SQ_INSTS_LDS" in argv


def test_parse_real_ncu_log():
    """`ncu --csv --page raw --print-units base` of fa-cuda on 2 x 300 x 64, captured on the H100."""
    launches = profile.parse_ncu((DATA / "ncu-raw-h100.csv").read_text())
    by = {l.kernel: l for l in launches}
    assert set(by) == {"split_kv", "attention_tensorcore<64, 0>", "attention_tiled<64, 32>"}
    tc = by["attention_tensorcore<64, 0>"]
    assert tc.time_s == pytest.approx(16064e-9) and tc.values["registers"] == 231
    assert tc.values["achieved occupancy"] == pytest.approx(6.23)


NVPROF = """==1234== NVPROF is profiling process 1234, command: ./hw4 t01.in o
"Device","Context","Stream","Name","Correlation_ID","Duration","achieved_occupancy","sm_efficiency","shared_load_throughput","shared_store_throughput","gld_throughput","gst_throughput","shared_ld_bank_conflict","shared_st_bank_conflict"
"","","","","","s","","%","","","","","",""
"GeForce GTX 1080 (0)","1","7","[CUDA memcpy HtoD]","10","0.000100","","","","","","","",""
"GeForce GTX 1080 (0)","1","7","flash_attention(float*, float*)","11","0.002000","0.500000","80.0","100.0GB/s","10.0GB/s","200.0GB/s","20.0GB/s","0","5"
"GeForce GTX 1080 (0)","1","7","flash_attention(float*, float*)","12","0.006000","0.700000","90.0","300.0GB/s","30.0GB/s","400.0GB/s","40.0GB/s","10","15"
"""


def test_parse_nvprof_and_aggregate():
    """nvprof's --csv --print-gpu-trace --metrics layout (written by hand: no Pascal GPU here)."""
    launches = profile.parse_nvprof(NVPROF)
    assert [l.kernel for l in launches] == ["flash_attention", "flash_attention"]
    (k,) = profile.aggregate(launches, None, flops=8 * 10**9, flops_kernel=None)
    assert k.launches == 2 and k.time_s == pytest.approx(0.008)
    # Rates and percentages weighted by time: (2 * x1 + 6 * x2) / 8; counts added.
    assert k.metrics["achieved occupancy"] == pytest.approx((2 * 50 + 6 * 70) / 8)
    assert k.metrics["shared load"] == pytest.approx((2 * 100e9 + 6 * 300e9) / 8)
    assert k.metrics["shared st conflicts"] == 20 and k.tflops == pytest.approx(1.0)


ROCPROF = """Index,KernelName,gpu-id,queue-id,queue-index,pid,tid,grd,wgr,lds,scr,arch_vgpr,accum_vgpr,sgpr,wave_size,sig,obj,SQ_WAVES,SQ_INSTS_VALU,SQ_INSTS_LDS,SQ_INSTS_VMEM_RD,SQ_INSTS_VMEM_WR,SQ_LDS_BANK_CONFLICT,SQ_BUSY_CYCLES,GRBM_GUI_ACTIVE,DispatchNs,BeginNs,EndNs,CompleteNs
0,"void fa::attention_tiled<64, 64>(float const*, float*, long, long, int const*) [clone .kd]",0,0,0,1,1,1024,1024,37120,0,128,0,34,64,0,0,256,1000000,200000,50000,10000,100000,800000,1000000,100,1000,1001000,1002000
"""


def test_parse_rocprof_and_derived_figures():
    """rocprof v1's results CSV (written by hand in its documented layout: no AMD GPU here)."""
    (k,) = profile.aggregate(profile.parse_rocprof(ROCPROF), None, None, None)
    assert k.kernel == "attention_tiled<64, 64>" and k.time_s == pytest.approx(1e-3)
    m = k.metrics
    assert m["VALU instructions/s"] == pytest.approx(1e6 / 1e-3)
    assert m["LDS bytes/s"] == pytest.approx(200000 * 64 * 4 / 1e-3)
    assert m["global read bytes/s"] == pytest.approx(50000 * 256 / 1e-3)
    assert m["global write bytes/s"] == pytest.approx(10000 * 256 / 1e-3)
    assert m["bank conflict cycles per LDS instruction"] == pytest.approx(0.5)
    assert m["SQ busy %"] == pytest.approx(80.0)


def test_parse_rocprofv3():
    counters = ("Correlation_Id,Dispatch_Id,Agent_Id,Queue_Id,Process_Id,Thread_Id,Grid_Size,Kernel_Id,Kernel_Name,"
                "Workgroup_Size,LDS_Block_Size,Scratch_Size,VGPR_Count,Accum_VGPR_Count,SGPR_Count,Counter_Name,"
                "Counter_Value,Start_Timestamp,End_Timestamp\n"
                '1,1,1,1,9,9,1024,3,"k(float*)",1024,0,0,8,0,16,SQ_INSTS_LDS,100,0,0\n'
                '1,1,1,1,9,9,1024,3,"k(float*)",1024,0,0,8,0,16,SQ_INSTS_VALU,400,0,0\n')
    trace = "Kind,Agent_Id,Queue_Id,Kernel_Id,Kernel_Name,Correlation_Id,Dispatch_Id,Start_Timestamp,End_Timestamp\n" \
            'KERNEL_DISPATCH,1,1,3,"k(float*)",1,1,1000,3000\n'
    (launch,) = profile.parse_rocprofv3(counters, trace)
    assert launch.kernel == "k" and launch.time_s == pytest.approx(2e-6)
    assert launch.values == {"SQ_INSTS_LDS": 100, "SQ_INSTS_VALU": 400}


def test_profile_command_end_to_end(cpu_program, stand_in_ncu, tmp_path):
    out = tmp_path / "p.json"
    proc = fa("profile", "t01", "--program", "cpu", "--profiler", "ncu", "-o", out, "--markdown", env=stand_in_ncu,
              cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    # three kernels of one run: in 80 columns, a column per kernel under a line naming the run
    table = proc.stdout.splitlines()
    assert table[0] == "Every row: input t01; program cpu." and max(len(l) for l in table if l.startswith("|")) <= 80
    assert "| kernel | attention_tensorcore<64, 0> | split_kv | attention_tiled<64, 32> |" in table
    records = json.loads(out.read_text())["records"]
    tc = next(r for r in records if r["kernel"].startswith("attention_tensorcore"))
    assert tc["profiler"] == "ncu" and tc["metric_names"]["achieved occupancy"].startswith("sm__warps_active")
    assert tc["tflops"] == pytest.approx(4 * 2 * 128 * 128 * 32 / 16064e-9 / 1e12)  # t01's work over its time
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin", "p.json"]


def test_profile_errors(cpu_program, stand_in_ncu, tmp_path, monkeypatch):
    with monkeypatch.context() as m, \
            pytest.raises(FaError, match=r"^nvprof is not installed here \(it comes with the CUDA toolkit"):
        m.setattr(ready.shutil, "which", lambda tool: None)  # a GPU node without nvprof
        ready.check_profiler("nvprof")
    proc = fa("profile", "t01", "--program", "cpu", "--profiler", "ncu", "--kernel", "nosuch", env=stand_in_ncu)
    assert proc.returncode == 2 and "--kernel nosuch: matches none of the kernels that ran" in proc.stderr
    bad = tmp_path / "bad.in"
    bad.write_bytes(b"\0" * 12)
    proc = fa("profile", "t01", "--program", tmp_path / "nope", env=stand_in_ncu)
    assert proc.returncode == 2 and f"{tmp_path / 'nope'}: no such file" in proc.stderr
    failing = tmp_path / "failing"
    failing.write_text(f"#!{sys.executable}\nimport sys\nprint('failing: error: no GPU', file=sys.stderr)\nsys.exit(1)\n")
    failing.chmod(0o755)
    proc = fa("profile", "t01", "--program", failing, "--profiler", "ncu", env=stand_in_ncu)
    assert proc.returncode == 1 and proc.stderr.strip() == "fa: error: failing under ncu on t01: failing: error: no GPU"


def test_help_has_the_metric_table_and_the_formulas():
    """Each figure, its ncu metric and its nvprof one on lines of their own (80 columns)."""
    text = fa("profile", "--help").stdout
    rows = [line.strip() for line in text.splitlines()]
    for figure, ncu, nvprof in profile.NVIDIA_METRICS:
        at = rows.index(f"{figure}:")
        assert rows[at + 1] == ncu and (nvprof is None or rows[at + 2] == nvprof)
    for figure, formula in profile.AMD_FORMULAS:
        assert " ".join(f"  {figure} = {formula}".split()) in " ".join(text.split())


def test_a_cpu_program_is_not_profiled_and_says_why(cpu_program):
    """Without a profiler, a CPU program is told that it has no kernels to profile, not that the
    profiler is missing."""
    proc = fa("profile", "t17", "--program", "cpu", env={**os.environ, "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "runs on the CPU: fa profile measures a GPU program's kernels" in proc.stderr
