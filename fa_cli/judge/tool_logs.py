"""The tools a cause is looked for with, and what they say, read: compute-sanitizer's first
error, a debugger's backtrace and exit, AddressSanitizer's report; the tools found where the
CUDA toolkit keeps them; a program's kind (cpu, cuda, hip) read from its binary."""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .. import settings
from ..programs import gpu_shares, gpu_turns, programs
from ..programs.programs import Program
from . import step_times

CRASH_SIGNALS = ("SIGSEGV", "SIGABRT", "SIGBUS", "SIGFPE", "SIGILL")
SANITIZER_LINES = 3  # of a sanitizer's report, quoted after its first line
# memcheck's line on where an out-of-bounds address lies: inside, or bytes before or after, its nearest allocation
NEAREST_ALLOCATION = re.compile(r"and is (?:inside|([\d,]+) bytes? (before|after)) the nearest allocation "
                                r"at 0x[0-9a-f]+ of size ([\d,]+) bytes?")
BACKTRACE_FRAMES = 4
SANITIZER_POLL_S = 0.05  # how often the tools side by side are looked at against their timeout
PRINT_LIMIT = 100  # reports a tool prints (--print-limit); stopped there: past it a report only counts, and
# each is a round trip the GPU's other work slows (16,384 of initcheck's: 3.3 s alone, 17 s beside 4 busy runs)
COUNTING = ("memcheck", "initcheck", "synccheck")  # racecheck's analysis comes at its end: it runs whole
SHOWN_ALL = "shown all"  # _side_by_side's code for a tool stopped at its print limit
LAYER_ONLY_SHOWN = (f"its first {PRINT_LIMIT} reports all in the code of fa's judge-GPU layer (the MI210 "
                    "emulation's or the launch log's own); fa stopped it there, before any report at a line of the "
                    "program's")
REPORT_HEAD = re.compile(r"^========= (?!(?:COMPUTE-SANITIZER|ERROR SUMMARY|RACECHECK SUMMARY|Target application|"
                         r"Tool execution finished|Saved host backtrace))\S", re.MULTILINE)


def reports_in(log: Path) -> int:
    """The reports in a tool's log so far (fa's layers' too: the print limit counts them); 0: none yet."""
    try:
        return len(REPORT_HEAD.findall(log.read_text(errors="replace")))
    except OSError:
        return 0


# ---------------------------------------------------------------- the tools
def find_tool(name: str) -> str | None:
    """A tool on PATH or where the CUDA toolkit keeps it (beside nvcc, CUDA_HOME, /usr/local/cuda)."""
    found = shutil.which(name)
    if found:
        return found
    folders = [settings.cuda_home(), "/usr/local/cuda", "/opt/cuda"]
    nvcc = shutil.which("nvcc")
    if nvcc:
        folders.insert(0, str(Path(nvcc).resolve().parent.parent))
    for folder in filter(None, folders):
        path = Path(folder) / "bin" / name
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    return None


def gpu_kind(program: Program) -> str:
    """"cuda", "hip" or "cpu": what the program runs its kernels on, from its binary's sections
    (nvcc puts device code in .nv_fatbin, hipcc in .hip_fatbin)."""
    if program.name in ("cuda", "hip-cuda"):
        return "cuda"
    if program.name == "hip":
        return "hip"
    try:
        data = program.path.read_bytes()
    except OSError:
        return "cpu"
    if b".nv_fatbin" in data or b"__nv_module_id" in data:
        return "cuda"
    if b".hip_fatbin" in data or b"__hip_fatbin" in data:
        return "hip"
    return "cpu"


@dataclass
class Budget:
    """Seconds a search may take, counted from its start, less what it waited for its turns on the
    GPU (fa class: another program's timed run) and what it spent building another form of the
    program (a build is the compiler's time, as the judged build's is, not the search's). Beside
    other searches (fa class's second half), each second counts as this search's share of it
    (gpu_shares): it reaches the steps it reaches alone."""
    seconds: float
    start: float = field(default_factory=time.monotonic)
    waited_before: float = field(default_factory=gpu_turns.waited_s)
    building_s: float = 0.0

    @property
    def used(self) -> float:
        shared = gpu_shares.charged(self.start, time.monotonic())
        return max(0.0, shared - (gpu_turns.waited_s() - self.waited_before) - self.building_s)

    @contextlib.contextmanager
    def build(self):
        """A build of another form of the program: not counted."""
        began = time.monotonic()
        try:
            yield
        finally:
            self.building_s += gpu_shares.charged(began, time.monotonic())

    @property
    def left(self) -> float:
        return max(0.0, self.seconds - self.used)


