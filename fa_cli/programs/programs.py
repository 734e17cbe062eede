"""One way to find, build and run a program `PROGRAM INPUT OUTPUT`, directly or through a launcher.

Programs by name: cpu (bin/fa-cpu), cuda (bin/fa-cuda), hip (bin/fa-hip, AMD), hip-cuda
(bin/fa-hip-cuda: the HIP source compiled by nvcc), torch (PyTorch SDPA), any path to a
program, or a student's source (hw4.cu, hw4.hip; a .cpp for a CPU program), built with the
Makefile's rule or the course's line into the cache directory and rebuilt when either changes
(student_build). A
missing named program is built with make in locations.source_tree(): the checkout, or for an
installed fa a copy of its shipped sources in the cache directory. With FA_TIMING=1 a program
prints the fa-timing line (fa_cli/programs/timing.py), parsed into RunResult.timing and .build.
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from .. import locations
from ..errors import ExitStatus, FaError
from ..settings import compiler_command
from . import gpu_turns, gtx1080, student_build, timing, wave64
from .processes import SETTLE_BOUND_S, HeldWhileStarting, die_with_fa
from .student_build import SOURCE_COMPILERS, source_compiler
from .devices import list_devices

# A program past its time limit gets SIGTERM, then SIGKILL after this many seconds.
KILL_GRACE_S = 1.0


@dataclass(frozen=True)
class Program:
    name: str
    path: Path
    make_target: str | None = None  # None: a user's own binary, never built here
    interpreter: tuple[str, ...] = ()  # run as INTERPRETER... PATH (the torch program)
    source: Path | None = None  # the student's source it is built from (--program hw4.cu)
    build_flags: tuple[str, ...] = ()  # added to the course's line (a diagnosis's -g build)

    @property
    def argv(self) -> list[str]:
        return [*self.interpreter, str(self.path)]


# Named programs built by make: the make target and the binary it writes under bin/.
BUILT = {"cpu": "fa-cpu", "cuda": "fa-cuda", "hip": "fa-hip", "hip-cuda": "fa-hip-cuda"}
# PyTorch SDPA fp32 with the same contract, for side-by-side runs (needs torch and a GPU).
TORCH = Program("torch", Path(__file__).with_name("torch_program.py"), None, (sys.executable,))
NAMES = (*BUILT, "torch")
# What --program takes, as its help and its error say it (one list).
CHOICES = f"{', '.join(NAMES)}, best, or a path"


def named(name: str) -> Program:
    if name == "torch":
        return TORCH
    return Program(name, locations.source_tree() / "bin" / BUILT[name], name)


def best_name() -> str:
    """The fastest program this machine can run: cuda with an NVIDIA GPU, hip with an AMD one."""
    vendors = {dev.vendor for dev in list_devices()}
    if "nvidia" in vendors and shutil.which("nvcc"):
        return "cuda"
    if "amd" in vendors and shutil.which("hipcc"):
        return "hip"
    return "cpu"


def from_source(source: Path, extra: tuple[str, ...] = (), flavour: str = "") -> Program:
    """The program a source builds to, in a cache folder named by the source's bytes and the line."""
    line = (*student_build.source_needs(source), *extra)  # the flags the source asks for are part of its build
    makefile = student_build.makefile_of(source)  # its rule is the build: another Makefile, another program
    if wave64.emulates(source):  # the emulation's build is another program
        flavour += "wave64"
    if gtx1080.applies(source):  # so is a hw4.cu under the GTX 1080's rules
        flavour += "gtx1080"
        extra = (*gtx1080.build_flags(compiler_command("nvcc")), *extra)
    rule = makefile.read_bytes() if makefile else b""
    digest = hashlib.sha256(source.read_bytes() + "\0".join(line).encode() + flavour.encode() + rule).hexdigest()[:16]
    path = locations.cache_dir() / "student" / f"{source.stem}-{digest}" / source.stem
    return Program(source.name, path, None, source=source.resolve(), build_flags=tuple(extra))


def source_hint(program_path: Path) -> str:
    """What to give as --program to have a built program rebuilt from its source: the source of
    the same name beside it (./segv: ./segv.cpp; ./hw4: ./hw4.cu), else words that say which."""
    path = Path(program_path)
    for suffix in (*SOURCE_COMPILERS, ".c"):
        candidate = path.with_name(path.name + suffix)
        if candidate.is_file():
            try:  # as typed from here where it is under the current folder
                return str(candidate.relative_to(Path.cwd()))
            except ValueError:
                return str(candidate)
    return "SOURCE (the .cu, .hip or .cpp it was built from)"


