"""Untrusted code confined: a student's build and runs, where fa runs them for someone other than
their author (fa run --sandbox; a TA's class), in bubblewrap (Debian's `bubblewrap` package).

What the confined command sees: the system read-only (/usr, /etc, /opt and the CUDA toolkit: the
compilers and libraries a build or a run needs), a /proc and /dev of its own, a /tmp in memory of
TMP_BYTES at most, and only the paths fa names: the program and its input read-only, the folder
its output goes to (or a build's own folder) writable. Not the home folder, not another
student's folder, not the expected outputs, not the cache. No network (a namespace of its own:
a connection to anything outside is refused), a process namespace of its own (when the command
ends, whatever it started is killed with it), no capabilities, no environment but what fa sets.
The GPU's device nodes (NVIDIA's /dev/nvidia*, AMD's /dev/kfd and /dev/dri) and /sys are bound
only where a run needs a GPU. Limits (prlimit, inherited by all it starts): processes, the size
of any one file, CPU time and memory (RLIMIT_DATA: a heap and private writable maps, not the
address space, of which CUDA reserves a large one); beside a run, a watch that kills it where its
namespace holds more processes than the limit (the kernel never limits root's) or its writable
folders more bytes.
"""
from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

from .. import locations, settings
from ..cases.format import read_header
from ..errors import ExitStatus, FaError, FormatError

BWRAP = "bwrap"
INSTALL = "install it with `sudo apt-get install bubblewrap` (Debian, Ubuntu) or `sudo dnf install bubblewrap`"
SYSTEM = ("/usr", "/etc", "/opt")  # read-only, where they exist
TOP_LEVEL = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")  # links into /usr on most systems
# Files of /etc hidden (the view shows /dev/null there) where this user can read them: what else is
# unreadable to fa's user is unreadable inside too.
SECRETS = ("/etc/shadow", "/etc/gshadow", "/etc/sudoers", "/etc/ssh/ssh_host_rsa_key", "/etc/ssh/ssh_host_ecdsa_key",
           "/etc/ssh/ssh_host_ed25519_key")
GPU_NODES = ("/dev/nvidia*", "/dev/nvidia-caps", "/dev/kfd", "/dev/dri")
KEPT_VARIABLES = ("LANG", "LC_ALL", "CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
                  "FA_TIMING", "HIP_PLATFORM", "TMPDIR")


OUTPUT_MARGIN = 16 << 20  # a run may write its output's size and this more, in any one file
KILLED = "killed: "  # how the sandbox's reason for a run it ended begins (explain_failure)


@dataclass(frozen=True)
class Limits:
    processes: int = 256          # processes and threads it may have at once (over the user's own now)
    file_bytes: int = 8 << 30     # any one file it writes (an output of the course's largest case: 0.3 GB)
    memory_bytes: int = 32 << 30  # RLIMIT_DATA
    cpu_s: int | None = 1800      # CPU time (SIGXCPU): a course case's limit on every core many times over;
                                  # the wall time is the caller's to limit (a case's, a build's)
    tmp_bytes: int = 1 << 30      # its /tmp
    written_bytes: int = 16 << 30  # all it writes into the folders it may write to (many files, each under file_bytes)


def missing_line() -> str | None:
    """Why no sandbox can be had here, in one line; None where bwrap is installed."""
    if shutil.which(BWRAP) is None:
        return f"the sandbox needs bubblewrap ({BWRAP}), which is not installed: {INSTALL}"
    return None


def _user_processes() -> int:
    """This user's processes now: RLIMIT_NPROC counts them all, the sandbox's among them."""
    uid, count = str(os.getuid()), 0
    for status in glob.glob("/proc/[0-9]*/status"):
        try:
            with open(status) as f:
                count += any(line.startswith("Uid:") and line.split()[1] == uid for line in f)
        except OSError:
            continue
    return count


