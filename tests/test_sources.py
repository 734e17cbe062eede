"""The kernel sources open with their lasting design only: measurements live in docs/kernels.md."""
import pytest

from helpers import ROOT

KERNEL_FILES = ["src_cuda/split3xfp16.cuh", "src_cuda/tensorcore/kernel.cuh", "src_cuda/wgmma/kernel_long.cuh",
                "src_cuda/wgmma/kernel_short.cuh", "src_common/attention_tiled.h"]
HEADER_LINES = 16


@pytest.mark.parametrize("path", KERNEL_FILES)
def test_kernel_file_opens_with_a_short_design_note_pointing_to_the_measurements(path):
    lines = (ROOT / path).read_text().splitlines()
    opening = next(i for i, line in enumerate(lines) if not line.startswith("//"))
    assert opening <= HEADER_LINES, f"{path} opens with {opening} comment lines"
    assert "docs/kernels.md" in "\n".join(lines[:opening])


def source_files():
    """Every C++ source of fa's programs and of its scripts (context_only.cu). (The starter a
    student gets is a program of its own: it reads FA_TIMING itself.)"""
    parts = ("src_common", "src_cuda", "src_hip", "src_cpu", "scripts")
    return [p for part in parts for p in sorted((ROOT / part).rglob("*"))
            if p.suffix in (".h", ".cuh", ".cu", ".hip", ".cpp")]


def test_every_setting_is_read_in_one_place():
    """Only src_common/host/settings.h reads the environment (each program once, at start): no
    getenv, secure_getenv or environ anywhere else, for FA_* or any other name."""
    readers = [str(p.relative_to(ROOT)) for p in source_files()
               if p != ROOT / "src_common" / "host" / "settings.h"
               and any(word in p.read_text() for word in ("getenv(", "environ", "setting_text(\"FA_"))]
    assert readers == [], readers
    assert "getenv(" in (ROOT / "src_common" / "host" / "settings.h").read_text()


MAX_SOURCE_LINES = 450  # as tests/test_imports.py holds the Python modules


def test_every_source_file_reads_in_one_sitting():
    """Every C++ file of fa's programs is at most 450 lines: a longer one holds two jobs (split
    as attention_simt.h's kernel from its tiles, simt_tile.h)."""
    long = {str(p.relative_to(ROOT)): n for p in source_files() if (n := len(p.read_text().splitlines())) > MAX_SOURCE_LINES}
    assert long == {}, long
    assert len(source_files()) >= 50


def test_the_host_side_is_cut_into_parts():
    """Each part of the host side is a file of its own under src_common/host/, none of them long."""
    parts = {p.name: len(p.read_text().splitlines()) for p in (ROOT / "src_common" / "host").glob("*.h")}
    assert {"input.h", "output.h", "plan.h", "pipeline.h", "settings.h", "timing.h"} <= set(parts)
    assert max(parts.values()) <= 400, parts
    assert not (ROOT / "src_common" / "gpu_pipeline.h").exists() and not (ROOT / "src_common" / "fa_host.h").exists()
