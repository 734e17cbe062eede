
import functools
import hashlib
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fa_cli.cases import drawing_processes, generate, suite
from fa_cli.cases.format import AttentionInput, Shape
from fa_cli.judge import reference


def test_same_arguments_same_bytes(tmp_path):
    shape = Shape(2, 33, 64)
    for name in ("a.in", "b.in"):
        generate.write_input(tmp_path / name, shape, seed=11, dist="normal")
    assert (tmp_path / "a.in").read_bytes() == (tmp_path / "b.in").read_bytes()
    generate.write_input(tmp_path / "c.in", shape, seed=12, dist="normal")
    assert (tmp_path / "a.in").read_bytes() != (tmp_path / "c.in").read_bytes()


@pytest.mark.parametrize("dist", list(generate.DISTRIBUTIONS))
def test_values_stay_in_course_range(dist):
    for x in generate.batch(Shape(1, 64, 32), 3, dist, 0):
        assert x.dtype == np.float32 and x.shape == (64, 32)
        assert np.abs(x).max() <= 3.0


def test_extreme_is_all_plus_minus_three():
    for x in generate.batch(Shape(1, 64, 64), 1, "extreme", 0):
        assert set(np.unique(x)) == {-3.0, 3.0}


def test_onehot_rows_have_one_dominant_key():
    q, k, v = generate.batch(Shape(1, 256, 64), 1, "onehot", 0)
    s = q.astype(np.float64) @ k.T / 8.0
    top2 = np.sort(s, axis=1)[:, -2:]
    assert (top2[:, 1] - top2[:, 0] > 20).all()  # the winner's weight exceeds 1 - N*e^-20


def test_constant_logits_give_mean_of_v():
    q, k, v = generate.batch(Shape(1, 100, 32), 1, "constant", 0)
    out = reference.attention(q[None], k[None], v[None])[0]
    np.testing.assert_allclose(out, np.broadcast_to(v.astype(np.float64).mean(axis=0), out.shape), atol=1e-12)


def test_manifest_mirrors_course_classes():
    cases = list(suite.cases().values())
    assert [c.name for c in cases] == [f"t{i:02d}" for i in range(1, 31)]
    assert [c.time_limit for c in cases] == [2] * 10 + [6] * 10 + [10] * 10
    assert {c.shape.N for c in cases} == set(suite.COURSE_N)
    assert {c.shape.d for c in cases} == {32, 64}
    assert max(c.shape.B for c in cases) == 13000
    assert max(c.shape.elements for c in cases) > 54_000_000
    for c in cases:
        suite.check_course_ranges(c.shape)


# The course's 30 test shapes (2024 offering, as published in a student's report), by hand from
# that list: the c suite must be exactly these.
COURSE_SHAPES = """320,128,32 160,128,64 160,256,32 80,256,64 80,512,32 40,512,64 40,1024,32 20,1024,64
20,2048,32 10,2048,64 13600,128,32 9600,128,64 6400,256,32 2000,256,64 2000,512,32 800,512,64 800,1024,32
300,1024,64 300,2048,32 100,2048,64 500,2048,32 500,2048,64 100,4096,32 100,4096,64 30,8192,32 10,8192,64
10,16384,32 4,16384,64 4,32768,32 2,32768,64"""


def test_course_suite_is_the_course_shapes():
    cases = list(suite.cases("c").values())
    assert [c.name for c in cases] == [f"c{i:02d}" for i in range(1, 31)]
    assert [f"{c.shape.B},{c.shape.N},{c.shape.d}" for c in cases] == COURSE_SHAPES.split()
    assert [c.time_limit for c in cases] == [2] * 10 + [6] * 10 + [10] * 10
    assert {c.dist for c in cases} == {"uniform"} and not any(c.shipped for c in cases)
    assert len({c.seed for c in suite.cases(None).values()}) == 60  # every case its own stream
    assert "student's report" in suite.source("c") and suite.source("t")


def test_course_case_generates_to_its_sha256(tmp_path, monkeypatch):
    monkeypatch.setenv("FA_CACHE", str(tmp_path))
    c = suite.case("c01")
    assert suite.sha256_of(suite.ensure_input(c)) == c.sha256
    assert suite.case("c30").shape == Shape(2, 32768, 64)