class Sandbox:
    """A launcher (programs.Launcher's two calls) that confines what it runs (the module's
    docstring says how)."""

    remote = False

    def __init__(self, limits: Limits = Limits(), gpu: bool = True):
        if line := missing_line():
            raise FaError(line, exit_code=ExitStatus.FAILED)
        self.limits, self.gpu = limits, gpu
        self.killed: str | None = None  # why the watch killed the last run
        self.watched: list[Path] = []  # the folders the last run may write to
        self.run_limits = limits  # the last run's (sized to its output)

    def wrap(self, argv: list[str]) -> list[str]:
        """PROGRAM [TOOL ARGS] INPUT OUTPUT, confined: every existing file it names read-only, the
        output's folder (the last argument's) writable, and the folder of a file it names that is
        not there yet (a tool's log) where that folder is one of fa's own scratch folders. What it
        may write is sized to its output, where its input's header says it: OUTPUT_MARGIN more
        for a file, twice that in all."""
        named = [Path(a) for a in argv if a.startswith("/")]
        readable = [p for p in named if p.is_file()]
        # fa's own scratch folders only (fa-KIND-PID-...): where a tool's log is to be written
        scratch = [p.parent for p in named if not p.exists() and p.parent.is_dir() and p.parent.name.startswith("fa-")]
        writable = [Path(argv[-1]).parent, *scratch]
        try:
            most = read_header(argv[-2]).output_bytes + OUTPUT_MARGIN
            limits = replace(self.limits, file_bytes=min(self.limits.file_bytes, most),
                             written_bytes=min(self.limits.written_bytes, 2 * most))
        except (FormatError, IndexError):
            limits = self.limits
        return self.confine(argv, readable=readable, writable=writable, gpu=self.gpu, limits=limits)

    def confine(self, argv: list[str], readable=(), writable=(), cwd: Path | None = None,
                gpu: bool = False, env: dict[str, str] | None = None, limits: Limits | None = None) -> list[str]:
        """The command line that runs argv confined, seeing only `readable` (read-only) and
        `writable` besides the system, from `cwd` (default: the first writable folder)."""
        views: list[str] = []
        for top in TOP_LEVEL:
            if os.path.islink(top):
                views += ["--symlink", os.readlink(top), top]
            elif os.path.isdir(top):
                views += ["--ro-bind", top, top]
        for place in (*SYSTEM, settings.cuda_home(), settings.rocm_path()):
            if place and os.path.isdir(place) and not any(place.startswith(s + "/") for s in SYSTEM):
                views += ["--ro-bind", place, place]
        for secret in SECRETS:  # /etc is read-only, and these read as empty
            if os.access(secret, os.R_OK):
                views += ["--ro-bind", "/dev/null", secret]
        views += ["--proc", "/proc", "--dev", "/dev", "--size", str(self.limits.tmp_bytes), "--tmpfs", "/tmp"]
        if gpu:
            views += ["--ro-bind", "/sys", "/sys"]
            for node in sorted({n for pattern in GPU_NODES for n in glob.glob(pattern)}):
                views += ["--dev-bind", node, node]
        for path in dict.fromkeys(str(Path(p).resolve()) for p in readable):
            views += ["--ro-bind", path, path]
        folders = list(dict.fromkeys(str(Path(p).resolve()) for p in writable))
        for path in folders:
            views += ["--bind", path, path]
        self.watched, self.run_limits = [Path(f) for f in folders], limits or self.limits  # for watch()
        chdir = str(cwd) if cwd else (folders[0] if folders else "/tmp")
        variables = settings.variables(KEPT_VARIABLES)
        variables.update(env or {})
        variables.update(PATH=_system_path(), HOME="/tmp")
        settings_ = [w for k, v in variables.items() for w in ("--setenv", k, v)]
        bwrap = [BWRAP, "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL", "--clearenv",
                 *settings_, *views, "--chdir", chdir, "--", *argv]
        return [*self._prlimit(limits or self.limits), *bwrap]

    def watch(self, proc, folders: list[Path] | None = None, limits: Limits | None = None,
              remember: bool = True) -> threading.Thread:
        """Beside a confined command (programs.run calls it once the command has started; a
        build, with its own folders and limits): the processes of its namespace counted every
        WATCH_S, and all of them killed past the limit (RLIMIT_NPROC does that for a user, but
        not for root, whom the kernel never limits), or where it wrote more than it may.
        remember: the reason kept for explain_failure (a run's; builds run side by side).
        The thread it returns ends once the command has ended and its namespace is empty: joined,
        nothing the command started outlives it."""
        if remember:
            self.killed = None  # a run stopped at its time limit is never explained: its reason goes with it
        args = (proc, list(folders if folders is not None else self.watched), limits or self.run_limits, remember)
        watcher = threading.Thread(target=self._count, args=args, daemon=True)
        watcher.start()
        return watcher

    def _count(self, proc, folders: list[Path], limits: Limits, remember: bool) -> None:
        namespace, why = None, None
        before = _bytes_under(folders) or 0  # what its folders held already (a probe's own large input)
        while proc.poll() is None:
            namespace = namespace or _namespace_under(proc.pid)
            if namespace and _processes_in(namespace) > limits.processes:
                why = f"{KILLED}more than the sandbox's {limits.processes} processes at once"
            elif (written := _bytes_under(folders)) is None:
                why = f"{KILLED}it made more than the sandbox's {MOST_FILES} files"
            elif written - before > limits.written_bytes:
                why = f"{KILLED}it wrote more than the sandbox's {limits.written_bytes} bytes"
            if why:
                if remember:
                    self.killed = why
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)  # bwrap goes, and its namespace with it
                break
            time.sleep(WATCH_S)
        _until_empty(namespace)


    def _prlimit(self, limits: Limits) -> list[str]:
        words = ["prlimit", f"--nproc={_user_processes() + limits.processes}", f"--fsize={limits.file_bytes}",
                 f"--data={limits.memory_bytes}"]
        if limits.cpu_s:
            words.append(f"--cpu={limits.cpu_s}")
        return [*words, "--"]

    def explain_failure(self, returncode: int, stderr: str) -> str | None:
        if self.killed:
            said, self.killed = self.killed, None
            return said
        if returncode == -25 or returncode == 128 + 25 and _largest_file(self.watched) >= self.run_limits.file_bytes:
            # SIGXFSZ (bwrap exits 128 + the signal that ended its child; a program's own exit(153) has no
            # file at the limit)
            return f"{KILLED}a file it wrote passed the sandbox's {self.run_limits.file_bytes} bytes (SIGXFSZ)"
        if returncode in (-24, 128 + 24):  # SIGXCPU
            return f"{KILLED}it used the sandbox's {self.run_limits.cpu_s} s of CPU time (SIGXCPU)"
        if "bwrap:" in stderr:
            line = next(l for l in stderr.splitlines() if "bwrap:" in l)
            return f"the sandbox (bubblewrap) could not start it: {line.strip()}"
        return None


