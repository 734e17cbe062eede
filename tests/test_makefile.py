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