def resolve(name_or_path: str) -> Program:
    if name_or_path == "best":
        name_or_path = best_name()
    if name_or_path in NAMES:
        return named(name_or_path)
    path = Path(name_or_path)
    if not path.exists():
        raise FaError(unbuilt(path, name_or_path) or (
            f"{name_or_path}: no such file (a program is {CHOICES})" if looks_like_a_path(name_or_path) else
            f"no program {name_or_path!r}: give one of {CHOICES}"))
    if path.is_dir():
        raise FaError(f"{name_or_path}: is a directory, not a program (give the program or its source in it)")
    if path.suffix in SOURCE_COMPILERS:
        return from_source(path)
    if not os.access(path, os.X_OK):
        raise FaError(f"{name_or_path}: not an executable program (no execute permission)")
    return Program(path.name, path.resolve())


def looks_like_a_path(text: str) -> bool:
    """./hw4, ../x/hw4, /abs/hw4, hw4.cu: a path to a file, not one of fa's program names."""
    return "/" in text or text.startswith(".") or Path(text).suffix in (*SOURCE_COMPILERS, ".c")


def unbuilt(path: Path, shown: str) -> str | None:
    """For a program not built yet beside its source (./hw4 and hw4.cu): build it first, or let fa."""
    sources = [path.with_name(path.name + suffix) for suffix in SOURCE_COMPILERS]
    source = next((s for s in sources if s.is_file()), None)
    if source is None:
        return None
    how = f"make {path.name}" if (path.parent / "Makefile").is_file() else "with the course's line"
    return (f"no program {shown!r}: build it first ({how}), or give --program {source} to let fa build it "
            "with the course's line")


# The compiler each of the Makefile's targets runs (compiler_command: NVCC or HIPCC where set).
BUILT_WITH = {"cuda": "nvcc", "hip-cuda": "nvcc", "hw4": "nvcc", "hip": "hipcc", "hw4-amd": "hipcc"}


def ensure_built(program: Program, announce=None) -> Program:
    """Build a named program with make, or a student's source with the course's line, when its
    binary is missing; announce(text) says so first."""
    if program is TORCH and importlib.util.find_spec("torch") is None:
        raise FaError("--program torch needs PyTorch (pip install torch), which is not installed for "
                      f"{sys.executable}")
    if program.path.exists():
        if announce and (note := build_note(program)):
            announce(f"{program.source.name} as built before: {note}")
        return program
    if program.source is not None:
        return build_source(program, announce)
    if program.make_target is None:
        return program
    tree = program.path.parent.parent
    if not shutil.which("make"):
        raise FaError(f"program {program.name!r} needs building, and `make` is not installed",
                      exit_code=ExitStatus.FAILED)
    compiler = BUILT_WITH.get(program.make_target)
    if compiler and not shutil.which(compiler_command(compiler)):
        raise FaError(f"program {program.name!r} is built with {compiler}, which is not installed here (or not on "
                      "PATH)", exit_code=ExitStatus.FAILED)
    if announce:
        announce(f"building {program.name} in {tree} (make {program.make_target}; once)")
    proc = subprocess.run(["make", "-C", str(tree), program.make_target], capture_output=True, text=True)
    if proc.returncode != 0 or not program.path.exists():
        lines = [l for l in (proc.stderr + proc.stdout).splitlines() if l.strip()]
        why = lines[-1] if lines else f"exit code {proc.returncode}"
        raise FaError(f"program {program.name!r} is not available here: `make {program.make_target}` failed: {why}",
                      exit_code=ExitStatus.FAILED)
    return program


def compiler_of(source: Path) -> str:
    """The compiler the course's line for a source runs."""
    return compiler_command(source_compiler(source))


def check_compiler(source: Path) -> None:
    """Stop with one line where the compiler of the source's course line is not installed."""
    tool = compiler_of(source)
    if not shutil.which(tool):
        raise FaError(f"{source}: building it needs {tool}, which is not installed here", exit_code=ExitStatus.FAILED)


def build_note(program: Program) -> str:
    """What fa changed to build a student's source, in a line ("" where nothing): student_build.keep_note."""
    return student_build.build_note(program.path) if program.source is not None else ""


