"""bin/fa-cpu against the float64 reference: odd shapes, stress distributions, the shipped suite."""
import subprocess

import pytest

from conftest import run_and_check
from fa_cli import generate, suite, verify
from fa_cli.format import AttentionInput, Shape, open_output

TOL = 1e-4


@pytest.mark.parametrize("d", [32, 64])
@pytest.mark.parametrize("N", [1, 7, 33, 129, 1000])
def test_odd_shapes(cpu_program, tmp_path, N, d):
    B = {1: 5, 7: 4, 33: 3, 129: 2, 1000: 1}[N]
    assert run_and_check(cpu_program, tmp_path, Shape(B, N, d), seed=N) <= TOL


@pytest.mark.parametrize("dist", ["extreme", "onehot", "constant", "normal"])
@pytest.mark.parametrize("d", [32, 64])
def test_stress_distributions(cpu_program, tmp_path, dist, d):
    assert run_and_check(cpu_program, tmp_path, Shape(2, 300, d), dist) <= TOL


@pytest.mark.parametrize("name", [f"t{i:02d}" for i in range(1, 11)])
def test_shipped_suite(cpu_program, tmp_path, name):
    c = suite.case(name)
    out = tmp_path / "o.out"
    subprocess.run([str(cpu_program), str(c.input_path), str(out)], check=True)
    result = verify.against_reference(AttentionInput(c.input_path), open_output(out, c.shape), TOL)
    assert result.passed and result.checked == c.shape.elements, result


def test_several_chunks(cpu_program, tmp_path):
    """A 79 MB input spans two of the program's 64 MB chunks: the boundary must not shift batches."""
    assert run_and_check(cpu_program, tmp_path, Shape(800, 128, 64)) <= TOL


def test_timing_line(cpu_program, tmp_path):
    inp = tmp_path / "x.in"
    generate.write_input(inp, Shape(2, 64, 32), 1)
    proc = subprocess.run([str(cpu_program), str(inp), str(tmp_path / "o")], capture_output=True, text=True,
                          env={"FA_TIMING": "1"}, check=True)
    line = proc.stderr.strip()
    assert line.startswith("fa-timing: init=") and "total=" in line
    quiet = subprocess.run([str(cpu_program), str(inp), str(tmp_path / "o")], capture_output=True, text=True,
                           env={}, check=True)
    assert quiet.stderr == ""
