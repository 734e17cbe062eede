"""The Makefile's probes (nvidia-smi, nvcc --list-gpu-arch, rocminfo) run only for the targets
that need them: `make clean`, `make cpu` or `make submission` start no GPU tool."""
import os
import subprocess

from helpers import ROOT


def probes_run(tmp_path, *targets):
    """Which stand-in probes a dry run of make started."""
    log = tmp_path / "probes.log"
    for tool in ("nvidia-smi", "rocminfo"):
        path = tmp_path / tool
        path.write_text(f"#!/bin/sh\necho {tool} >> {log}\n")
        path.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    subprocess.run(["make", "-n", "-B", "-C", str(ROOT), *targets], env=env, capture_output=True, check=True)
    return log.read_text().split() if log.exists() else []


def test_no_probe_for_targets_without_gpu_code(tmp_path):
    assert probes_run(tmp_path, "clean", "cpu", "submission") == []


def test_gpu_targets_probe_their_gpu(tmp_path):
    assert set(probes_run(tmp_path, "cuda", "hip")) == {"nvidia-smi", "rocminfo"}


def dry_run(tmp_path, *targets) -> str:
    """make -n's commands with stand-in GPU probes that find no GPU."""
    for tool in ("nvidia-smi", "rocminfo"):
        path = tmp_path / tool
        path.write_text("#!/bin/sh\nexit 0\n")
        path.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    return subprocess.run(["make", "-n", "-B", "-C", str(ROOT), *targets], env=env, capture_output=True, text=True,
                          check=True).stdout


def test_run_builds_no_gpu_program_where_there_is_no_gpu(tmp_path):
    commands = dry_run(tmp_path, "run")
    assert "fa-cpu" in commands and "fa run t01" in commands
    assert "nvcc" not in commands and "hipcc" not in commands


def test_env_keeps_pips_notes_in_a_log(tmp_path):
    """pip and setuptools print pages of notes: kept in .venv/install.log unless the install fails."""
    commands = dry_run(tmp_path, "env")
    assert "pip install" in commands and ">.venv/install.log 2>&1" in commands


def test_quick_and_slow_tests():
    """make test leaves out the tests marked slow; make test-all and CI run them."""
    text = (ROOT / "Makefile").read_text()
    assert "$(PYTEST) -m 'not slow'" in text.split("\ntest:")[1].split("\n\n")[0]
    assert "-m" not in text.split("\ntest-all:")[1].split("\n\n")[0]
    assert "make test-all" in (ROOT / ".ci" / "run").read_text()
    assert 'tmp_path_retention_policy = "failed"' in (ROOT / "pyproject.toml").read_text()


def test_skips_are_summed_by_reason():
    from types import SimpleNamespace

    from conftest import skip_reasons

    reports = [SimpleNamespace(longrepr=("x.py", 1, "Skipped: needs an NVIDIA GPU")) for _ in range(3)]
    reports.append(SimpleNamespace(longrepr=("y.py", 2, "needs hipcc")))
    assert skip_reasons(reports) == {"needs an NVIDIA GPU": 3, "needs hipcc": 1}