WATCH_S = 0.02


def _pid_namespace(pid: int | str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for t in os.listdir(f"/proc/{pid}/task")
                for c in Path(f"/proc/{pid}/task/{t}/children").read_text().split()]
    except (OSError, ValueError):
        return []


def _namespace_under(pid: int) -> str | None:
    """The first process namespace other than fa's among pid's descendants (bwrap's)."""
    own, frontier = _pid_namespace("self"), [pid]
    while frontier:
        nxt = []
        for p in frontier:
            ns = _pid_namespace(p)
            if ns and ns != own:
                return ns
            nxt += _children(p)
        frontier = nxt
    return None


SETTLE_S = 10  # the most a namespace's processes take to go once its first process has (a few thousand reaped)


def _until_empty(namespace: str | None) -> None:
    """Waits (at most SETTLE_S) for the kernel to end every process of a namespace whose first process
    is gone. Its zombies are not waited for: bwrap leaves its namespace's first process to the
    machine's init to reap, which may take seconds or never come (1.9 s a run here, where every
    confined run waited for it)."""
    deadline = time.monotonic() + SETTLE_S
    while namespace and _processes_in(namespace, living=True) and time.monotonic() < deadline:
        time.sleep(WATCH_S)


def _processes_in(namespace: str, living: bool = False) -> int:
    """Processes (threads not counted) whose process namespace is this one; living: not zombies."""
    return sum(_pid_namespace(p) == namespace and (not living or _living(p))
               for p in os.listdir("/proc") if p.isdigit())


