"""No leftovers: a program stopped by a signal or by fa run's time limit leaves neither an output
nor a temporary file, and fa run and fa bench leave nothing behind but what they say they wrote.

Each program is stopped mid-run: once it has its output open (and, where its pipeline writes
in pieces, once some of the output is written), never before or after."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import build, fa
from fa_cli.cases import generate
from fa_cli.cases.format import Shape
from fa_cli.programs import processes, programs

# (program, environment, input shape): an input each program works on long enough
# to be caught mid-run, its output written in several pieces (fa-cpu: 64 MB chunks of input,
# the GPU programs: 48 MB; the GPU programs run the fp32 tiled kernel, about a second there).
PROGRAMS = [
    pytest.param(("cpu", {}, Shape(64, 2048, 64)), id="fa-cpu"),
    pytest.param(("cuda", {"FA_KERNEL": "tiled"}, Shape(26, 32768, 64)), id="fa-cuda", marks=pytest.mark.gpu),
    pytest.param(("hip-cuda", {"FA_KERNEL": "tiled"}, Shape(26, 32768, 64)), id="fa-hip-cuda", marks=pytest.mark.gpu),
]
# "unnamed": the default on Linux file systems (O_TMPFILE); "named": the fallback for the others.
TEMPS = ["unnamed", "named"]


@pytest.fixture(scope="module", params=PROGRAMS)
def long_run(request, tmp_path_factory):
    target, env, shape = request.param
    inp = tmp_path_factory.mktemp("input") / "long.in"
    generate.write_input(inp, shape, 1)
    return build(target), inp, env


def output_fds(pid: int, directory: Path) -> list[Path]:
    """The files in `directory` that process pid has open, other than its input."""
    found = []
    try:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            target = os.readlink(fd)
            if target.startswith(str(directory) + "/") and not target.endswith(".in"):
                found.append(fd)
    except (FileNotFoundError, ProcessLookupError):
        pass
    return found


def start_and_catch_mid_run(argv, out_dir: Path, env: dict) -> subprocess.Popen:
    """Start a program and return once it is writing its output in out_dir."""
    proc = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    opened = None
    while time.monotonic() < deadline and proc.poll() is None:
        fds = output_fds(proc.pid, out_dir)
        if fds and opened is None:
            opened = time.monotonic()
        try:
            written = fds and os.stat(fds[0]).st_size > 0
        except OSError:
            written = False
        # Wait for some bytes of output, up to 2 s after it was opened (a single-chunk run
        # writes only at its very end: it is then caught with its output open and empty).
        if written or (opened and time.monotonic() - opened > 2):
            return proc
        time.sleep(0.002)
    raise AssertionError(f"{argv[0]} never opened its output (exit code {proc.poll()}): {proc.stderr.read()}")


@pytest.mark.parametrize("temp", TEMPS)
@pytest.mark.parametrize("sig", [signal.SIGINT, pytest.param(signal.SIGTERM, marks=pytest.mark.slow), signal.SIGKILL],
                         ids=lambda s: s.name)  # SIGTERM's path is SIGINT's: make test-all
def test_program_stopped_by_signal_leaves_nothing(long_run, tmp_path, temp, sig):
    if temp == "named" and sig == signal.SIGKILL:
        pytest.skip("no program can clean up after SIGKILL: only the unnamed temporary survives it")
    program, inp, env = long_run
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    run_env = {**os.environ, **env, **({"FA_OUTPUT_TEMP": "named"} if temp == "named" else {})}
    proc = start_and_catch_mid_run([str(program), str(inp), str(out_dir / "o.out")], out_dir, run_env)
    os.kill(proc.pid, sig)
    proc.wait(timeout=60)
    assert proc.returncode == -sig, f"the program was not stopped by {sig.name}: exit code {proc.returncode}"
    assert list(out_dir.iterdir()) == []


def test_time_limit_stops_the_program_and_leaves_nothing(long_run, tmp_path):
    """programs.run stops a program at its time limit (SIGTERM, then SIGKILL) mid-run."""
    program, inp, env = long_run
    result = programs.run(programs.Program(program.name, program), inp, tmp_path / "o.out", timeout=0.3, env=env)
    assert result.timed_out and result.returncode in (-signal.SIGTERM, -signal.SIGKILL)
    assert list(tmp_path.iterdir()) == []


def fresh_dirs(tmp_path):
    """A working directory and a TMPDIR of the test's own, to see everything fa leaves."""
    cwd, tmp = tmp_path / "cwd", tmp_path / "tmp"
    cwd.mkdir(), tmp.mkdir()
    return cwd, tmp, {**os.environ, "TMPDIR": str(tmp)}


