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