def run_captured(argv: list[str], timeout: float, env: dict | None = None) -> tuple[int | None, str]:
    """A tool's exit code (None past the timeout) and stdout with stderr; an untimed turn on the GPU."""
    with gpu_turns.turn(timed=False):
        return _captured(argv, timeout, env)


def _captured(argv: list[str], timeout: float, env: dict | None) -> tuple[int | None, str]:
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                            start_new_session=True, preexec_fn=programs.die_with_fa(),
                            env={**os.environ, **(env or {})})
    try:
        out, _ = proc.communicate(timeout=max(timeout, 0.1))
        return proc.returncode, out
    except subprocess.TimeoutExpired:
        return None, programs.stop(proc, output=0)
    except BaseException:
        programs.stop(proc)
        raise


TOOL_WORDS = {  # compute-sanitizer's tool: what a report of it is, in a student's words
    "memcheck": "an invalid memory access",
    "racecheck": "a shared-memory race",
    "synccheck": "a barrier used where not every thread of the block reaches it",
    "initcheck": "device memory read before anything was written to it",
}


@dataclass
class SanitizerReport:
    """What one compute-sanitizer tool said of one run: its first error (empty where none), the errors
    in all (racecheck counts only what it shows), whether it ran to the end (not stopped at its time
    limit), whether the program made any CUDA call for it to check (one that exits first, or computes
    on the host, gives it nothing), and how many reports were the judge GPUs' layers' own (in_layer)."""
    tool: str
    first: list[str]
    count: int | None
    finished: bool
    checked_nothing: bool = False
    in_layers: int = 0
    shown_all: bool = False  # stopped by fa once it had printed PRINT_LIMIT reports: the rest only counted

    def counted(self, noun: str = "") -> str | None:
        """The reports in all in words ("16384 errors in all"), or fa's stop at the print limit; None: no count."""
        if self.shown_all:
            return f"its first {PRINT_LIMIT} reports shown: fa stopped the tool there, any more would only be counted"
        return f"{self.count} {noun + ' ' if noun else ''}in all" if self.count else None


def sanitize_side_by_side(tools: tuple[str, ...], program_argv: list[str], input_path: Path, work: Path,
                          timeout: float, wrap: Callable[[list[str]], list[str]] = lambda argv: argv,
                          inputs: dict[str, Path] | None = None) -> list[SanitizerReport] | None:
    """compute-sanitizer --tool TOOL on PROGRAM INPUT WORK/TOOL.out for each tool, all at once,
    within one timeout (racecheck with its analysis report; each tool its own log, output and
    console file in WORK; inputs: another input for some tools), where the program runs (wrap:
    srun on a cluster), each log read back without fa's launch layer; None where compute-sanitizer
    is not installed."""
    sanitizer = find_tool("compute-sanitizer")
    if sanitizer is None:
        return None
    argvs = [wrap([sanitizer, "--tool", tool, *(["--racecheck-report", "analysis"] if tool == "racecheck" else []),
                   "--print-limit", str(PRINT_LIMIT), "--log-file", str(work / f"{tool}.log"), *program_argv,
                   str((inputs or {}).get(tool, input_path)), str(work / f"{tool}.out")]) for tool in tools]
    for tool in tools:  # a log left by an earlier run in the same folder is not this run's
        (work / f"{tool}.log").unlink(missing_ok=True)
    watched = [work / f"{tool}.log" if tool in COUNTING else None for tool in tools]
    asked = time.monotonic()
    with gpu_turns.tool_slot(), gpu_turns.turn(timed=False):
        began = time.monotonic()
        ended = _side_by_side(argvs, [work / f"{tool}.console" for tool in tools], timeout, watched)
    step_times.note("compute-sanitizer " + ", ".join(tools), wall_s=round(time.monotonic() - asked, 2),
                    waited_s=round(began - asked, 2), limit_s=round(timeout, 1),
                    finished={tool: code is not None and code != SHOWN_ALL for tool, code in zip(tools, ended)},
                    at_print_limit=[tool for tool, code in zip(tools, ended) if code == SHOWN_ALL])
    reports = []
    for tool, code in zip(tools, ended):
        shown_all = code == SHOWN_ALL
        log, console = work / f"{tool}.log", work / f"{tool}.console"
        raw = log.read_text(errors="replace") if log.exists() else console.read_text(errors="replace")
        text = without_layer(raw)
        first = first_sanitizer_error(text)
        # stopped at the print limit with none of the program's own reports among them: not a whole run
        reports.append(SanitizerReport(tool, first, sanitizer_count(text) if first and tool != "racecheck" else None,
                                       finished=bool(first) if shown_all else code is not None,
                                       checked_nothing=NO_CUDA_CALL in text,
                                       in_layers=sum(map(in_layer, report_blocks(raw))), shown_all=shown_all))
    return reports