@pytest.mark.slow  # make test-all (docs/testing.md: what make test keeps of it)
def test_fa_run_time_limit(cpu_program, tmp_path):
    cwd, tmp, env = fresh_dirs(tmp_path)
    inp = tmp_path / "long.in"
    generate.write_input(inp, Shape(64, 2048, 64), 1)
    proc = fa("run", inp, "--program", "cpu", "--time-limit", 0.3, env=env, cwd=cwd)
    assert proc.returncode == 1 and "TLE" in proc.stdout, proc.stdout + proc.stderr
    assert "TLE: stopped at its 0.3 s time limit after" in proc.stdout
    assert list(cwd.iterdir()) == [] and list(tmp.iterdir()) == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
def test_fa_run_interrupted(cpu_program, tmp_path, sig):
    """Ctrl-C or SIGTERM to fa run mid-case: the program is stopped, fa's temporary directory
    removed, one line said, exit 128 + signal."""
    cwd, tmp, env = fresh_dirs(tmp_path)
    inp = tmp_path / "long.in"
    generate.write_input(inp, Shape(64, 2048, 64), 1)
    # --sample: no float64 expected output of the whole input first (seconds the test does not need)
    proc = subprocess.Popen([sys.executable, "-m", "fa_cli", "run", str(inp), "--program", "cpu", "--sample", "1"],
                            env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not [pid for pid in running_on(inp) if output_fds(pid, tmp)]:
        time.sleep(0.01)  # until fa-cpu has its output open in fa's temporary directory
    assert running_on(inp), "fa-cpu never started"
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, out + err
    # besides progress (the expected output's cost where this test's cache had none yet, and the
    # lines a step still going after 10 s says on a loaded machine), one line
    progress = ("fa: computing expected", "fa: judging:", "fa: expected output of")
    said = [line for line in err.strip().splitlines() if not line.startswith(progress)]
    assert "Traceback" not in err and len(said) == 1, err
    assert list(cwd.iterdir()) == [] and list(tmp.iterdir()) == []
    assert running_on(inp) == []


def running_on(inp: Path) -> list[int]:
    """Processes of fa-cpu working on this input."""
    pids = []
    for p in Path("/proc").glob("[0-9]*"):
        try:
            argv = (p / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[0].endswith(b"fa-cpu") and str(inp).encode() in argv:
            pids.append(int(p.name))
    return pids


def test_fa_bench_writes_only_its_results(cpu_program, tmp_path):
    cwd, tmp, env = fresh_dirs(tmp_path)
    proc = fa("bench", "--program", "cpu", "--suite", "t01", "--repeat", 1, "-o", "r.json", env=env, cwd=cwd)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [p.name for p in cwd.iterdir()] == ["r.json"] and list(tmp.iterdir()) == []


def test_a_ctrl_c_while_a_program_starts_is_held_and_raised_once_it_has_started():
    """Raised inside the fork (Python's at-fork hooks swallow it) a Ctrl-C would be lost and fa go
    on; held while the program starts, it is raised after, where the program can be stopped."""
    with processes.HeldWhileStarting() as held:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)  # delivered meanwhile: held, not raised here
    assert held.pending == [signal.SIGINT]
    with pytest.raises(KeyboardInterrupt):
        held.release()
    with processes.HeldWhileStarting() as quiet:
        pass
    quiet.release()  # nothing came: nothing raised