def test_shipped_files_match_manifest_and_regenerate(tmp_path):
    total = 0
    for c in suite.cases().values():
        if not c.shipped:
            continue
        assert suite.sha256_of(c.input_path) == c.sha256
        regenerated = tmp_path / f"{c.name}.in"
        generate.write_input(regenerated, c.shape, c.seed, c.dist)
        assert suite.sha256_of(regenerated) == c.sha256
        # The shipped expected output is the float64 reference rounded to float32.
        inp = AttentionInput(c.input_path)
        exp = np.fromfile(c.expected_path, dtype="<f4").reshape(c.shape.B, c.shape.N, c.shape.d)
        ref = np.concatenate([reference.attention(*inp.qkv(b)) for b in range(c.shape.B)])
        assert np.abs(exp - ref).max() < 1e-6
        total += c.input_path.stat().st_size + c.expected_path.stat().st_size
    assert total < 20 << 20


def test_ensure_input_generates_into_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FA_CACHE", str(tmp_path))
    c = suite.case("t13")  # 4 x 4096 x 32: small enough to generate here
    path = suite.ensure_input(c)
    assert path == tmp_path / "t13.in" and suite.sha256_of(path) == c.sha256


def test_ensure_input_refuses_different_bytes(tmp_path, monkeypatch):
    monkeypatch.setenv("FA_CACHE", str(tmp_path))
    c = suite.case("t13")
    forged = suite.Case(c.name, c.shape, c.dist, c.seed + 1, c.time_limit, False, c.sha256)
    with pytest.raises(suite.FaError, match="sha256"):
        suite.ensure_input(forged)
    assert not (tmp_path / "t13.in").exists()


def test_strict_ranges():
    with pytest.raises(suite.FaError, match="N = 100 is not one of"):
        suite.check_course_ranges(Shape(2, 100, 32))
    with pytest.raises(suite.FaError, match="B = 1 is outside"):
        suite.check_course_ranges(Shape(1, 128, 32))


# The distributions as first written: each batch drawn at once. The streamed generator must
# give these bytes for every shape and block size.
def _at_once(rng, dist, N, d):
    L = generate.LIMIT
    if dist == "uniform":
        return rng.uniform(-L, L, size=(3, N, d))
    if dist == "normal":
        return np.clip(rng.standard_normal(size=(3, N, d)), -L, L)
    if dist == "extreme":
        return np.where(rng.random(size=(3, N, d)) < 0.5, -L, L)
    if dist == "onehot":
        k = np.where(rng.random(size=(N, d)) < 0.5, -L, L)
        q = L * np.sign(k[rng.integers(0, N, size=N)])
        return q, k, rng.uniform(-L, L, size=(N, d))
    q, v = rng.uniform(-L, L, size=(2, N, d))
    return q, np.broadcast_to(rng.uniform(-L, L, size=(1, d)), (N, d)), v


@pytest.mark.parametrize("dist", list(generate.DISTRIBUTIONS))
def test_streamed_batches_equal_batches_drawn_at_once(dist):
    for shape in (Shape(2, 1, 32), Shape(1, 7, 64), Shape(2, 100, 64), Shape(1, 1000, 32)):
        for block_values in (1, 32, 100, 3 * 64, generate.BLOCK_VALUES):
            for b in range(shape.B):
                want = b"".join(np.asarray(x, "<f4").tobytes()
                                for x in _at_once(np.random.default_rng([9, b]), dist, shape.N, shape.d))
                got = b"".join(x.tobytes() for x in generate.batch_blocks(shape, 9, dist, b, block_values))
                assert got == want, (dist, shape, block_values, b)


@pytest.mark.parametrize("dist", ["uniform", "onehot"])
def test_generation_memory_is_bounded_by_the_block(tmp_path, dist):
    """A batch of 16 MB (as float32; 32 MB drawn as float64) written with 64 KB blocks holds
    little more than a block at a time (onehot: plus its keys' signs, N*d bits)."""
    import tracemalloc

    shape = Shape(1, 1 << 17, 32)
    tracemalloc.start()
    generate.write_input(tmp_path / "x.in", shape, 1, dist, block_values=1 << 13)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < (1 << 20) + shape.N * shape.d // 8, peak
    assert (tmp_path / "x.in").stat().st_size == shape.input_bytes


@pytest.mark.parametrize("dist", list(generate.DISTRIBUTIONS))
@pytest.mark.parametrize("shape, block_values", [(Shape(3, 70, 32), 1000), (Shape(5, 10, 32), 3000),
                                                 (Shape(5, 10, 32), 1 << 22)])
def test_pieces_drawn_on_every_core_give_one_streams_bytes_and_their_hash(tmp_path, dist, shape, block_values):
    """Batches split into pieces (uniform), grouped (small ones) or drawn block by block: the file
    is the batches drawn one by one, the digest fed beside the writes is the file's, and progress
    counts every batch once."""
    import hashlib
    digest, done = hashlib.sha256(), []
    generate.write_input(tmp_path / "x.in", shape, 5, dist, done.append, block_values, digest)
    data = (tmp_path / "x.in").read_bytes()
    want = np.concatenate([np.concatenate(generate.batch(shape, 5, dist, b)) for b in range(shape.B)])
    assert data[12:] == want.astype("<f4").tobytes()
    assert digest.hexdigest() == hashlib.sha256(data).hexdigest() and sum(done) == shape.B