def build_error(program: Program, announce=None) -> str | None:
    """Build a student's source (student_build: its Makefile's rule, else the course's line, with
    the program's build flags): None where it built, else why not, in one line."""
    check_compiler(program.source)
    return student_build.build(program.source, program.path, program.build_flags, announce)


def build_source(program: Program, announce=None) -> Program:
    error = build_error(program, announce)
    if error and wave64.emulates(program.source) and (lacking := wave64.missing_header(error)):
        raise FaError(f"{program.source}: {lacking} ({error})", exit_code=ExitStatus.FAILED)
    if error:
        raise FaError(f"{program.source}: does not build: {error}", exit_code=ExitStatus.FAILED)
    return program


class Launcher:
    """Runs a command on this machine."""

    remote = False  # True where commands run on another machine (a cluster node)

    def wrap(self, argv: list[str]) -> list[str]:
        return argv

    def explain_failure(self, returncode: int, stderr: str) -> str | None:
        return None


@dataclass
class RunResult:
    argv: list[str]
    returncode: int
    wall_s: float
    stderr: str
    timing: dict[str, float] = field(default_factory=dict)
    build: dict[str, str] = field(default_factory=dict)  # impl, arch and device from the timing line
    timed_out: bool = False
    cpu_user_s: float | None = None    # its CPU time in user space and in the kernel (rusage)
    cpu_system_s: float | None = None
    launcher_says: str | None = None  # why the launcher ended or failed it (a sandbox's limit, Slurm's error)

    @property
    def error(self) -> str | None:
        """The program's own one-line complaint, or None if it succeeded."""
        if self.timed_out:
            return "stopped at the time limit"
        if self.returncode == 0:
            return None
        lines = [l for l in self.stderr.splitlines() if l.strip() and not timing.is_timing_line(l)]
        emulated = wave64.fault(self.stderr) or gtx1080.fault(self.stderr)  # a layer's own line says more
        if emulated and not (self.returncode < 0 and EMPTY_LAUNCH in emulated):  # than all but a later crash
            return emulated
        if self.returncode < 0:  # ended by a signal: name it (SIGSEGV, SIGABRT, ...)
            try:
                return f"killed by {signal.Signals(-self.returncode).name}"
            except ValueError:
                return f"killed by signal {-self.returncode}"
        return lines[-1] if lines else f"exit code {self.returncode}"


EMPTY_LAUNCH = "a dimension of 0, so no thread runs"  # the layers' line for a launch of no block (launch_hook.h)


def parse_timing(stderr: str) -> tuple[dict[str, float], dict[str, str]]:
    """The stage times (seconds) and the build facts (impl, arch, device) of a fa-timing line."""
    line = timing.parse(stderr)
    return line.seconds, line.facts


def run(
    program: Program, input_path: Path, output_path: Path, launcher: Launcher | None = None,
    timeout: float | None = None, env: dict[str, str] | None = None, timed: bool = True,
) -> RunResult:
    """Run PROGRAM INPUT OUTPUT once, in its turn on the GPU (gpu_turns: alone where its time
    counts; untimed, a rerun that looks for a cause, beside others), timing the whole process from
    outside: from its exec to its exit."""
    with gpu_turns.turn(timed) as gpu:
        return _run(program, input_path, output_path, launcher, timeout, env, gpu)


