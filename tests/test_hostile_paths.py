"""The paths around the input checks: devices, FIFOs and symlinks as outputs, FIFOs as inputs,
shell text in directory names, fa stopped by SIGKILL or SIGHUP, numbers out of range. Each test
is a reproducer of a failure once found, with the behaviour expected now."""
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from helpers import fa
from fa_cli.cases import generate
from fa_cli.cases.format import Shape
from test_no_leftovers import running_on

AS_ROOT = os.geteuid() == 0
SMALL = Shape(1, 64, 32)


def one_line(proc) -> str:
    lines = [l for l in proc.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def device(tmp_path: Path, path: str) -> Path:
    """A device as an output: itself, or as root a symlink to it (a writer that replaced its
    output would otherwise delete the real device)."""
    if not AS_ROOT:
        return Path(path)
    link = tmp_path / Path(path).name
    link.symlink_to(path)
    return link


# ----------------------------------------------------------------------------- outputs
def test_gen_to_dev_full_is_a_write_error(tmp_path):
    out = device(tmp_path, "/dev/full")
    proc = fa("gen", "-B", 1, "-N", 64, "-d", 32, "-o", out)
    assert proc.returncode == 1 and "write failed: No space left on device" in one_line(proc)
    assert Path("/dev/full").is_char_device() and (not AS_ROOT or out.is_symlink())


def test_gen_to_dev_null_writes_in_place(tmp_path):
    out = device(tmp_path, "/dev/null")
    proc = fa("gen", "-B", 1, "-N", 64, "-d", 32, "-o", out)
    assert proc.returncode == 0, proc.stderr
    assert Path("/dev/null").is_char_device() and (not AS_ROOT or out.is_symlink())
    assert sorted(p.name for p in tmp_path.iterdir()) == ([out.name] if AS_ROOT else [])


def test_gen_through_a_symlink_writes_its_target(tmp_path):
    (tmp_path / "link.in").symlink_to("target.in")
    proc = fa("gen", "-B", 1, "-N", 64, "-d", 32, "-o", tmp_path / "link.in")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "link.in").is_symlink() and (tmp_path / "target.in").stat().st_size == SMALL.input_bytes
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.in", "target.in"]


