"""The measurement scripts' own logic (no GPU): docs/kernels.md sections and SASS counting, on a
real cuobjdump listing of the split pass captured from an sm_90 build; the start-up floor's
phases from the programs' FA_TIMING=2 lines."""
import re
import sys

import pytest

from helpers import DATA, ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import kernel_docs  # noqa: E402
import sass_stats  # noqa: E402
import startup_floor  # noqa: E402


def test_a_section_is_replaced_in_place_and_the_rest_kept():
    text = "# T\nbefore\n<!-- measured: a -->\nold\n<!-- end: a -->\nafter\n"
    new = kernel_docs.replace_section(text, "a", "new\nlines")
    assert new == "# T\nbefore\n<!-- measured: a -->\nnew\nlines\n<!-- end: a -->\nafter\n"
    assert kernel_docs.replace_section(new, "a", "new\nlines") == new  # rewriting is idempotent


def test_a_missing_section_is_appended_and_backslashes_survive():
    new = kernel_docs.replace_section("# T\n", "b", r"a \1 b")
    assert new == "# T\n\n<!-- measured: b -->\na \\1 b\n<!-- end: b -->\n"


def test_a_written_section_names_date_device_and_command(tmp_path, monkeypatch):
    doc = tmp_path / "kernels.md"
    doc.write_text("# K\n<!-- measured: sass -->\n<!-- end: sass -->\ntail\n")
    monkeypatch.setattr(sys, "argv", [str(ROOT / "scripts" / "sass_stats.py"), "x=bin/fa-cuda", "--docs"])
    kernel_docs.write_section("sass", "| table |", "Some GPU, driver 1", doc)
    text = doc.read_text()
    stamp = re.search(r"_Measured (\d{4}-\d\d-\d\d) on Some GPU, driver 1: `(.*)`_", text)
    assert stamp and stamp.group(2) == "python3 scripts/sass_stats.py x=bin/fa-cuda --docs"
    assert "| table |\n<!-- end: sass -->\ntail\n" in text and not list(tmp_path.glob("*.tmp"))


def test_instructions_are_counted_by_class_predicates_and_padding_aside():
    sass = """
        Function : _Z1kv
        /*0000*/                   HMMA.16816.F32 R4, R8, R12, R4 ;     /* 0x0 */
        /*0010*/              @!P0 BRA 0x40 ;                           /* 0x0 */
        /*0020*/                   LDSM.16.M88.4 R8, [R2] ;            /* 0x0 */
        /*0030*/                   NOP;                                 /* 0x0 */
        /*0040*/                   EXIT ;                               /* 0x0 */
        Function : _Z1jv
        /*0000*/                   MUFU.EX2 R0, R1 ;                    /* 0x0 */
    """
    stats = sass_stats.count_instructions(sass)
    assert stats["_Z1kv"] == {"all": 4, "mma": 1, "branch": 2, "ldmatrix": 1}
    assert stats["_Z1jv"] == {"all": 1, "mufu": 1}


def test_a_real_listing_counts_every_instruction_line():
    text = (DATA / "cuobjdump-sass-split-kv-sm90.txt").read_text()
    stats = sass_stats.count_instructions(text)
    [(kernel, counts)] = stats.items()
    assert kernel == "_ZN2fa8split_kvEPKfP6__halfllPiPVi"
    addresses = re.findall(r"/\*([0-9a-f]{4})\*/\s+(\S+)", text)
    assert counts["all"] == sum(1 for _, op in addresses if not op.startswith("NOP"))
    assert counts["mma"] == 0 and counts["global"] >= 7  # 3 float4 loads, 4 stores (and the flags)
    usage = sass_stats.resource_usage((DATA / "cuobjdump-res-usage-sm90.txt").read_text())
    assert usage["_ZN2fa8split_kvEPKfP6__halfllPiPVi"] == {"REG": 28, "STACK": 0}
    assert len(usage) == 7


def test_floor_phases_are_seconds_since_the_spawn_and_exit_is_what_follows_the_last_line():
    floor = startup_floor.phases("context-only: started at 100.010000, context at 0.150000 s\n", 100.0, 100.25)
    assert floor == pytest.approx({"main": 0.01, "device": 0.16, "last": 0.16, "exit": 0.09})
    trace = ("fa-trace: started at 50.002 s of the monotonic clock\n"
             "fa-trace: read started at 0.0003 s, input read at 0.0900 s\n"
             "fa-trace: device up at 0.1600 s, kernels chosen at 0.1650 s, buffers ready at 0.1660 s\n"
             "fa-trace: first h2d at 0.1670 s, last chunk copied back at 0.2000 s\n"
             "fa-trace: output committed at 0.2600 s, device released at 0.2500 s\n"
             "fa-trace: exiting at 0.2610 s\n")
    fa = startup_floor.phases(trace, 50.0, 50.32)
    assert fa == pytest.approx({"main": 0.002, "device": 0.162, "copied": 0.202, "committed": 0.262,
                                "released": 0.252, "last": 0.263, "exit": 0.057})
    assert startup_floor.phases("no trace here", 0.0, 1.0) == {}


def test_trace_run_splits_a_run_by_step(tmp_path, cpu_program):
    """scripts/trace_run.py is fa run, then where its time went: the program's runs, the checks,
    the inputs drawn (each by name), the whole and the imports."""
    import os
    import subprocess

    env = {**os.environ, "FA_CACHE": str(tmp_path / "cache"), "TMPDIR": str(tmp_path)}
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "trace_run.py"), "run", "t01", "c01", "--program",
                           "cpu"], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert proc.returncode == 0 and "│ c01 " in proc.stdout, proc.stderr
    assert re.search(r"trace: [\d.]+ s in all; imports [\d.]+ s", proc.stderr)
    assert re.search(r"[\d.]+ s +2x  program runs", proc.stderr)
    assert re.search(r"[\d.]+ s +2x  checks against the expected output", proc.stderr)
    assert re.search(r"draws \(s, any thread\): c01 [\d.]+$", proc.stderr, re.M)  # t01 is shipped: not drawn
