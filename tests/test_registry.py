"""The kernel registry (src_common/registry.h): what `PROGRAM --kernels` prints, the docs' table
checked against it, and a kernel added as its file and one row, seen by fa ladder and fa sweep."""
from __future__ import annotations

import shutil

import pytest

from helpers import ROOT, fa, hip_port_with_a_kernel
from fa_cli.measure import sweep
from fa_cli.programs import registry
from fa_cli.programs.programs import Program

DOCS = ROOT / "docs" / "kernels.md"

# A kernel as a developer would add one: its own file (here the naive step's launch under
# another name) ...
NEW_KERNEL_FILE = '''#pragma once
#include "fp32_launches.h"
namespace fa {
struct CopiedKernel : LadderNaive<> {
  static void kernels(std::vector<Launch>&) {}
  static std::string tiles() { return "d=32: Br=4,Bc=8;d=64: Br=4,Bc=8"; }
  static std::string sweep() { return "-DCOPIED_BR={Br} -DCOPIED_BC={Bc}|copied<{d}>|Br|Bc"; }
};
}  // namespace fa
'''
# ... and its row (its rung follows from where it stands in the table).
NEW_ROW = ('        fp32_row<CopiedKernel>("copied", "when asked", only_asked, '
           '{"copied step", "a kernel added by a test", ""}),\n')


def listings(programs: dict) -> dict[str, list[registry.KernelRow]]:
    return {name: registry.kernels_of(path) for name, path in programs.items()}


def test_every_program_lists_its_kernels(listing_programs):
    for name, rows in listings(listing_programs).items():
        assert rows and len({r.name for r in rows}) == len(rows), name
        assert [r.rung.step for r in registry.ladder(rows)] == list(range(1, len(registry.ladder(rows)) + 1)), name
        assert all(set(r.tiles) in (set(), {32, 64}) for r in rows), name
    if "cuda" in listing_programs:
        cuda = {r.name: r for r in listings(listing_programs)["cuda"]}
        assert cuda["wgmma-fused"].needs == "sm_90a code" and cuda["tiled"].tiles[64] == {"Br": 16, "Bc": 32}


def test_the_docs_table_is_the_registry(listing_programs):
    if set(listing_programs) != {"cuda", "hip-cuda", "hip"}:
        pytest.skip("needs nvcc and hipcc, to list every program's kernels")
    assert registry.docs_disagreements(listings(listing_programs), DOCS.read_text()) == []


@pytest.mark.slow  # builds the HIP port in a copy of the sources
@pytest.mark.skipif(not shutil.which("nvcc"), reason="needs nvcc")
def test_a_new_kernel_is_its_file_and_one_row(tmp_path):
    """In a copy of the sources: a new kernel file and one registry row (with its include). The
    built program lists it, fa ladder and fa sweep list it, and the docs check fails until the
    docs' table has its line."""
    program = hip_port_with_a_kernel(tmp_path, "copied_kernel.h", NEW_KERNEL_FILE, NEW_ROW,
                                     'fp32_row<LadderNaive<>>("ladder-1"', "CUDA_ARCH=sm_90a")

    rows = registry.kernels_of(program)
    assert "copied" in [r.name for r in rows]
    proc = fa("ladder", "--list", "--program", program)
    assert proc.returncode == 0 and "copied step" in proc.stdout, proc.stdout + proc.stderr
    assert "copied" in sweep.families_of(Program("copy", program))

    def about_it(docs: str) -> list[str]:
        return [p for p in registry.docs_disagreements({"hip-cuda": rows}, docs) if p.startswith("copied:")]
    docs = DOCS.read_text()
    assert about_it(docs) == ["copied: in the registry, not in the docs' table"]
    docs += "\n| `copied` | `copied` | fa-hip | any GPU | when asked | `src_common/copied_kernel.h` |\n"
    assert about_it(docs) == []
