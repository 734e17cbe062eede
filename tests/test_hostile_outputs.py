"""The output side and the readers, tried as a hostile user of the same machine would: links
planted in a sticky directory, two writers of one path, kill -9 mid-write, devices and FIFOs as
results files, a shared cache, a program that leaves a child behind. Tests that need a second
user run as root, with `nobody` as that user, and are skipped otherwise."""
import contextlib
import json
import os
import pwd
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from helpers import ROOT, fa
from fa_cli import files, locations
from fa_cli.cases import format as fmt, generate
from fa_cli.cases.format import FormatError, Shape

AS_ROOT = os.geteuid() == 0
NOBODY = pwd.getpwnam("nobody").pw_uid if AS_ROOT else None
needs_root = pytest.mark.skipif(not AS_ROOT, reason="needs root, to act as a second user (nobody)")


def one_line(proc) -> str:
    lines = [l for l in proc.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


# ---------------------------------------------------------------- links and permissions
@pytest.fixture
def sticky(tmp_path):
    """A sticky world-writable directory, as /tmp is."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    return shared


@pytest.fixture
def planted_link(sticky, tmp_path):
    """nobody's link out.bin in the sticky folder, to root's 0600 file "secret": (link, secret)."""
    secret = tmp_path / "secret"
    secret.write_text("root's own")
    secret.chmod(0o600)
    link = sticky / "out.bin"
    link.symlink_to(secret)
    os.lchown(link, NOBODY, NOBODY)
    return link, secret


@needs_root
def test_another_users_link_in_a_sticky_directory_is_not_followed(planted_link):
    link, secret = planted_link
    for args in (["gen", "-B", 1, "-N", 4, "-d", 32, "-o", link], ["bench", "--shape", "1,4,32", "-o", link]):
        proc = fa(*args)
        assert proc.returncode == 2 and "not followed" in one_line(proc)
    assert secret.read_text() == "root's own" and stat.S_IMODE(secret.stat().st_mode) == 0o600


def test_the_users_own_link_is_followed_and_stays_a_link(sticky, tmp_path):
    target = tmp_path / "real.in"
    link = sticky / "x.in"
    link.symlink_to(target)
    proc = fa("gen", "-B", 1, "-N", 4, "-d", 32, "-o", link)
    assert proc.returncode == 0 and link.is_symlink() and target.stat().st_size == Shape(1, 4, 32).input_bytes


@contextlib.contextmanager
def roots_file(dir_mode: int, file_mode: int):
    """root's file "root.out" (its text: keep) in a folder of /tmp with dir_mode."""
    folder = Path(tempfile.mkdtemp(prefix="fa-theirs-", dir="/tmp"))
    try:
        folder.chmod(dir_mode)
        roots = folder / "root.out"
        roots.write_text("keep")
        roots.chmod(file_mode)
        yield folder, roots
    finally:
        shutil.rmtree(folder)


@contextlib.contextmanager
def as_nobody():
    os.seteuid(NOBODY)
    try:
        yield
    finally:
        os.seteuid(0)


REFUSED = [(0o777, 0o644, "Permission denied"),  # a file the user may not write: as cp refuses it
           (0o1777, 0o666, "only its owner may replace it")]  # another's file in a sticky folder


@needs_root
@pytest.mark.parametrize("dir_mode, file_mode, why", REFUSED)
def test_what_the_user_may_not_replace_is_refused_before_work(dir_mode, file_mode, why):
    """nobody, in a folder anyone may write, names root's file as its output: refused before any
    work (replacing it would have worked, or failed only at the end); a new name there is fine."""
    with roots_file(dir_mode, file_mode) as (folder, roots):
        with as_nobody():
            with pytest.raises(FormatError, match=why):
                files.check_output_path(roots)
            files.check_output_path(folder / "new.in")
        assert roots.read_text() == "keep"


@needs_root
def test_each_link_on_the_way_is_checked(sticky, tmp_path):
    """The user's own link leads to another user's link in a sticky directory: the second is not
    followed either (the kernel checks every link it follows)."""
    secret = tmp_path / "secret"
    secret.write_text("root's own")
    theirs = sticky / "theirs"
    theirs.symlink_to(secret)
    os.lchown(theirs, NOBODY, NOBODY)
    mine = sticky / "mine"
    mine.symlink_to(theirs)
    with pytest.raises(FormatError, match="not followed"):
        files.check_output_path(mine)
    assert secret.read_text() == "root's own"


def test_a_replaced_file_keeps_its_mode_and_a_new_one_follows_the_umask(tmp_path):
    old = tmp_path / "old.in"
    old.write_text("")  # fa gen replaces an empty file or an input, nothing else
    old.chmod(0o600)
    assert fa("gen", "-B", 1, "-N", 4, "-d", 32, "-o", old).returncode == 0
    assert stat.S_IMODE(old.stat().st_mode) == 0o600
    new = tmp_path / "new.in"
    env = {**os.environ}
    proc = subprocess.run(["bash", "-c", f"umask 027 && {sys.executable} -m fa_cli gen -B 1 -N 4 -d 32 -o {new}"],
                          capture_output=True, text=True, env=env, cwd=ROOT)
    assert proc.returncode == 0 and stat.S_IMODE(new.stat().st_mode) == 0o640


# ---------------------------------------------------------------- replacing atomically
@pytest.mark.slow  # make test-all (docs/testing.md: what make test keeps of it)
def test_two_writers_of_one_path_both_succeed_and_it_is_never_missing(tmp_path):
    path = tmp_path / "x.in"
    shape = Shape(16, 256, 64)
    assert fa("gen", "-B", shape.B, "-N", shape.N, "-d", shape.d, "-o", path).returncode == 0
    wanted = {seed: None for seed in (1, 2)}
    for seed in wanted:
        other = tmp_path / f"s{seed}.in"
        generate.write_input(other, shape, seed)
        wanted[seed] = other.read_bytes()
    missing, stop = [0], threading.Event()

    def poll():
        while not stop.is_set():
            missing[0] += not path.exists()

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        for _ in range(5):
            procs = [subprocess.Popen([sys.executable, "-m", "fa_cli", "gen", "-B", str(shape.B), "-N", str(shape.N),
                                       "-d", str(shape.d), "--seed", str(seed), "-o", str(path)], cwd=ROOT,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for seed in wanted]
            assert [p.wait() for p in procs] == [0, 0], [p.stderr.read() for p in procs]
            assert path.read_bytes() in wanted.values()  # one writer's whole output
    finally:
        stop.set()
        poller.join()
    assert missing[0] == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s1.in", "s2.in", "x.in"]


def open_files(pid: int) -> list[str]:
    """What a process's file descriptors point at now (one closed while it is read is passed over)."""
    links = []
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except FileNotFoundError:  # the process is gone
        return links
    for fd in fds:
        try:
            links.append(os.readlink(fd))
        except FileNotFoundError:
            continue
    return links


def test_kill_9_mid_write_leaves_nothing(tmp_path):
    """fa gen writes an unnamed file (O_TMPFILE): once it is killed, nothing is left, not even a
    temporary (caught writing: its unnamed file shows in /proc/PID/fd as 'DIR/#... (deleted)')."""
    folder = tmp_path / "out"
    folder.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "fa_cli", "gen", "-B", "256", "-N", "32768", "-d", "64", "-o",
                             str(folder / "x.in")], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            if any(l.startswith(str(folder)) for l in open_files(proc.pid)):
                break
            time.sleep(0.05)
        else:
            pytest.fail("fa gen never started writing")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert list(folder.iterdir()) == []


def test_named_temporaries_of_dead_processes_are_removed(tmp_path):
    """Where a file system has no unnamed files, the temporaries of this user's killed fa are
    removed by the next write in that directory; a live process's are kept."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = tmp_path / f".x.in.{dead.pid}.0123abcd.tmp"
    live = tmp_path / f".x.in.{os.getpid()}.0123abcd.tmp"
    other = tmp_path / ".notes.tmp"
    for p in (stale, live, other):
        p.write_text("")
    files.remove_stale_temporaries(tmp_path)
    assert not stale.exists() and live.exists() and other.exists()


def test_scratch_folders_of_dead_processes_are_removed(tmp_path):
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = tmp_path / f"fa-run-{dead.pid}-0123abcd"
    stale.mkdir()
    (stale / "c01.out").write_text("left by kill -9")
    with locations.scratch("run", tmp_path) as mine:
        assert mine.is_dir() and stat.S_IMODE(mine.stat().st_mode) == 0o700
        assert not stale.exists()
    assert not mine.exists()


def test_expected_that_cannot_be_written_takes_the_input_with_it(tmp_path):
    out = tmp_path / "x.in"
    proc = fa("gen", "-B", 1, "-N", 4, "-d", 32, "-o", out, "--expected", "/dev/full")
    assert proc.returncode == 1 and "No space left" in one_line(proc)
    assert not out.exists()


def test_gen_checks_the_room_for_both_files_together(tmp_path, monkeypatch):
    shape = Shape(1, 1024, 64)
    free = shape.input_bytes + shape.output_bytes // 2  # room for the input, not for both
    monkeypatch.setattr(files.shutil, "disk_usage", lambda p: type("U", (), {"free": free})())
    with pytest.raises(FormatError, match="only"):
        generate.check_outputs(tmp_path / "x.in", tmp_path / "x.out", shape)
    generate.check_outputs(tmp_path / "x.in", None, shape)  # the input alone fits


# ---------------------------------------------------------------- the programs' output rule
# fa-cpu, fa-cuda and fa-hip share src_common/host/output.h: fa-cpu stands for all three here
# (tests/test_no_leftovers.py runs the GPU programs' kill and error paths on a GPU).
@pytest.fixture(scope="module")
def small_inputs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("inputs")
    folder.chmod(0o755)
    inputs = {}
    for seed in (1, 2):
        inputs[seed] = folder / f"s{seed}.in"
        generate.write_input(inputs[seed], Shape(4, 256, 64), seed)
        inputs[seed].chmod(0o644)
    return inputs


def program(cpu, inp, out, env=None, user=None):
    return subprocess.run([str(cpu), str(inp), str(out)], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, user=user)


@needs_root
def test_program_does_not_follow_another_users_link_in_a_sticky_directory(cpu_program, small_inputs, planted_link,
                                                                          sticky):
    link, secret = planted_link
    proc = program(cpu_program, small_inputs[1], link)
    assert proc.returncode == 2 and "not followed" in one_line(proc)
    assert secret.read_text() == "root's own" and stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert sorted(p.name for p in sticky.iterdir()) == ["out.bin"]


def test_program_follows_the_users_own_link_which_stays(cpu_program, small_inputs, sticky, tmp_path):
    target = tmp_path / "real.out"
    link = sticky / "x.out"
    link.symlink_to(target)
    assert program(cpu_program, small_inputs[1], link).returncode == 0
    assert link.is_symlink() and target.stat().st_size == Shape(4, 256, 64).output_bytes


@pytest.fixture(scope="module")
def cpu_for_nobody(cpu_program):
    """fa-cpu copied where the second user can run it: the checkout may be under a folder only its
    owner may enter (a home folder of mode 0700), and so may pytest's own temporary folders."""
    folder = Path(tempfile.mkdtemp(prefix="fa-nobody-", dir="/tmp"))
    try:
        folder.chmod(0o755)
        copy = folder / cpu_program.name
        shutil.copy(cpu_program, copy)
        copy.chmod(0o755)
        yield copy
    finally:
        shutil.rmtree(folder)


@needs_root
@pytest.mark.parametrize("dir_mode, file_mode, why", REFUSED)
def test_program_refuses_what_the_user_may_not_replace(cpu_for_nobody, small_inputs, dir_mode, file_mode, why):
    """The same as fa's own writers: nobody names root's file as its output, refused before any
    work with one line naming it, nothing else left in the folder."""
    with roots_file(dir_mode, file_mode) as (folder, roots):
        inp = folder / "in.bin"  # where nobody can read it
        shutil.copy(small_inputs[1], inp)
        inp.chmod(0o644)
        proc = program(cpu_for_nobody, inp, roots, user=NOBODY)
        assert proc.returncode == 2 and one_line(proc).startswith(f"fa-cpu: error: {roots}: cannot write output: ")
        assert why in one_line(proc)
        assert roots.read_text() == "keep" and roots.stat().st_uid == 0
        assert sorted(p.name for p in folder.iterdir()) == ["in.bin", "root.out"]


def test_program_keeps_a_replaced_files_mode_and_follows_the_umask(cpu_program, small_inputs, tmp_path):
    old = tmp_path / "old.out"
    old.write_text("x")
    old.chmod(0o600)
    assert program(cpu_program, small_inputs[1], old).returncode == 0
    assert stat.S_IMODE(old.stat().st_mode) == 0o600 and old.stat().st_size > 1
    new = tmp_path / "new.out"
    proc = subprocess.run(["bash", "-c", f"umask 027 && {cpu_program} {small_inputs[1]} {new}"], capture_output=True)
    assert proc.returncode == 0 and stat.S_IMODE(new.stat().st_mode) == 0o640


@pytest.mark.parametrize("temp", ["unnamed", "named"])
def test_two_program_runs_writing_one_path_both_succeed(cpu_program, small_inputs, tmp_path, temp):
    """Two runs replace one output again and again: both exit 0 every time, the file is always
    one run's whole output, a reader polling the path never finds it missing, and nothing else
    is left in the directory."""
    folder = tmp_path / "out"
    folder.mkdir()
    path = folder / "x.out"
    wanted = []
    for seed, inp in small_inputs.items():
        assert program(cpu_program, inp, path).returncode == 0
        wanted.append(path.read_bytes())
    missing, polls, stop = [0], [0], threading.Event()

    def poll():
        while not stop.is_set():
            polls[0] += 1
            missing[0] += not path.exists()

    poller = threading.Thread(target=poll)
    poller.start()
    env = {**os.environ, "FA_OUTPUT_TEMP": temp, "OMP_NUM_THREADS": "1"}
    try:
        for _ in range(60):
            procs = [subprocess.Popen([str(cpu_program), str(inp), str(path)], env=env, stderr=subprocess.PIPE)
                     for inp in small_inputs.values()]
            assert [p.wait() for p in procs] == [0, 0], [p.stderr.read() for p in procs]
            assert path.read_bytes() in wanted
    finally:
        stop.set()
        poller.join()
    assert polls[0] > 0 and missing[0] == 0
    assert [p.name for p in folder.iterdir()] == ["x.out"]


# ---------------------------------------------------------------- readers
def not_a_results_file(name: str, tmp_path: Path) -> Path:
    """A device by its path, a FIFO, or a regular file over the results files' 64 MB."""
    if name == "fifo":
        os.mkfifo(tmp_path / "fifo")
        return tmp_path / "fifo"
    if name == "huge":
        with open(tmp_path / "huge.json", "wb") as f:
            f.truncate(65 << 20)
        return tmp_path / "huge.json"
    return Path(name)


@pytest.mark.parametrize("name", ["/dev/zero", "huge", *(pytest.param(n, marks=pytest.mark.slow) for n in ("/dev/urandom", "fifo"))])
def test_results_readers_take_only_regular_files_of_a_sane_size(name, tmp_path):
    path = not_a_results_file(name, tmp_path)
    # (fa run -o and fa bench -o refuse a device or a FIFO too: test_bench_refuses_its_results_file_before_any_work)
    runs = [["run", "t01", "--program", "cpu", "-o", path]] if name == "huge" else []
    for args in (["compare", path], ["report", path, "-o", tmp_path / "r"], *runs):
        start = time.time()
        proc = fa(*args)
        line = one_line(proc)
        assert proc.returncode == 2 and time.time() - start < 20, line
        assert ("not a regular file" in line or "64 MB" in line) and "judging" not in proc.stderr, line


def test_run_refuses_its_results_file_before_judging(tmp_path):
    corrupt = tmp_path / "corrupt.json"
    corrupt.write_text('{"records": 5}')
    for path in (corrupt, tmp_path / "missing" / "run.json"):
        proc = fa("run", "t01", "t02", "--program", "cpu", "-o", path)
        assert proc.returncode == 2 and "judging" not in proc.stderr and "PASS" not in proc.stdout
        one_line(proc)


@pytest.mark.parametrize("value", ["nan", "-1", *(pytest.param(v, marks=pytest.mark.slow) for v in ("inf", "0"))])
def test_time_limit_must_be_finite_and_positive(value):
    proc = fa("run", "t01", "--program", "cpu", "--time-limit", value)
    assert proc.returncode == 2 and "finite number above 0" in one_line(proc)


def test_torch_program_without_torch_says_so_up_front():
    if subprocess.run([sys.executable, "-c", "import torch"], capture_output=True).returncode == 0:
        pytest.skip("PyTorch is installed here")
    proc = fa("run", "t01", "--program", "torch")
    assert proc.returncode == 2 and "needs PyTorch (pip install torch)" in one_line(proc)


def test_verify_reads_a_file_cut_short_as_one_line(tmp_path):
    path = tmp_path / "x.out"
    path.write_bytes(b"\0" * 4096)
    with pytest.raises(FormatError, match="cut short while being read: 4096 of 8192 bytes"):
        fmt.read_exactly(path, 0, 8192, "output")


def test_a_name_with_a_newline_stays_one_line(tmp_path):
    generate.write_input(tmp_path / "x.in", Shape(1, 4, 32), 0)
    proc = fa("verify", tmp_path / "a\nb.out", "--input", tmp_path / "x.in")
    assert proc.returncode == 2 and "\\n" in one_line(proc)


# ---------------------------------------------------------------- a program's children
def test_time_limit_counts_the_programs_own_exit_not_its_children(cpu_program, tmp_path):
    """A program that exits 0 and leaves a child holding stderr is judged on its own exit; the
    child is stopped with its process group."""
    program = tmp_path / "leaves-a-child"
    marker = tmp_path / "child-pid"
    program.write_text(f"#!{sys.executable}\nimport subprocess, sys\n"
                       f"child = subprocess.Popen(['sleep', '30'])\nopen({str(marker)!r}, 'w').write(str(child.pid))\n"
                       f"sys.exit(subprocess.run([{str(cpu_program)!r}, *sys.argv[1:]]).returncode)\n")
    program.chmod(0o755)
    start = time.time()
    proc = fa("run", "t01", "--program", program, "--time-limit", "5")
    assert proc.returncode == 0 and "PASS" in proc.stdout and time.time() - start < 5, proc.stdout
    child = int(marker.read_text())
    time.sleep(0.2)
    assert not files.alive(child) or Path(f"/proc/{child}/stat").read_text().split()[2] == "Z"


# ---------------------------------------------------------------- the cache
def test_a_cache_that_is_not_a_directory_is_one_line(tmp_path):
    proc = fa("run", "t11", "--program", "cpu", env={**os.environ, "FA_CACHE": "/etc/passwd"})
    assert proc.returncode == 2 and one_line(proc).endswith("FA_CACHE=/etc/passwd is not a directory")


@needs_root
def test_another_users_cache_is_refused_unless_asked(tmp_path):
    cache = tmp_path / "shared-cache"
    cache.mkdir()
    os.chown(cache, NOBODY, NOBODY)
    env = {**os.environ, "FA_CACHE": str(cache)}
    proc = fa("bench", "--shape", "1,64,32", "--program", "cpu", "--repeat", "1", "-o", tmp_path / "b.json", env=env)
    assert proc.returncode == 2 and "belongs to another user" in one_line(proc)
    proc = fa("bench", "--shape", "1,64,32", "--program", "cpu", "--repeat", "1", "-o", tmp_path / "b.json",
              env={**env, "FA_SHARED_CACHE": "1"})
    assert proc.returncode == 0, proc.stderr


def test_a_planted_file_under_a_cache_name_is_not_used(tmp_path):
    cache = tmp_path / "cache"
    env = {**os.environ, "FA_CACHE": str(cache)}
    args = ("bench", "--shape", "2,64,32", "--program", "cpu", "--repeat", "1", "--keep-inputs", "-o",
            tmp_path / "b.json")
    assert fa(*args, env=env).returncode == 0
    name = cache / "uniform-B2-N64-d32-s0.in"
    generate.write_input(tmp_path / "seed7.in", Shape(2, 64, 32), 7)
    os.replace(tmp_path / "seed7.in", name)  # seed 7's bytes under seed 0's name
    proc = fa(*args, env=env)
    assert proc.returncode == 0 and "generated 2x64x32" in proc.stderr
    generate.write_input(tmp_path / "seed0.in", Shape(2, 64, 32), 0)
    assert name.read_bytes() == (tmp_path / "seed0.in").read_bytes()
    stamp = json.loads((cache / "uniform-B2-N64-d32-s0.in.stamp").read_text())
    assert stamp["params"]["seed"] == 0


# ---------------------------------------------------------------- no path resolved by fa itself
def test_writers_resolve_no_path_themselves(tmp_path, monkeypatch):
    """A directory link on the way is the kernel's to follow; fa follows only a final link,
    relative to that link's own directory, and never calls realpath: the target is written and
    both links stay."""
    (tmp_path / "real").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "via").symlink_to("real")
    (tmp_path / "real" / "out.link").symlink_to("../elsewhere/t.bin")

    def no_realpath(*args, **kwargs):
        raise AssertionError("realpath called")

    monkeypatch.setattr(os.path, "realpath", no_realpath)
    with files.atomic_file(tmp_path / "via" / "out.link") as f:
        f.write(b"new")
    assert (tmp_path / "elsewhere" / "t.bin").read_bytes() == b"new"
    assert (tmp_path / "via").is_symlink() and (tmp_path / "real" / "out.link").is_symlink()
    assert sorted(p.name for p in (tmp_path / "real").iterdir()) == ["out.link"]


