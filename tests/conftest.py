"""Fixtures: a private cache for generated inputs, the CPU program, a stand-in ncu; GPU tests
skipped where there is no NVIDIA GPU. Helpers the tests import are in helpers.py."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from helpers import DATA, ROOT, build, have_nvidia_gpu
from fa_cli.programs import programs

# A test run started in the background (`make test &`) inherits SIGINT ignored, and one started
# under nohup SIGHUP, and so would every program the tests start: the tests of Ctrl-C and of a
# closed terminal need them delivered.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
if signal.getsignal(signal.SIGHUP) == signal.SIG_IGN:
    signal.signal(signal.SIGHUP, signal.SIG_DFL)

# GNU readline, which pytest loads, exports the terminal's size (COLUMNS, LINES) into the C
# environment every child inherits; fa folds its words to a COLUMNS it finds (report/lines.py).
# A test that wants a width sets COLUMNS in the child's environment itself.
for name in ("COLUMNS", "LINES"):
    os.unsetenv(name)


@pytest.fixture(scope="session", autouse=True)
def private_cache(tmp_path_factory):
    """Generated inputs go to a cache of the test session's own, never the user's; the temporary
    files of the programs the tests start (hipcc of ROCm 5.2 leaves folders and archives behind
    on every build) to a folder of its own, never the machine's /tmp."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FA_CACHE", str(tmp_path_factory.mktemp("fa-cache")))
        mp.setenv("TMPDIR", str(tmp_path_factory.mktemp("tmp")))
        yield


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.name in getattr(item.module, "SLOW_ON_CPU", ()):
            item.add_marker(pytest.mark.slow)
        # The GPU programs built with nvcc and hipcc (listing_programs: a minute on 2 cores) are
        # make test-all's: make test checks the same host code through the CPU program.
        if "listing_programs" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
    if have_nvidia_gpu():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU (none on this machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def cpu_program() -> Path:
    return build("cpu")


@pytest.fixture(scope="session")
def listing_programs(tmp_path_factory) -> dict[str, Path]:
    """fa-cuda and fa-hip-cuda (nvcc, sm_90a alone) and fa-hip (hipcc, gfx90a alone), built into a
    folder of the session's own, for what they answer without a GPU (--kernels, --launches,
    --settings); only those this machine's compilers build."""
    folder = tmp_path_factory.mktemp("listing-bin")
    wanted = [name for name, tool in (("cuda", "nvcc"), ("hip-cuda", "nvcc"), ("hip", "hipcc")) if shutil.which(tool)]
    if not wanted:
        pytest.skip("needs nvcc or hipcc")
    subprocess.run(["make", "-s", "-C", str(ROOT), f"BIN={folder}", "CUDA_ARCH=sm_90a", "HIP_ARCH=gfx90a", *wanted],
                   check=True, capture_output=True)
    return {name: folder / programs.BUILT[name] for name in wanted}


@pytest.fixture
def stand_in_ncu(tmp_path):
    """An `ncu` on PATH that runs the program and writes, as its results, a real ncu log of
    fa-cuda captured on the H100 (tests/data/ncu-raw-h100.csv): fa profile's whole path with no GPU."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "ncu"
    script.write_text(f"#!{sys.executable}\nimport shutil, subprocess, sys\n"
                      "args = sys.argv[1:]\nlog = args[args.index('--log-file') + 1]\n"
                      f"shutil.copy({str(DATA / 'ncu-raw-h100.csv')!r}, log)\n"
                      "sys.exit(subprocess.run(args[-3:]).returncode)\n")
    script.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}


def skip_reasons(reports) -> Counter:
    """Skipped tests counted by their reason (the reason without pytest's "Skipped: ")."""
    reasons = Counter()
    for r in reports:
        text = r.longrepr[2] if isinstance(r.longrepr, tuple) else str(r.longrepr)
        reasons[text.removeprefix("Skipped: ")] += 1
    return reasons


def pytest_terminal_summary(terminalreporter):
    """Skips by reason, one line each; the fuzz test's counts (tests/test_fuzz.py), in the summary CI shows."""
    reasons = skip_reasons(terminalreporter.stats.get("skipped", []))
    if reasons:
        terminalreporter.section("skipped, by reason")
        for reason, n in reasons.most_common():
            terminalreporter.write_line(f"{n:5d} skipped: {reason}")
    counts = sys.modules.get("test_fuzz")
    for program, c in (counts.COUNTS.items() if counts else ()):
        terminalreporter.write_line(f"fuzz {program}: " + ", ".join(f"{v} {k}" for k, v in c.items()))