def test_a_case_proven_once_is_generated_without_hashing_and_an_edit_is_hashed_again(tmp_path, monkeypatch):
    """Suite c's re-run: the sha256 of each input is checked the first time this numpy and this
    generator make it; later runs trust that proof (generation is deterministic). A different
    generator (here: a forged seed under the same name) is hashed and refused."""

    monkeypatch.setenv("FA_CACHE", str(tmp_path))
    c = suite.case("t13")
    hashed = []  # the digests write_input was asked to feed
    real_write = generate.write_input
    monkeypatch.setattr(generate, "write_input",
                        lambda *a, digest=None, **k: hashed.extend([digest] if digest else []) or
                        real_write(*a, digest=digest, **k))
    first = suite.write_case(c, tmp_path / "first.in")
    assert len(hashed) == 1 and suite.generation_proven(c)
    again = suite.write_case(c, tmp_path / "again.in")
    assert len(hashed) == 1 and again.read_bytes() == first.read_bytes()
    assert suite.sha256_of(again) == c.sha256
    forged = suite.Case(c.name, c.shape, c.dist, c.seed + 1, c.time_limit, False, c.sha256)
    assert not suite.generation_proven(forged)
    with pytest.raises(suite.FaError, match="sha256"):
        suite.write_case(forged, tmp_path / "forged.in")
    monkeypatch.setattr(suite, "generator_key", lambda: "numpy 0.0, generate.py edited")
    assert not suite.generation_proven(c)


@pytest.mark.parametrize("shape, block_values", [(Shape(9, 40, 32), 4000), (Shape(2, 300, 64), 10000)])
def test_a_scratch_input_rewritten_in_place_by_processes_is_the_same_bytes(tmp_path, shape, block_values,
                                                                           monkeypatch):
    """fa run's scratch inputs are drawn by processes into the file where it is (batches grouped, or
    a batch in pieces of its stream): the bytes of the file written whole by threads; a file that
    was larger before is cut to size; and where the pool breaks, threads draw it again."""
    monkeypatch.setattr(drawing_processes, "FROM_BYTES", 0)  # (this small input: on processes too)
    whole, scratch = tmp_path / "whole.in", tmp_path / "scratch.in"
    generate.write_input(whole, shape, 5, block_values=block_values)
    scratch.write_bytes(b"\xff" * (shape.input_bytes + 4096))  # a judged input's file, larger
    pool, submitted = generate.drawers(), []
    real_submit = pool.submit
    monkeypatch.setattr(pool, "submit", lambda *a: submitted.append(a[1:3]) or real_submit(*a))
    generate.write_input(scratch, shape, 5, block_values=block_values, in_place=True)
    assert scratch.read_bytes() == whole.read_bytes()
    assert sum(count for _, count in submitted) == 3 * shape.N * shape.d * shape.B  # every value, by a process

    for proc in generate.drawers().procs:  # killed (out of memory, say): the input drawn here, hashed right
        proc.kill()
        proc.wait()
    scratch.write_bytes(b"\xff" * 100)
    digest = hashlib.sha256()
    generate.write_input(scratch, shape, 5, block_values=block_values, digest=digest, in_place=True)
    assert scratch.read_bytes() == whole.read_bytes()
    assert digest.hexdigest() == hashlib.sha256(whole.read_bytes()).hexdigest()
    assert all(proc.poll() is None for proc in generate.drawers().procs)  # a new pool for the next input


def test_once_the_drawing_processes_are_up_they_draw_small_scratch_inputs_too(tmp_path, monkeypatch):
    """An input under FROM_BYTES is drawn on threads while no process is up (a run of small cases
    never waits for them to start), and by the processes once a larger input started them: the
    same bytes either way."""
    monkeypatch.setattr(drawing_processes, "_up", [])
    shape = Shape(3, 128, 32)
    assert shape.input_bytes < drawing_processes.FROM_BYTES
    assert drawing_processes.drawing_way(shape.input_bytes, True) == "threads"
    pool, submitted = generate.drawers(), []
    assert drawing_processes.drawing_way(shape.input_bytes, True) == "processes"
    assert drawing_processes.drawing_way(shape.input_bytes, False) == "threads"  # fa gen's own file: threads
    real_submit = pool.submit
    monkeypatch.setattr(pool, "submit", lambda *a: submitted.append(a[2]) or real_submit(*a))
    generate.write_input(tmp_path / "scratch.in", shape, 8, in_place=True)
    generate.write_input(tmp_path / "whole.in", shape, 8)
    assert sum(submitted) == 3 * shape.N * shape.d * shape.B
    assert (tmp_path / "scratch.in").read_bytes() == (tmp_path / "whole.in").read_bytes()