@needs_root
def test_a_directory_link_on_the_way_is_the_kernels_to_follow(sticky, tmp_path):
    """nobody's link to root's folder in a sticky directory, on the way to the output: fa opens
    the folder through the kernel, so fa writes there exactly when the kernel lets a program
    create a file there (fs.protected_symlinks, where set, decides; fa does not bypass it)."""
    folder = tmp_path / "roots"
    folder.mkdir()
    link = sticky / "dir"
    link.symlink_to(folder)
    os.lchown(link, NOBODY, NOBODY)
    try:
        os.close(os.open(link / "probe", os.O_CREAT | os.O_WRONLY))
        kernel_allows = True
        (folder / "probe").unlink()
    except PermissionError:
        kernel_allows = False
    proc = fa("gen", "-B", 1, "-N", 4, "-d", 32, "-o", link / "x.in")
    if kernel_allows:
        assert proc.returncode == 0 and (folder / "x.in").stat().st_size == Shape(1, 4, 32).input_bytes
    else:
        assert proc.returncode == 2 and "Permission denied" in one_line(proc) and not (folder / "x.in").exists()


@needs_root
def test_a_link_of_the_sticky_directorys_owner_is_followed(tmp_path):
    """The rule's other side: in nobody's sticky world-writable folder, nobody's link is
    followed by root (the directory's owner could have replaced the file anyway)."""
    shared = tmp_path / "theirs"
    shared.mkdir()
    shared.chmod(0o1777)
    os.chown(shared, NOBODY, NOBODY)
    link = shared / "out.in"
    link.symlink_to(tmp_path / "target.in")
    os.lchown(link, NOBODY, NOBODY)
    proc = fa("gen", "-B", 1, "-N", 4, "-d", 32, "-o", link)
    assert proc.returncode == 0 and link.is_symlink() and (tmp_path / "target.in").is_file(), proc.stderr