def _side_by_side(argvs: list[list[str]], consoles: list[Path], timeout: float,
                  watched: list[Path | None] | None = None) -> list[int | str | None]:
    """Each command started at once, its stdout and stderr into its console file; their exit codes
    (None: stopped at the common timeout, counted as a search's budget counts it: beside other
    searches, its share of each second, gpu_shares; SHOWN_ALL: stopped once its log, where
    watched, held PRINT_LIMIT reports). Interrupted, every one is stopped before fa goes on."""
    procs, shown = [], set()
    watched = watched or [None] * len(argvs)
    try:
        for argv, console in zip(argvs, consoles):
            with open(console, "w") as out:
                procs.append(subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                              preexec_fn=programs.die_with_fa()))
        start, sizes = time.monotonic(), {}
        while any(proc.poll() is None for proc in procs) and \
                gpu_shares.charged(start, time.monotonic()) < max(timeout, 0.1):
            for k, (proc, log) in enumerate(zip(procs, watched)):
                size = log.stat().st_size if log is not None and log.exists() else 0
                if log is None or proc.poll() is not None or sizes.get(k) == size:
                    continue  # read again only once the log has grown
                sizes[k] = size
                if reports_in(log) >= PRINT_LIMIT:
                    programs.stop(proc, output=None)
                    shown.add(k)
            time.sleep(SANITIZER_POLL_S)
        codes: list[int | str | None] = []
        for k, proc in enumerate(procs):
            if k in shown:
                codes.append(SHOWN_ALL)
            elif proc.poll() is None:
                programs.stop(proc, output=None)
                codes.append(None)
            else:
                codes.append(proc.returncode)
        return codes
    except BaseException:
        for proc in procs:
            programs.stop(proc, output=None)
        raise


# ---------------------------------------------------------------- what the tools said
NO_CUDA_CALL = "Target application terminated before first instrumented API call"  # the tool's words: no
# CUDA call seen, so nothing checked (an error of the tool's, not a report on the program); fa's:
NO_CUDA_CALL_SAID = ("the program made no CUDA call there (compute-sanitizer: target application terminated "
                     "before first instrumented API call)")


TOOLS_OWN = ("COMPUTE-SANITIZER", "ERROR SUMMARY", "RACECHECK SUMMARY", "Target application",  # not reports
             "Tool execution finished")


def first_sanitizer_error(log: str) -> list[str]:
    """compute-sanitizer's first error: its headline, the lines that place it, where an address outside
    every allocation lies (report_readings.global_past_end reads it)."""
    lines = [l.removeprefix("=========").rstrip() for l in log.splitlines() if l.startswith("=========")]
    for i, line in enumerate(lines):
        text = line.strip()
        if not text or line.startswith("     ") or text.removeprefix("Error: ").startswith(TOOLS_OWN) or \
                "Maximum number of" in text or "Environment variable" in text:  # a note on the tool's limits
            continue
        detail = []
        for follow in lines[i + 1:]:
            if not follow.startswith("     ") or "Saved host backtrace" in follow:
                break
            detail.append(follow.strip())
        placed = [l for l in detail[SANITIZER_LINES:] if (m := NEAREST_ALLOCATION.match(l)) and m.group(2)][:1]
        return [text, *detail[:SANITIZER_LINES], *placed]
    return []


# the judge GPUs' layers (src_hip/wave64, src_cuda/gtx1080), their launch log and hook (src_cuda/launch_log.h,
# src_cuda/launch_hook.h)
LAYER = re.compile(r"fa_wave64|wave64_device\.h|fa_gtx1080|fa_launch_log|fa_launch_hook")


