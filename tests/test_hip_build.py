"""The HIP port's AMD build: code objects for the course's targets (needs hipcc; no GPU)."""
import shutil
import subprocess

import pytest

from helpers import ROOT

pytestmark = pytest.mark.skipif(not shutil.which("hipcc"), reason="needs hipcc (apt-get install hipcc)")


def code_objects(binary):
    text = subprocess.run(["strings", str(binary)], capture_output=True, text=True, check=True).stdout
    return {w.split("--")[1] for w in text.split() if w.startswith("amdgcn-amd-amdhsa--gfx")}


@pytest.mark.slow
def test_default_targets(tmp_path):
    """The default build holds gfx908 (the course's example) and gfx90a (MI210)."""
    out = tmp_path / "bin"
    subprocess.run(["make", "-s", "-C", str(ROOT), "hip", f"BIN={out}"], check=True)
    assert {"gfx908", "gfx90a"} <= code_objects(out / "fa-hip")


def test_hip_arch_override(tmp_path):
    out = tmp_path / "bin"
    subprocess.run(["make", "-s", "-C", str(ROOT), "hip", f"BIN={out}", "HIP_ARCH=gfx90a"], check=True)
    assert code_objects(out / "fa-hip") == {"gfx90a"}


@pytest.mark.slow
def test_course_names(tmp_path):
    """make hw4-amd gives the course's program name."""
    subprocess.run(["make", "-s", "-C", str(ROOT), "hw4-amd", f"BIN={tmp_path}"], check=True)
    assert (ROOT / "hw4-amd").exists()