def test_gen_takes_back_a_linked_input_not_the_link(tmp_path):
    """--expected fails after the input was written through the user's link: the input (the
    link's target) goes, the link stays."""
    (tmp_path / "elsewhere").mkdir()
    link = tmp_path / "x.in"
    link.symlink_to("elsewhere/real.in")
    proc = fa("gen", "-B", 1, "-N", 4, "-d", 32, "-o", link, "--expected", "/dev/full")
    assert proc.returncode == 1 and "No space left" in one_line(proc)
    assert link.is_symlink() and list((tmp_path / "elsewhere").iterdir()) == []


def test_taking_back_spares_a_file_put_there_since(tmp_path):
    path = tmp_path / "x.in"
    placed = generate.write_input(path, Shape(1, 4, 32), 0)
    (tmp_path / "other").write_text("another writer's")
    os.replace(tmp_path / "other", path)
    files.remove_placed(path, placed)
    assert path.read_text() == "another writer's"
    placed = generate.write_input(path, Shape(1, 4, 32), 0)
    files.remove_placed(path, placed)
    assert not path.exists()


# ---------------------------------------------------------------- non-finite values
def test_inf_in_an_input_prints_no_numpy_warnings(cpu_program, tmp_path):
    """inf in Q and K: fa verify (sampled, full) and fa run judge and diagnose it with no
    RuntimeWarning, and NaN where both reruns wrote NaN is no race."""
    inp, out = tmp_path / "x.in", tmp_path / "x.out"
    generate.write_input(inp, Shape(1, 64, 32), 0)
    values = np.fromfile(inp, dtype="<f4")
    values[3 + 5] = values[3 + 64 * 32 + 7] = np.inf
    values.tofile(inp)
    assert subprocess.run([str(cpu_program), str(inp), str(out)]).returncode == 0
    for args in (["verify", out, "--input", inp], ["verify", out, "--input", inp, "--full"],
                 ["verify", out, "--input", inp, "--sample", 8], ["run", inp, "--program", "cpu"]):
        proc = fa(*args)
        assert proc.returncode == 1 and ("WRONG" in proc.stdout or "FAIL" in proc.stdout), proc.stdout
        assert "RuntimeWarning" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
        assert "race:" not in proc.stdout and "intermittent:" not in proc.stdout