FULL_TMPFS = """
import sys
from fa_cli.cases import drawing_processes, generate
from fa_cli.cases.format import Shape
from fa_cli.errors import FaError
drawing_processes.FROM_BYTES = 0
try:
    generate.write_input(sys.argv[1] + "/x.in", Shape(8, 256, 64), 3, in_place=True)
except FaError as e:
    print(e)
"""


def test_a_full_file_system_in_memory_is_one_line_where_a_drawing_process_met_it(tmp_path):
    """A file system in memory is written by the drawing processes without reserving (fill_part):
    where it is full, a process dies of SIGBUS, and fa reserves the piece itself and says the full
    disk in one line (here a 1 MB tmpfs of a mount namespace of its own, for a 1.5 MB input)."""
    folder = tmp_path / "small"
    folder.mkdir()
    script = f"mount -t tmpfs -o size=1m none {folder} && exec {sys.executable} -c \"$0\" {folder}"
    try:
        proc = subprocess.run(["unshare", "-Urm", "sh", "-c", script, FULL_TMPFS], capture_output=True, text=True,
                              timeout=120, cwd=Path(generate.__file__).parents[2])
    except FileNotFoundError:
        pytest.skip("no unshare here")
    if "mount" in proc.stderr or "unshare" in proc.stderr:
        pytest.skip(f"no mount namespace of one's own here: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"{folder}/x.in: write failed: No space left on device"


FORKED = """
import functools, sys, threading
from fa_cli.cases import drawing_processes, generate
if sys.argv[2] == "threaded":  # another thread alive: forking could leave one of its locks held in the child
    threading.Thread(target=threading.Event().wait, daemon=True).start()
processes = drawing_processes.DrawingProcesses(2)
processes.wait_ready()
print(" ".join(type(p).__name__ for p in processes.procs))
fill = functools.partial(generate._uniform_batches_into, seed=3, b0=0, b1=2, per_batch=3 * 64 * 32,
                         block_values=generate.BLOCK_VALUES)
processes.submit(sys.argv[1], 0, 2 * 3 * 64 * 32, fill).result(timeout=60)
processes.procs[0].kill()
print(processes.procs[0].wait())
"""


@pytest.mark.parametrize("threads, started", [("alone", "_Forked _Forked"), ("threaded", "Popen Popen")])
def test_drawing_processes_are_forked_where_fa_has_one_thread_and_draw_the_same(tmp_path, threads, started):
    """Forked (a few ms, numpy loaded) where fa has one thread, else started anew: either way a
    piece comes out as fa draws it, and a process killed says its signal."""
    shape = Shape(2, 64, 32)
    path = tmp_path / "x.in"
    path.write_bytes(bytes(shape.input_bytes))
    proc = subprocess.run([sys.executable, "-c", FORKED, str(path), threads], capture_output=True, text=True,
                          timeout=120, cwd=Path(generate.__file__).parents[2])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:2] == [started, "-9"]
    generate.write_input(tmp_path / "want.in", shape, 3)
    assert path.read_bytes()[12:] == (tmp_path / "want.in").read_bytes()[12:]


def test_a_drawing_process_imports_fa_cli_and_numpy_from_fas_folder_never_from_where_fa_ran(tmp_path, monkeypatch):
    """A student's folder with a numpy.py (or a copy of fa_cli) in it: the drawing processes started
    there still load fa's own, and draw the manifest's bytes."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "numpy.py").write_text("raise SystemExit('a student numpy.py was imported')\n")
    (tmp_path / "queue.py").write_text("raise SystemExit('a student queue.py was imported')\n")
    processes = drawing_processes.DrawingProcesses(1)
    try:
        processes.wait_ready()
        shape = Shape(2, 64, 32)
        path = tmp_path / "x.in"
        path.write_bytes(bytes(shape.input_bytes))
        fill = functools.partial(generate._uniform_batches_into, seed=3, b0=0, b1=2, per_batch=3 * 64 * 32,
                                 block_values=generate.BLOCK_VALUES)
        processes.submit(str(path), 0, 2 * 3 * 64 * 32, fill).result(timeout=60)
        generate.write_input(tmp_path / "want.in", shape, 3)
        assert path.read_bytes()[12:] == (tmp_path / "want.in").read_bytes()[12:]
    finally:
        processes.close()