def report_blocks(log: str) -> list[list[str]]:
    """A sanitizer's log cut into its reports: each a headline and its indented lines."""
    blocks, block = [], []
    for line in log.splitlines():
        if line.startswith("=========") and not line.startswith("=========     "):
            blocks.append(block)
            block = []
        block.append(line)
    return [b for b in [*blocks, block] if b]


def in_layer(block: list[str]) -> bool:
    """A report of a layer's own code: its device lines name the layer (the MI210 emulation's two
    warps meet through shared memory on purpose, which racecheck reports, and no student wrote
    it), or a CUDA call failed whose caller is the layer (the launch log's own calls). A kernel's
    fault is the student's even where its launch went through the layer's hook: the hook is only
    in the host backtrace of the launch."""
    device, _, _ = "\n".join(block).partition("Saved host backtrace")
    if LAYER.search(device):
        return True
    frames = [l for l in block if "Host Frame:" in l and not re.search(r" in \S*\.so[\d.]*\s*$", l)]
    return "CUDA API call" in block[0] and bool(frames) and bool(LAYER.search(frames[0]))


def without_layer(log: str) -> str:
    """A sanitizer's log without the reports of the judge GPUs' layers' own code (in_layer), its
    error-level reports before its warning-level ones."""
    blocks = [b for b in report_blocks(log) if not in_layer(b)]
    errors = [b for b in blocks if "Error: " in b[0]]
    return "\n".join(line for b in [*errors, *[b for b in blocks if b not in errors]] for line in b)


# racecheck's warning level: hazards the programming model allows to be meant, chiefly threads of a
# warp that rely on running in step (Volta and later schedule them independently)
RACE_WARNING = ("a shared-memory hazard at racecheck's warning level (threads that rely on running in step, as a "
                "warp's lanes without __syncwarp; independent thread scheduling does not promise it)")


def sanitizer_lines(first: list[str]) -> list[str]:
    """A sanitizer's first report in a line or two: what, where (kernel, offset, file:line)."""
    race = re.match(r"(?:(Error|Warning): )?Race reported between (\w+) access at (.+)", first[0])
    if race:
        other = re.match(r"and (\w+) access at (.+)", first[1]) if len(first) > 1 else None
        what = RACE_WARNING if race.group(1) == "Warning" else "a shared-memory race"
        text = f"{what}: a {race.group(2).lower()} at {short_place(race.group(3))}"
        if other:
            text += f" against a {other.group(1).lower()} at {short_place(other.group(2))}"
            text += one_line_stores(race.group(2), other.group(1), race.group(3), other.group(2))
        return [text]
    detail = [short_place(l) if l.startswith("at ") else l for l in first[1:]]
    return [first[0].removeprefix("Error: ")] + (["; ".join(detail)] if detail else [])


def one_line_stores(kind: str, other_kind: str, place: str, other_place: str) -> str:
    """Two writes of one source line against each other: what that says of the store's index (in
    words, after a ':'); else ''."""
    line, other_line = (re.search(r"[\w.+-]+:\d+", short_place(p).rpartition(", ")[2]) for p in (place, other_place))
    if kind.lower() != "write" or other_kind.lower() != "write" or not line or not other_line or \
            line.group(0) != other_line.group(0):
        return ""
    return (": threads of a block store to one shared place from the same line: its index gives two threads one "
            "place (a flat index split into row and column by a width other than the tile's row, or a thread's "
            "share of a loop that overlaps another's), unless each writes the same value")


def sanitizer_count(log: str) -> int | None:
    match = re.search(r"(?:ERROR SUMMARY|RACECHECK SUMMARY): (\d+) (?:error|hazard)", log)
    return int(match.group(1)) if match else None