# ---------------------------------------------------------------- readers, cut short and empty
@pytest.mark.parametrize("order", ["empty-expected", "empty-output"])
def test_verify_against_an_empty_file_is_one_line(tmp_path, order):
    empty, out = tmp_path / "empty", tmp_path / "x.out"
    empty.write_bytes(b"")
    out.write_bytes(b"\0" * 8192)
    args = ["verify", out, "--expected", empty] if order == "empty-expected" else ["verify", empty, "--expected", out]
    proc = fa(*args)
    assert proc.returncode == 2 and "has 0" in one_line(proc) and "mmap" not in proc.stderr


@pytest.mark.parametrize("name", ["fifo", *(pytest.param(n, marks=pytest.mark.slow) for n in ("/dev/zero", "huge"))])
def test_bench_refuses_its_results_file_before_any_work(name, tmp_path):
    path = not_a_results_file(name, tmp_path)
    start = time.time()
    proc = subprocess.run([sys.executable, "-m", "fa_cli", "bench", "--shape", "1,64,32", "--program", "cpu",
                           "--repeat", "1", "-o", str(path)], capture_output=True, text=True, cwd=ROOT, timeout=30)
    line = one_line(proc)
    assert proc.returncode == 2 and time.time() - start < 20
    assert str(path) in line and ("not a regular file" in line or "64 MB" in line), line
    assert "benchmarking" not in proc.stderr and "generated" not in proc.stderr and proc.stdout == ""


