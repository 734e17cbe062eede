"""On the device: where a confined run's time goes. One program (PROGRAM, built) on one input, run
REPEAT times each way; medians of the process's wall time (exec to exit), in ms:

  direct           the program alone
  prlimit          under fa's prlimit only
  fa's bwrap       Sandbox.wrap's whole command line
  ... less X       that line less one of its parts (which part costs)
  ... with X       that line with one more view (what a GPU program may miss inside)
  fa run, direct / confined   programs.run, the way fa times a case (the watch thread included)

Usage: python3 scripts/device/confined_parts.py PROGRAM INPUT [REPEAT]"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fa_cli.programs import programs, sandbox


def timed(argv: list[str], repeat: int) -> float:
    """The median wall time of argv in ms (its exit code checked)."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        times.append((time.perf_counter() - start) * 1000)
        if done.returncode != 0:
            return float("nan")
    return statistics.median(times)


def without(argv: list[str], word: str, count: int = 1) -> list[str]:
    """argv less its first `word` and the count-1 words after it."""
    at = argv.index(word)
    return argv[:at] + argv[at + count:]


def without_view(argv: list[str], path: str) -> list[str]:
    """argv less the view that binds path (its option, source and destination)."""
    at = argv.index(path) - 1
    return argv[:at] + argv[at + 3:]


def bwrap_part(argv: list[str]) -> list[str]:
    return argv[argv.index(sandbox.BWRAP):]


def with_view(argv: list[str], *view: str) -> list[str]:
    at = argv.index("--chdir")
    return argv[:at] + list(view) + argv[at:]


def ways(box: sandbox.Sandbox, argv: list[str]) -> dict[str, list[str]]:
    full = box.wrap(argv)
    inner = bwrap_part(full)
    shared_net = ["--unshare-user-try", "--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try"]
    found = {
        "direct": argv,
        "prlimit": full[:full.index(sandbox.BWRAP)] + argv,
        "fa's bwrap": full,
        "fa's bwrap, no prlimit": inner,
        "... less --unshare-all (pid, ipc, uts; network shared)":
            inner[:1] + shared_net + without(inner, "--unshare-all")[1:],
        "... less --unshare-all, only --unshare-pid": inner[:1] + ["--unshare-pid"] + without(inner, "--unshare-all")[1:],
        "... less --die-with-parent": without(inner, "--die-with-parent"),
        "... less --new-session": without(inner, "--new-session"),
        "... less --proc": without(inner, "--proc", 2),
        "... less /sys": without_view(inner, "/sys"),
    }
    for extra in ("/run/nvidia-persistenced", "/var/run/nvidia-persistenced", "/dev/shm", "/run"):
        if os.path.exists(extra):
            found[f"... with {extra}"] = with_view(inner, "--bind", extra, extra)
    found["... with the host's /proc"] = with_view(without(inner, "--proc", 2), "--bind", "/proc", "/proc")
    found["... with the host's /dev"] = with_view(without(inner, "--dev", 2), "--dev-bind", "/dev", "/dev")
    return found


def fa_runs(program: Path, input_path: Path, out: Path, repeat: int, box) -> float:
    prog = programs.Program("student", program)
    walls = [programs.run(prog, input_path, out, launcher=box).wall_s * 1000 for _ in range(repeat)]
    return statistics.median(walls)


def main() -> None:
    program, input_path = Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve()
    repeat = int(sys.argv[3]) if len(sys.argv) > 3 else 7
    out = Path(tempfile.mkdtemp(prefix="fa-parts-")) / "out.bin"
    box = sandbox.Sandbox()
    argv = [str(program), str(input_path), str(out)]
    timed(argv, 2)  # the GPU awake
    for name, line in ways(box, argv).items():
        print(f"{timed(line, repeat):9.1f} ms  {name}", flush=True)
    print(f"{fa_runs(program, input_path, out, repeat, None):9.1f} ms  fa run, direct (RunResult.wall_s)")
    print(f"{fa_runs(program, input_path, out, repeat, box):9.1f} ms  fa run, confined (RunResult.wall_s)")
    print("fa's bwrap line:", " ".join(box.wrap(argv)))


if __name__ == "__main__":
    main()
