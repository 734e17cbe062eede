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