def short_place(line: str) -> str:
    """"at void attention<64>(const float *, ...)+0x2d0 in /x/hw4.cu:87" -> "attention<64>+0x2d0, hw4.cu:87"."""
    text = re.sub(r"^(and )?(\w+ access )?at ", "", line.strip())
    text, _, where = text.partition(" in ") if " in /" not in text else text.rpartition(" in ")
    name, plus, offset = text.partition("+0x")
    name = name.removeprefix("void ")
    if name.endswith(")"):  # drop the argument list: the last balanced (...)
        depth = 0
        for i in range(len(name) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(name[i], 0)
            if depth == 0:
                name = name[:i]
                break
    place = name + (plus + offset if plus else "")
    if where:
        file, _, rest = where.partition(" ")
        place += f", {Path(file).name}" + (f" {rest}" if rest else "")
    return place


# gdb's line for a stop by a signal, in any thread: "Program received signal SIGSEGV", "Thread 2
# "hw4" received signal SIGSEGV", "Thread 0x7ffff (LWP 12) received signal SIGSEGV".
CAUGHT = re.compile(r"^(?:\[.*?\]\s*)?(Program|Thread .+?) received signal (SIG\w+)", re.MULTILINE)
# gdb's line for a program that ended by itself.
EXITED = re.compile(r"\[Inferior \d+ \(.*?\) exited (normally|with code (\d+))\]")
KILLED = re.compile(r"Program terminated with signal (SIG\w+)")
DEBUGGER_TAIL = 3  # lines of a debugger's output quoted where fa could not read it


def backtrace(log: str) -> tuple[str | None, list[str]]:
    """The signal a debugger caught (in whichever thread) and the first frames of its backtrace:
    gdb's `bt` after a stop shows the thread that received the signal."""
    signal = CAUGHT.search(log)
    frames = [l.strip() for l in log.splitlines() if re.match(r"#\d+\s", l.strip())]
    return (signal.group(2) if signal else None), frames


def caught_in(log: str) -> str | None:
    """The thread that received the signal where it is not the main one: 'Thread 2 "hw4"'."""
    signal = CAUGHT.search(log)
    who = signal.group(1) if signal else "Program"
    return None if who == "Program" or re.match(r"Thread 1\b", who) else who


def debugger_exit(log: str) -> str | None:
    """How the program ended under the debugger by itself: "exited normally", "exited with code
    N", "terminated with SIGABRT"; None where the debugger's output does not say."""
    exited = EXITED.search(log)
    if exited:
        return f"exited {exited.group(1)}"
    killed = KILLED.search(log)
    return f"terminated with {killed.group(1)}" if killed else None


def is_own_frame(frame: str) -> bool:
    """A frame with a file and line in the program's own source, not the C library's or CUDA's."""
    where = re.search(r" at (\S+):\d+", frame)
    if not where:
        return False
    file = where.group(1)  # the C library's frames name its build tree: ./stdlib/..., ../sysdeps/...
    return not file.startswith(("./", "../", "/usr/")) and not re.search(r"sysdeps|glibc|libio|nptl", file)


def is_system_frame(text: str) -> bool:
    """A frame of the C or C++ library or the thread machinery ("?? () from /lib/...", start_thread
    in ./nptl/...), which says nothing of the student's code."""
    return bool(re.search(r" from /(usr/)?lib|\.\./sysdeps|\./nptl|^\?\? \(\)|^(start_thread|clone3?)\b", text))


def frame_text(frame: str) -> str:
    """"#1  0x000055 in main () at hw4.cu:87" -> "main () at hw4.cu:87"."""
    text = re.sub(r"^#\d+\s+(0x[0-9a-f]+ in )?", "", frame)
    return re.sub(r"\(.*?\)", "()", text, count=1)


def asan_report(log: str) -> list[str]:
    """AddressSanitizer's headline, its access line, and the first frame in the student's code."""
    head = re.search(r"ERROR: AddressSanitizer: (.+?) on (?:unknown )?address (0x[0-9a-f]+)[^\n]*?(?: (T\d+))?\)?$",
                     log, re.MULTILINE) or re.search(r"ERROR: AddressSanitizer: (.+)", log)
    if not head:
        return []
    what = head.group(1)
    if head.re.groups == 3:
        address, thread = head.group(2), head.group(3)
        if int(address, 16) < 4096:
            what += f" at address {address} (a null pointer)"
        if thread and thread != "T0":
            what += f" in thread {thread} (not the main thread)"
    access = re.search(r"^(READ|WRITE) of size (\d+)", log, re.MULTILINE)
    frames = re.findall(r"#\d+ 0x[0-9a-f]+ in (\S+) (\S+:\d+)", log)
    own = [f"{fn} {Path(where).name}" for fn, where in frames
           if not re.search(r"(libasan|libc\.|libcuda|libcudart|/usr/|\.\./sysdeps|asan_|sanitizer)", where)
           and not fn.startswith(("__interceptor", "__asan", "__sanitizer"))]
    lines = [f"AddressSanitizer: {what}" + (f", {access.group(1)} of size {access.group(2)}" if access else "")]
    if own:
        lines.append(f"at {own[0]}")
    return lines