def test_gen_into_a_fifo(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    proc = fa("gen", "-B", 1, "-N", 64, "-d", 32, "-o", fifo)
    reader.join(10)
    assert proc.returncode == 0 and fifo.is_fifo() and len(got[0]) == SMALL.input_bytes


def test_program_output_name_too_long_is_refused_before_work(cpu_program, tmp_path):
    inp = tmp_path / "x.in"
    generate.write_input(inp, Shape(64, 2048, 64), 1)  # seconds of work, were it done first
    start = time.monotonic()
    proc = subprocess.run([str(cpu_program), str(inp), str(tmp_path / ("o" * 256))], capture_output=True, text=True)
    assert proc.returncode == 2 and "output name is too long" in one_line(proc)
    assert time.monotonic() - start < 0.5 and sorted(p.name for p in tmp_path.iterdir()) == ["x.in"]


def test_gen_output_name_too_long(tmp_path):
    proc = fa("gen", "-B", 1, "-N", 64, "-d", 32, "-o", tmp_path / ("o" * 256))
    assert proc.returncode == 2 and "output name is too long" in one_line(proc)
    assert list(tmp_path.iterdir()) == []


def test_empty_output_name(tmp_path):
    proc = fa("gen", "-B", 1, "-N", 64, "-d", 32, "-o", "", cwd=tmp_path)
    assert proc.returncode == 2 and one_line(proc) == "fa: error: output path is empty"
    assert list(tmp_path.iterdir()) == []


def test_gen_expected_same_as_output(tmp_path):
    proc = fa("gen", "-B", 1, "-N", 64, "-d", 32, "-o", "same.in", "--expected", "same.in", cwd=tmp_path)
    assert proc.returncode == 2 and "--expected names the input file -o writes" in one_line(proc)
    assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------- inputs
def test_verify_fifo_input_does_not_block(tmp_path):
    os.mkfifo(tmp_path / "f")
    (tmp_path / "o.out").write_bytes(b"\0" * 4)
    proc = subprocess.run([sys.executable, "-m", "fa_cli", "verify", "o.out", "--input", "f"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=20)
    assert proc.returncode == 2 and one_line(proc) == "fa: error: f: input is a FIFO, not a regular file"


def test_verify_expected_device(tmp_path):
    (tmp_path / "o.out").write_bytes(b"\0" * 4)
    proc = fa("verify", tmp_path / "o.out", "--expected", "/dev/zero")
    assert proc.returncode == 2
    assert one_line(proc) == "fa: error: /dev/zero: expected output is a character device, not a regular file"


# ----------------------------------------------------------------------------- numbers
@pytest.mark.parametrize("args, says", [
    (["gen", "-B", 1, "-N", 64, "-d", 32, "--seed", -5, "-o", "x.in"], "'--seed': -5 is not in the range x>=0"),
    (["gen", "-B", 2147483648, "-N", 64, "-d", 32, "-o", "x.in"], "B = 2147483648, must be at most 2147483647"),
    (["gen", "-B", 1, "-N", -1, "-d", 32, "-o", "x.in"], "N = -1, must be positive"),
    (["gen", "-B", 1, "-N", 64, "-d", 48, "-o", "x.in"], "d = 48 is not supported"),
    (["verify", "o.out", "--input", "x.in", "--seed", -1], "'--seed': -1 is not in the range x>=0"),
    (["verify", "o.out", "--input", "x.in", "--tol", "nan"], "a tolerance must be a finite number above 0"),
    (["verify", "o.out", "--input", "x.in", "--tol", "inf"], "a tolerance must be a finite number above 0"),
    (["verify", "o.out", "--input", "x.in", "--tol", -1], "a tolerance must be a finite number above 0"),
    (["verify", "o.out", "--input", "x.in", "--tol", 0], "a tolerance must be a finite number above 0"),
    (["bench", "--program", "cpu", "--shape", "2,2147483648,32", "-o", "r.json"], "N = 2147483648, must be at most"),
    (["bench", "--program", "cpu", "--shape", "20000,100000000,32", "-o", "r.json"], "needs 7.68e+05 GB"),
    (["gen", "-B", 100000, "-N", 32768, "-d", 64, "-o", "x.in"], "needs 2.52e+03 GB (2516582400012 bytes)"),
])
def test_numbers_out_of_range_are_one_line(tmp_path, args, says):
    proc = fa(*args, cwd=tmp_path)
    assert proc.returncode == 2 and says in one_line(proc)
    assert list(tmp_path.iterdir()) == []


def test_gen_needing_more_than_one_batch_in_memory(tmp_path):
    """-B 4 -N 100000000 -d 32: each batch is 38 GB; refused for its size where the disk has not
    the room (the usual case), never a numpy allocation error (generation streams by rows)."""
    proc = fa("gen", "-B", 4, "-N", 100000000, "-d", 32, "-o", "x.in", cwd=tmp_path)
    if proc.returncode == 0:
        pytest.skip("this disk holds 154 GB: the file was written")
    assert proc.returncode == 2 and "needs 154 GB (153600000012 bytes)" in one_line(proc)


def test_nan_output_fails_verification(tmp_path):
    inp, out = tmp_path / "ok.in", tmp_path / "nan.out"
    generate.write_input(inp, SMALL, 1)
    out.write_bytes(np.full(SMALL.elements, np.nan, "<f4").tobytes())
    proc = fa("verify", out, "--input", inp, "--tol", "1e30")
    assert proc.returncode == 1 and "FAIL" in proc.stdout


# ----------------------------------------------------------------------------- results files
def test_compare_takes_run_records_and_refuses_profile_ones(cpu_program, tmp_path):
    proc = fa("run", "t01", "--program", "cpu", "-o", "r.json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    proc = fa("compare", "r.json", "--markdown", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("Whole-process medians on host CPU; the speed-up is over cpu:") and \
        "| t01 (2x128x32) | cpu |" in proc.stdout
    (tmp_path / "p.json").write_text(json.dumps({"records": [{"kind": "profile", "profiler": "ncu"}]}))
    proc = fa("compare", "p.json", cwd=tmp_path)
    assert proc.returncode == 2 and "nothing to compare" in one_line(proc) and "profile records" in proc.stderr
    (tmp_path / "bad.json").write_text(json.dumps({"records": [1, 2]}))
    proc = fa("compare", "bad.json", cwd=tmp_path)
    assert proc.returncode == 2 and "a record fa does not know" in one_line(proc)


# ----------------------------------------------------------------------------- signals
def start_fa_run(inp: Path, cwd: Path, env: dict) -> subprocess.Popen:
    # --sample: no float64 expected output of the whole input first (seconds of CPU the test
    # does not need); the program still has seconds of work when the signal comes
    proc = subprocess.Popen([sys.executable, "-m", "fa_cli", "run", str(inp), "--program", "cpu",
                             "--no-time-limit", "--sample", "1"], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not running_on(inp):
        time.sleep(0.01)
    assert running_on(inp), "fa-cpu never started"
    return proc


@pytest.fixture
def long_input(tmp_path):
    inp = tmp_path / "long.in"
    generate.write_input(inp, Shape(64, 2048, 64), 1)
    cwd, tmp = tmp_path / "cwd", tmp_path / "tmp"
    cwd.mkdir(), tmp.mkdir()
    return inp, cwd, tmp, {**os.environ, "TMPDIR": str(tmp)}


def test_program_dies_with_a_killed_fa(cpu_program, long_input):
    inp, cwd, tmp, env = long_input
    proc = start_fa_run(inp, cwd, env)
    proc.kill()
    proc.communicate()
    deadline = time.monotonic() + 5
    while running_on(inp) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert running_on(inp) == []


def test_sighup_stops_fa_run_and_leaves_nothing(cpu_program, long_input):
    inp, cwd, tmp, env = long_input
    proc = start_fa_run(inp, cwd, env)
    proc.send_signal(signal.SIGHUP)
    out, err = proc.communicate(timeout=60)
    # (with a cache of its own, fa first says it computes the input's expected output)
    assert proc.returncode == 128 + signal.SIGHUP, out + err
    assert err.strip().splitlines()[-1] in ("fa: stopped by SIGHUP",  # before its case, or during it:
                                            f"fa: stopped by SIGHUP during {inp}: 0 of 1 cases judged"), out + err
    assert "Traceback" not in err
    assert list(cwd.iterdir()) == [] and list(tmp.iterdir()) == [] and running_on(inp) == []


@pytest.mark.parametrize("sig", [signal.SIGINT, *(pytest.param(s, marks=pytest.mark.slow) for s in (signal.SIGTERM, signal.SIGHUP))],
                         ids=lambda s: s.name)
def test_resources_interrupted_leaves_no_temporary_files(tmp_path, sig):
    """A stand-in nvcc that writes a tmpxft_ file into $TMPDIR, as nvcc does, and then compiles
    for long: fa resources stopped meanwhile removes its folder and the compiler's files."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    nvcc = tmp_path / "nvcc"
    nvcc.write_text(f"#!{sys.executable}\nimport os, time\n"
                    "open(os.path.join(os.environ.get('TMPDIR', '/tmp'), f'tmpxft_{os.getpid()}.cpp'), 'w').close()\n"
                    "time.sleep(60)\n")
    nvcc.chmod(0o755)
    env = {**os.environ, "TMPDIR": str(tmp), "NVCC": str(nvcc)}
    proc = subprocess.Popen([sys.executable, "-m", "fa_cli", "resources", "--program", "cuda", "--arch", "sm_80"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not list(tmp.glob("fa-resources-*/tmpxft_*")):
        time.sleep(0.05)
    assert list(tmp.glob("fa-resources-*/tmpxft_*")), "the compiler's temporary file went elsewhere"
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=30)
    said = [line for line in err.strip().splitlines() if not line.startswith("fa: compiling:")]  # progress lines
    assert proc.returncode == 128 + sig and len(said) == 1, out + err
    assert list(tmp.iterdir()) == []


# ----------------------------------------------------------------------------- shell text in paths
HOSTILE_DIR = "sl x$(id>PWNED)`id>PWNED2`;id>PWNED3;'q\"q"


@pytest.fixture
def stand_in_slurm(tmp_path):
    """sinfo, srun and sbatch on PATH that run the job here: sbatch runs the job script once per
    array index through /bin/sh, as Slurm would, with SLURM_ARRAY_TASK_ID set."""
    bin_dir = tmp_path / "slurm-bin"
    bin_dir.mkdir()
    scripts = {
        "sinfo": "print('p')\n",
        "srun": "import os, sys\nargs = sys.argv[1:]\nwhile args and args[0].startswith('-'):\n"
                "    args = args[2:] if args[0] == '-p' else args[1:]\nos.execvp(args[0], args)\n",
        "sbatch": "import os, re, subprocess, sys\nargs = sys.argv[1:]\n"
                  "last = int(next(a for a in args if a.startswith('--array=')).split('=')[1].split('-')[1])\n"
                  "log = args[args.index('-o') + 1]\nprint('4242', flush=True)\nrc = 0\n"
                  "for i in range(last + 1):\n"
                  "    with open(log.replace('%a', str(i)).replace('%%', '%'), 'w') as f:\n"
                  "        rc |= subprocess.run(['/bin/sh', args[-1]], env={**os.environ, 'SLURM_ARRAY_TASK_ID': str(i)},"
                  " stdout=f, stderr=f).returncode\nsys.exit(rc)\n",
    }
    for name, body in scripts.items():
        (bin_dir / name).write_text(f"#!{sys.executable}\n{body}")
        (bin_dir / name).chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}


def test_slurm_array_from_a_hostile_directory(cpu_program, stand_in_slurm, tmp_path):
    work = tmp_path / HOSTILE_DIR
    work.mkdir()
    proc = fa("bench", "--program", "cpu", "--shape", "2,64,32", "--shape", "1,32,64", "--repeat", 1, "-o",
              "res.json", "--launcher", "slurm", "--partition", "p", "--slurm-array", env=stand_in_slurm, cwd=work)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ran = [p.name for d in (work, tmp_path, Path.cwd()) for p in d.glob("PWNED*")]
    assert ran == [], "a directory name ran as a command"
    assert sorted(p.name for p in work.iterdir()) == ["res.json"]
    records = json.loads((work / "res.json").read_text())["records"]
    assert [r["input"] for r in records] == ["2x64x32", "1x32x64"]
    for r in records:
        assert r["passed"] and r["error"] is None and r["slurm"] == {"job": "4242", "task": r["slurm"]["task"],
                                                                        "partition": "p"}