def _run(program: Program, input_path: Path, output_path: Path, launcher: Launcher | None, timeout: float | None,
         env: dict[str, str] | None, gpu: gpu_turns.Turn) -> RunResult:
    """run(), its turn on the GPU taken (given back once the program has exited and what it left
    running was sent SIGKILL, before fa's clean-up: the next run's turn starts while this one's
    reader and watcher settle).

    Past `timeout` seconds the program is stopped as a judge would (RunResult.timed_out). The
    program runs in its own process group, so that stopping it reaches whatever it started;
    if fa itself is interrupted (Ctrl-C, SIGTERM, SIGHUP), the program is stopped before fa
    goes, and if fa is killed (SIGKILL) the kernel kills the program (die_with_fa).
    """
    launcher = launcher or Launcher()
    argv = launcher.wrap([*program.argv, str(input_path), str(output_path)])
    full_env = {**os.environ, "FA_TIMING": "1", **(env or {})}
    chunks: list[str] = []
    try:
        with HeldWhileStarting() as held:
            proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=full_env,
                                    start_new_session=True, preexec_fn=die_with_fa())
    except OSError as e:
        raise FaError(f"cannot start {argv[0]}: {e.strerror}", exit_code=ExitStatus.FAILED) from None
    # The program's own exit ends the run, not the end of its stderr: a child it leaves behind
    # holding the pipe is killed with its process group, and never turns a finished run into a TLE.
    # From its start on, whatever stops fa (Ctrl-C, SIGTERM, SIGHUP, raised here) stops the program first.
    try:
        # The clock starts once the program is exec'd (Popen returns then): the fork before it is fa's,
        # and costs in proportion to fa's memory (25 ms in a long test run), not the program's.
        start = time.perf_counter()
        held.release()  # a Ctrl-C that came while it started: raised here, where the program is stopped
        sandbox_watch = getattr(launcher, "watch", None)  # a sandbox counts what the program starts
        watcher = sandbox_watch(proc) if sandbox_watch else None
        reader = threading.Thread(target=lambda: chunks.extend(iter(proc.stderr.readline, "")), daemon=True)
        reader.start()
        watch = ExitWatch(proc)
        ended = watch.wait(timeout)
    except BaseException:
        stop(proc, output=None)
        raise
    if ended is None:
        stop(proc, output=None)
        reaped = watch.wait(KILL_GRACE_S)  # its status, once the stopped program is reaped
        reader.join(KILL_GRACE_S)
        _settled(watcher)
        returncode = reaped.returncode if reaped else proc.returncode
        return RunResult(argv, returncode, time.perf_counter() - start, "".join(chunks), timed_out=True)
    wall = ended.at - start
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # whatever it left running
    gpu.give_back()
    reader.join(KILL_GRACE_S)
    _settled(watcher)
    stderr = "".join(chunks)
    result = RunResult(argv, ended.returncode, wall, stderr, *parse_timing(stderr),
                       cpu_user_s=ended.cpu_user_s, cpu_system_s=ended.cpu_system_s)
    if ended.returncode != 0:
        why = launcher.explain_failure(ended.returncode, stderr)
        if why:
            result.stderr += f"\n{why}"
            result.launcher_says = why
    return result


def _settled(watcher: threading.Thread | None) -> None:
    """The sandbox's watcher joined: it ends once every process the program started is gone (a
    process the kernel never reaps, one stuck in a driver call, is not waited for past the bound)."""
    if watcher is not None:
        watcher.join(SETTLE_BOUND_S)


@dataclass(frozen=True)
class Exit:
    """When a program exited (time.perf_counter), its exit code (negative: the signal), and the
    CPU time it spent, in user space and in the kernel (its rusage: the kernel's share is mostly
    page faults and file reads and writes)."""
    at: float
    returncode: int
    cpu_user_s: float | None = None
    cpu_system_s: float | None = None


class ExitWatch:
    """Waits for a program's exit in a thread blocked in wait4, from its start: Popen.wait(timeout)
    polls instead, at most every 50 ms, and so would add up to 50 ms to every time it took. The
    exit code is the Exit's: where stop() waits too, Popen's own wait may find the program reaped
    here and take its code for 0."""

    def __init__(self, proc: subprocess.Popen):
        self.proc = proc
        self.exit: Exit | None = None
        self.thread = threading.Thread(target=self._wait, daemon=True)
        self.thread.start()

    def _wait(self):
        try:
            _, status, usage = os.wait4(self.proc.pid, 0)
        except ChildProcessError:  # reaped first by Popen's own wait (stop()): its code is right
            self.exit = Exit(time.perf_counter(), self.proc.wait())
            return
        ended, code = time.perf_counter(), os.waitstatus_to_exitcode(status)
        self.proc.returncode = code
        self.exit = Exit(ended, code, usage.ru_utime, usage.ru_stime)

    def wait(self, timeout: float | None) -> Exit | None:
        """The Exit, or None if the program still runs after `timeout` seconds."""
        self.thread.join(timeout)
        return self.exit


def stop(proc: subprocess.Popen, output: int | None = 1) -> str:
    """SIGTERM to the program's process group, SIGKILL if it is still there after the grace
    period; returns what it wrote to stderr (output=1) or stdout (output=0) where fa had not
    read it yet (output=None: a reader thread has it)."""
    def finish(wait):
        if output is None:
            proc.wait(timeout=wait)
            return ""
        return proc.communicate(timeout=wait)[output] or ""

    for sig, wait in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            return finish(wait)
        except subprocess.TimeoutExpired:
            continue
    return finish(None)