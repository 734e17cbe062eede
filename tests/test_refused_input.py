"""fa_cli/judge/refused_input.py: a program that refuses a well-formed input in its own words is
said so, beside fa's own check of the file, with the lines that read or check it."""
import os
import shutil

import pytest

from helpers import DATA, fa
from fa_cli.cases import generate
from fa_cli.cases.format import Shape


@pytest.mark.skipif(not shutil.which("g++"), reason="needs g++")
def test_a_program_that_refuses_a_well_formed_input_is_said_so_with_its_check(tmp_path):
    case = tmp_path / "case.in"
    generate.write_input(case, Shape(2, 64, 32), 3)
    proc = fa("run", case, "--program", DATA / "refuses_input.cpp", env={**os.environ, "COLUMNS": "400"})
    said = " ".join(proc.stdout.split())
    assert proc.returncode == 1 and "ERROR" in said, proc.stdout + proc.stderr
    assert ("measured: the program refused its input ('hw4: " + str(case) + ": file longer than 12 + 12*B*N*d "
            "bytes'), yet the input is well formed: its header says B=2, N=64, d=32 and the file holds "
            "12 + 12*B*N*d = 49164 bytes exactly") in said, said
    assert "lines that read or check the file in refuses_input.cpp: " in said and "std::feof(f)" in said, said



def test_only_a_programs_words_about_its_file_are_a_refusal():
    """The runtime's errors that print the file's name, or a line that only reports it, are not."""
    from pathlib import Path
    from types import SimpleNamespace
    from fa_cli.judge.refused_input import complaint
    said = lambda line: complaint(SimpleNamespace(case_path=Path("/cases/c3.in"), run_stderr=line + "\n"))
    assert said("hw4: /cases/c3.in: file longer than 12 + 12*B*N*d bytes")
    assert said("error: cannot open /cases/c3.in")
    assert said("/cases/c3.in: short header")
    assert not said("hw4: /cases/c3.in: CUDA error: invalid configuration argument")
    assert not said("loaded /cases/c3.in: 49164 bytes")
    assert not said("hw4: /cases/c3.in: an illegal memory access was encountered")


def test_a_refusal_of_the_headers_values_shows_the_check_that_says_it_first(tmp_path):
    """A test of d written with || for && refuses every d: the line that prints the refusal's words
    is shown before the file's reads."""
    from pathlib import Path
    from types import SimpleNamespace
    from fa_cli.judge import refused_input
    case = tmp_path / "t01.in"
    generate.write_input(case, Shape(2, 64, 32), 3)
    source = tmp_path / "hw4.cu"
    source.write_text('#include <cstdio>\nint main() {\n  std::fread(header, 4, 3, f);\n'
                      '  if (d != 32 || d != 64) fail("d must be 32 or 64", path);\n}\n')
    ctx = SimpleNamespace(case_path=case, run_stderr=f"hw4: {case}: d must be 32 or 64\n", verdict="ERROR",
                          signal=None, source=source)
    assert refused_input.RefusedInput().applies(ctx)
    [found] = refused_input.RefusedInput().run(ctx)
    assert "yet the input is well formed: its header says B=2, N=64, d=32" in found.lines[0]
    assert found.lines[1] == ("lines that read or check the file in hw4.cu: 4 `if (d != 32 || d != 64) fail(\"d "
                              "must be 32 or 64\", path);`, 3 `std::fread(header, 4, 3, f);`"), found.lines
    assert refused_input.complaint(SimpleNamespace(case_path=Path("/c/c3.in"), run_stderr="/c/c3.in: N must be "
                                                   "a power of 2\n"))
