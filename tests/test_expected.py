"""Expected outputs: float64 attention computed once per input, cached by the input's sha256."""
import os
import shutil
import subprocess

import numpy as np
import pytest

from helpers import direct_attention, fa
from fa_cli.cases import generate
from fa_cli.cases.format import AttentionInput, Shape, open_output
from fa_cli.cases.suite import Target
from fa_cli.errors import FaError
from fa_cli.judge import expected


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FA_CACHE", str(tmp_path / "cache"))


@pytest.fixture
def inp(tmp_path):
    path = tmp_path / "x.in"
    generate.write_input(path, Shape(5, 70, 64), 8)
    return path


def target(path):
    return Target(path.name, path, AttentionInput(path).shape, None)


def test_numpy_on_every_core_is_float64_attention(inp):
    data = AttentionInput(inp)
    got = expected.NumpyBackend().attention(data, 0, 5)
    want = np.stack([direct_attention(*(x[0] for x in data.qkv(b))) for b in range(5)])
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    rows = expected.NumpyBackend()
    rows.workers = 3  # fewer batches than workers: the rows are split instead
    np.testing.assert_allclose(rows.attention(data, 1, 3), want[1:3], rtol=0, atol=1e-12)


def test_computed_once_and_found_by_content(inp, tmp_path):
    t = target(inp)
    [need] = expected.missing([t])
    assert need.path.parent == expected.cache_folder() and need.path.stem == expected.sha256_of(inp)
    values = np.array(expected.output_of(t))
    data = AttentionInput(inp)
    want = np.stack([direct_attention(*(x[0] for x in data.qkv(b))) for b in range(5)]).astype(np.float32)
    np.testing.assert_array_equal(values, want)  # the float64 result rounded once
    assert expected.missing([t]) == []
    mtime = need.path.stat().st_mtime_ns
    copy = tmp_path / "renamed.in"
    shutil.copyfile(inp, copy)
    assert expected.missing([target(copy)]) == []  # same bytes, same expected output
    np.array(expected.output_of(target(copy)))
    assert need.path.stat().st_mtime_ns == mtime  # not computed again
    with open(copy, "r+b") as f:  # an edited input gets its own
        f.seek(100)
        f.write(b"\0\0\0\0")
    assert len(expected.missing([target(copy)])) == 1


def test_a_gpu_result_that_disagrees_with_numpy_is_refused(inp):
    class Wrong:
        name, where, SLICE_FLOPS = "torch", "a broken GPU", 1e12

        def attention(self, data, b0, b1, r0=0, r1=None):
            return expected.NumpyBackend().attention(data, b0, b1, r0, r1) + 1e-3

    [need] = expected.missing([target(inp)])
    with pytest.raises(FaError, match="differs from numpy's"):
        expected.write(need, Wrong())
    assert not need.path.exists() and not list(need.path.parent.glob("*.tmp"))


def test_fa_verify_checks_every_value_against_the_cache(tmp_path, cpu_program):
    path = tmp_path / "long.in"
    generate.write_input(path, Shape(4, 512, 64), 1)
    env = {**os.environ, "FA_CACHE": str(tmp_path / "cache")}
    proc = fa("verify", tmp_path / "missing.out", "--input", path, env=env)
    assert proc.returncode == 2 and "missing.out" in proc.stderr  # the output is checked before any work
    out = tmp_path / "o.out"
    subprocess.run([cpu_program, path, out], check=True)
    proc = fa("verify", out, "--input", path, env=env)
    assert proc.returncode == 0 and "PASS" in proc.stdout and "every value" in proc.stdout
    assert len(list((tmp_path / "cache" / "expected").glob("*.out"))) == 1


def test_the_announcement_names_work_backend_and_time(tmp_path, monkeypatch):
    path = tmp_path / "x.in"
    generate.write_input(path, Shape(2, 256, 32), 1)
    monkeypatch.setattr(expected, "ANNOUNCE_FLOPS", 0)
    said = []
    expected.ensure(expected.missing([target(path)]), said.append, lambda *a: nullbar())
    assert len(said) == 1 and "TFLOP of float64" in said[0] and "numpy" in said[0] and said[0].endswith(" s")
    assert open_output(expected.path_of(target(path)), Shape(2, 256, 32)).shape == (2, 256, 32)


class nullbar:
    def __enter__(self):
        return lambda n=1: None

    def __exit__(self, *a):
        return False