def test_verify_of_an_input_shorter_than_its_header_says_names_it(tmp_path):
    inp, out = tmp_path / "x.in", tmp_path / "x.out"
    generate.write_input(inp, Shape(1, 64, 32), 0)
    out.write_bytes(b"\0" * Shape(1, 64, 32).output_bytes)
    with open(inp, "r+b") as f:
        f.truncate(Shape(1, 64, 32).input_bytes - 4)
    proc = fa("verify", out, "--input", inp)
    assert proc.returncode == 2 and one_line(proc).startswith(f"fa: error: {inp}: file has ")


@pytest.mark.slow
def test_verify_of_a_file_cut_short_while_it_reads_is_one_line(tmp_path):
    """fa verify reads two 256 MB files; a thread truncates the output as soon as fa has it
    open. Whether the cut comes before the size check or during the read, the outcome is one
    line naming the file: never SIGBUS (exit 135 in a shell, -7 here), never a traceback."""
    out, exp = tmp_path / "x.out", tmp_path / "x.exp"
    size = 256 << 20
    for p in (out, exp):
        with open(p, "wb") as f:
            f.truncate(size)
    outcomes = set()
    for _ in range(3):
        os.truncate(out, size)
        proc = subprocess.Popen([sys.executable, "-m", "fa_cli", "verify", str(out), "--expected", str(exp)],
                                cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 30
        while time.time() < deadline and proc.poll() is None:
            with contextlib.suppress(OSError):
                if any(os.readlink(f) == str(out) for f in Path(f"/proc/{proc.pid}/fd").iterdir()):
                    os.truncate(out, 4096)
                    break
        stdout, stderr = proc.communicate(timeout=60)
        assert proc.returncode not in (-signal.SIGBUS, 128 + signal.SIGBUS) and "Traceback" not in stderr, stderr
        if proc.returncode == 0:  # read whole before the cut
            outcomes.add("read whole")
            continue
        line = one_line(subprocess.CompletedProcess([], proc.returncode, stdout, stderr))
        assert str(out) in line and ("cut short while being read" in line or "has 4096 bytes" in line), line
        outcomes.add("cut short" if "cut short" in line else "short")


def test_not_enough_memory_names_the_file(tmp_path):
    """Under a memory limit, fa verify cannot hold two 512 MB files: one line naming the file it
    could not read, exit 1, no traceback; a mapping refused (an input fa maps) names its file too."""
    a, b = tmp_path / "a.out", tmp_path / "b.out"
    for p in (a, b):
        with open(p, "wb") as f:
            f.truncate(512 << 20)
    limit = 900 << 20

    def limited():
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "fa_cli", "verify", str(a), "--expected", str(b)], cwd=ROOT,
                          capture_output=True, text=True, env=env, preexec_fn=limited)
    line = one_line(proc)
    assert proc.returncode == 1 and (str(a) in line or str(b) in line) and "Cannot allocate memory" in line, line
    big = tmp_path / "big.in"
    with open(big, "wb") as f:
        f.write(np.array([64, 65536, 64], "<i4").tobytes())
        f.truncate(Shape(64, 65536, 64).input_bytes)
    code = (f"from fa_cli.cases.format import AttentionInput\nfrom fa_cli.errors import FaError\n"
            f"try:\n    AttentionInput({str(big)!r})\nexcept FaError as e:\n    print(e)\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, env=env,
                          preexec_fn=limited)
    assert proc.stdout.startswith(f"{big}: cannot map input: ") and "Cannot allocate memory" in proc.stdout, \
        proc.stdout + proc.stderr