def _living(pid: int | str) -> bool:
    """A process that has not ended: neither a zombie waiting to be reaped, nor gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2:][:1] not in ("Z", "X")


MOST_FILES = 10000  # files and folders a confined command may make in the folders it may write to


def _largest_file(folders: list[Path]) -> int:
    """The size of the largest file directly in the folders (0 where none)."""
    sizes = [entry.stat(follow_symlinks=False).st_size for folder in folders if folder.is_dir()
             for entry in os.scandir(folder) if entry.is_file(follow_symlinks=False)]
    return max(sizes, default=0)


def _bytes_under(folders: list[Path]) -> int | None:
    """Bytes the files under the folders take on disk; None past MOST_FILES entries (a count that
    stopped there would miss what lies beyond)."""
    total, stack, seen = 0, [str(f) for f in folders], 0
    while stack:
        try:
            with os.scandir(stack.pop()) as entries:
                for entry in entries:
                    seen += 1
                    if seen > MOST_FILES:
                        return None
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                    else:
                        total += entry.stat(follow_symlinks=False).st_blocks * 512
        except OSError:
            continue
    return total


def _system_path() -> str:
    """PATH inside: this PATH's folders that the sandbox shows (the CUDA toolkit's bin, say)."""
    shown = (*SYSTEM, *TOP_LEVEL, settings.cuda_home(), settings.rocm_path())
    kept = [d for d in settings.search_path().split(os.pathsep)
            if d.startswith("/") and any(s and (d == s or d.startswith(s + "/")) for s in shown)]
    return os.pathsep.join(dict.fromkeys(kept or ["/usr/local/bin", "/usr/bin", "/bin"]))


def paths_in(line: str) -> list[Path]:
    """The existing absolute paths a command line names (a header fa's build flags include), but for
    those the view has its own way (/dev/null bound read-only would refuse `> /dev/null`)."""
    words = [w.strip("'\"").split("=", 1)[-1] for w in line.split()]
    own = (*SYSTEM, *TOP_LEVEL, "/proc", "/sys")
    return [Path(w) for w in words if w.startswith("/") and os.path.exists(w) and not _a_device(w)
            and not any(w == top or w.startswith(top + "/") for top in own)]


def _a_device(path: str) -> bool:
    """A node of /dev (the view's own /dev has it), not a file in /dev/shm's memory."""
    return path.startswith("/dev/") and not path.startswith("/dev/shm/")


LAYER_SOURCES = ("src_cuda", "src_hip", "src_common")  # fa's layer headers include each other across these


def _with_layer_neighbours(paths: list[Path]) -> list[Path]:
    """The paths a build names, with fa's own source folders where one of its layer headers is named
    (src_cuda/gtx1080/fa_gtx1080.h includes ../launch_hook.h): a header alone would not compile."""
    root = locations.sources()
    layer = [root / name for name in LAYER_SOURCES]
    if not any(folder in p.parents for p in paths for folder in layer):
        return paths
    return [*paths, *(folder for folder in layer if folder.is_dir())]


# The sandbox in force in this fa process (fa run --sandbox): a student's build runs in it too.
_in_force: list[Sandbox] = []


def use(box: Sandbox | None) -> None:
    _in_force[:] = [box] if box is not None else []


def in_force() -> Sandbox | None:
    return _in_force[0] if _in_force else None


BUILD_S = 900  # a confined build's time: a compiler that takes longer is stuck, or made to


def build_run(argv: list[str], work: Path, env: dict[str, str]) -> tuple[list[str], dict]:
    """A build's command (make, a compiler line) as it runs, and run_tool's further arguments:
    where a sandbox is in force, confined (its folder and its temporary folder writable, the
    paths its line names readable), watched and stopped after BUILD_S; else as it is."""
    box = in_force()
    if box is None:
        return argv, {}
    writable = [work, *([env["TMPDIR"]] if env.get("TMPDIR") else [])]
    named = [p for word in argv for p in paths_in(word) if not any(p == w or Path(w) in p.parents for w in writable)]
    named = _with_layer_neighbours(named)
    kept = {k: v for k, v in env.items() if k in ("TMPDIR", "HIP_PLATFORM", "MAKEFLAGS")}
    confined = box.confine(argv, readable=named, writable=writable, cwd=work, env=kept)
    folders = [Path(w).resolve() for w in writable]

    def watch(proc) -> threading.Thread:
        return box.watch(proc, folders, box.limits, remember=False)
    return confined, dict(watch=watch, timeout=BUILD_S)
