"""Fuzz: every case of tests/fuzz_corpus.py (hostile inputs and paths) through fa-cpu, an
ASan+UBSan build of it, and the GPU programs where a GPU runs them. Each case: the right exit
code, exactly one line `PROGRAM: error: ...` for a refusal (nothing on stderr otherwise),
nothing left behind in its directory but what it had and the output it was to write, no
sanitizer report. The counts show in pytest's summary (conftest.py)."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import fuzz_corpus
from helpers import ROOT, build

COUNTS: dict[str, dict[str, int]] = {}  # per program: cases, rejections, leftovers, sanitizer reports
SANITIZER_MARKS = ("AddressSanitizer", "UndefinedBehaviorSanitizer", "runtime error:", "LeakSanitizer")


@pytest.fixture(scope="session")
def sanitized_cpu(tmp_path_factory) -> Path:
    """fa-cpu built with -fsanitize=address,undefined into a folder of the test's own; skipped
    where the compiler's sanitizer runtime is missing."""
    out = tmp_path_factory.mktemp("asan") / "fa-cpu"
    proc = subprocess.run(["g++", "-std=c++17", "-O1", "-g", "-fopenmp", "-fsanitize=address,undefined",
                           "-fno-sanitize-recover=all", "-fno-omit-frame-pointer", "-o", str(out),
                           str(ROOT / "src_cpu" / "fa_cpu.cpp")], capture_output=True, text=True)
    if proc.returncode != 0 or subprocess.run([str(out)], capture_output=True).returncode != 2:
        pytest.skip(f"no sanitizer runtime here: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
    return out


PROGRAMS = [
    pytest.param("cpu", id="fa-cpu"),
    pytest.param("asan", id="fa-cpu-asan-ubsan", marks=pytest.mark.slow),  # a sanitized build; fa-cpu's runs stay
    pytest.param("cuda", id="fa-cuda", marks=pytest.mark.gpu),
    pytest.param("hip-cuda", id="fa-hip-cuda", marks=pytest.mark.gpu),
]


def run_case(program: Path | None, case: fuzz_corpus.Case, env: dict) -> list[str]:
    """Run one case in a fresh directory, through the program or (program None, a case with a
    command) through fa; the problems found (none: it behaved)."""
    with tempfile.TemporaryDirectory(prefix="fuzz-") as tmp:
        d = Path(tmp)
        inp, out = case.build(d)
        before = set(os.listdir(d))
        reader = fuzz_corpus.drain(d / out) if case.fifo_output else None
        fill = dict(dir=str(d), **{"in": inp, "out": out})
        if program is None:
            argv = [sys.executable, "-m", "fa_cli", *(a.format(**fill) for a in case.command)]
            name = "fa"
        else:
            argv, name = [str(program), inp, out], program.name
        try:
            proc = subprocess.run(argv, cwd=d, capture_output=True, text=True, timeout=30,
                                  env={**env, **{k: v.format(**fill) for k, v in case.env.items()}})
        except subprocess.TimeoutExpired:
            return ["hung (30 s)"]
        finally:
            if reader:
                fuzz_corpus.release(d / out)
                reader.join(5)
        problems = []
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        if any(mark in proc.stderr for mark in SANITIZER_MARKS):
            problems.append("sanitizer: " + proc.stderr.strip()[:400])
        if proc.returncode != case.exit_code:
            problems.append(f"exit {proc.returncode}, expected {case.exit_code}: {proc.stderr.strip()[:300]}")
        if "Traceback" in proc.stderr or "Warning" in proc.stderr:
            problems.append("traceback or warning: " + proc.stderr.strip()[-400:])
        if case.exit_code == 0:
            if lines and program is not None:  # (fa says what it does on stderr)
                problems.append(f"stderr on success: {lines}")
        elif len(lines) != 1 or not lines[0].startswith(f"{name}: error: ") or case.message not in lines[0]:
            problems.append(f"expected one line '{name}: error: ...{case.message}...', got {lines}")
        after = set(os.listdir(d))
        new = after - before - (set(case.creates) if proc.returncode == 0 else set())
        if case.output_bytes is not None and proc.returncode == 0:
            written = (d / out).resolve()
            if not written.is_file() or written.stat().st_size != case.output_bytes:
                problems.append(f"output {out} missing or not {case.output_bytes} bytes")
            new.discard(written.name if written.parent == d.resolve() else "")
        if new or before - after:
            problems.append(f"leftover: {sorted(new)}, removed: {sorted(before - after)}")
        problems += [p for check in case.after if (p := check(d))]
        return problems


@pytest.mark.parametrize("which", PROGRAMS)
def test_fuzz_corpus(which, request):
    program = request.getfixturevalue("sanitized_cpu") if which == "asan" else build(which)
    env = {**os.environ, "ASAN_OPTIONS": "abort_on_error=0:detect_leaks=1", "UBSAN_OPTIONS": "print_stacktrace=1"}
    env.pop("FA_TIMING", None)
    cases = fuzz_corpus.corpus()
    assert len(cases) >= 300
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda c: run_case(program, c, env), cases))
    failures = {c.name: p for c, p in zip(cases, results) if p}
    name = f"{program.name}{' (ASan+UBSan)' if which == 'asan' else ''}"
    COUNTS[name] = {
        "cases": len(cases),
        "rejections": sum(c.exit_code != 0 for c in cases),
        "leftovers": sum(any(p.startswith("leftover") for p in ps) for ps in results),
        "sanitizer reports": sum(any(p.startswith("sanitizer") for p in ps) for ps in results),
        "failures": len(failures),
    }
    assert not failures, "\n".join(f"{k}: {v}" for k, v in list(failures.items())[:20])


@pytest.mark.slow  # every fuzz input through fa itself
def test_fuzz_corpus_of_fa():
    """fa's own probes (fuzz_corpus.fa_corpus), judged as the programs' cases are."""
    build("cpu")
    env = {**os.environ}
    env.pop("FA_TIMING", None)
    cases = fuzz_corpus.fa_corpus()
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda c: run_case(None, c, env), cases))
    failures = {c.name: p for c, p in zip(cases, results) if p}
    COUNTS["fa"] = {
        "cases": len(cases),
        "rejections": sum(c.exit_code != 0 for c in cases),
        "leftovers": sum(any(p.startswith("leftover") for p in ps) for ps in results),
        "failures": len(failures),
    }
    assert not failures, "\n".join(f"{k}: {v}" for k, v in failures.items())
