"""A corpus of hostile inputs and paths for `PROGRAM INPUT OUTPUT` (tests/test_fuzz.py runs it).

Each case builds its files in a directory of its own and says what a program must do with
them: the exit code (2 unusable input or path, 1 a failure while running such as /dev/full,
0 an accepted edge case such as NaN values or /dev/null as the output) and, for a refusal, a
piece of the one line it must print. The kinds: headers with negative, zero, huge and
unsupported B, N, d; sizes that overflow 64 bits; truncated and overlong files; a header that
disagrees with the size; NaN, infinity and extreme values; inputs that are FIFOs, devices,
directories, sockets, symlinks or missing; outputs that are the input (by name, symlink or
hard link), /dev/null, /dev/full, a FIFO, a symlink (dangling or not), a directory, a name too
long, a missing directory; and the output rule under a hostile neighbour: links in a sticky
world-writable directory (the user's own, and, as root, another user's), a replaced file's mode,
a read-only file, a named temporary, another process's temporary beside the output.

fa_corpus() holds fa's own probes in the same form: a case with `command` runs fa with those
arguments ({in} and {out} stand for the files its build made, {dir} for its directory) instead
of a program, and must give the same outcomes (the exit code, one line `fa: error: ...`,
nothing left behind): results files that are devices, FIFOs or too large, verify of files cut
short or empty, gen through a planted link, time limits that are not numbers, a planted or
unusable cache, a name holding a newline.
"""
from __future__ import annotations

import os
import socket
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

# As root, a program that replaced its output would delete the real device: there the device
# cases go through a symlink of the case's own (the same code path once the link is followed).
AS_ROOT = os.geteuid() == 0
VALID = (2, 16, 32)  # B, N, d of the valid inputs the path cases use
I32 = 2**31 - 1


@dataclass
class Case:
    name: str
    build: Callable[[Path], tuple[str, str]]  # makes the files in a directory: (input, output) arguments
    exit_code: int
    message: str = ""  # part of the refusal's one line
    output_bytes: int | None = None  # a new regular output of this size is expected (exit 0)
    fifo_output: bool = False  # the output is a FIFO: something must read it
    after: list[Callable[[Path], str | None]] = field(default_factory=list)  # extra checks: a problem, or None
    env: dict[str, str] = field(default_factory=dict)  # settings the program runs with ({dir}: the case's)
    command: tuple[str, ...] | None = None  # fa's arguments ({in}, {out}, {dir}): a case of fa, not the programs
    creates: tuple[str, ...] = ()  # names a successful fa case may add to its directory


def header(B: int, N: int, d: int) -> bytes:
    return np.array([B, N, d], "<i4").tobytes()


def valid_bytes(B: int, N: int, d: int, seed: int = 0, poison: dict[int, float] | None = None) -> bytes:
    values = np.random.default_rng(seed).uniform(-3, 3, size=3 * B * N * d).astype("<f4")
    for index, value in (poison or {}).items():
        values[index % values.size] = value
    return np.array([B, N, d], "<i4").tobytes() + values.tobytes()


def file_case(name: str, data: bytes, exit_code: int, message: str = "", out_bytes: int | None = None) -> Case:
    def build(d: Path) -> tuple[str, str]:
        (d / "in.bin").write_bytes(data)
        return "in.bin", "out.bin"
    return Case(name, build, exit_code, message, out_bytes)


def header_cases() -> list[Case]:
    cases = []
    bad = [-2**31, -65536, -1, 0]
    for letter, position in (("B", 0), ("N", 1), ("d", 2)):
        for value in bad:
            dims = list(VALID)
            dims[position] = value
            for tail in (0, 4, 12 * 2 * 16 * 32):  # header only, a little data, the valid size
                cases.append(file_case(f"{letter}={value}-tail{tail}", header(*dims) + b"\0" * tail, 2,
                                       f"{letter} = {value}, must be positive"))
    for d in (1, 2, 16, 31, 33, 48, 63, 65, 96, 128, 256, 4096, I32):
        for tail in (0, 12 * 16 * d if d < 4096 else 0):
            cases.append(file_case(f"d={d}-tail{tail}", header(1, 16, d) + b"\0" * tail, 2, f"d = {d} is not supported"))
    for B, N, d in ((I32, I32, 64), (I32, I32, 32), (2**30, I32, 64), (I32, 2**28, 64)):
        cases.append(file_case(f"overflow-{B}-{N}-{d}", header(B, N, d), 2, "overflows 64-bit file sizes"))
    for B, N, d in ((I32, 1, 32), (1, I32, 64), (65536, 65536, 64), (2**20, 2**10, 32)):
        cases.append(file_case(f"huge-{B}-{N}-{d}", header(B, N, d) + b"\0" * 64, 2, "file has 76 bytes"))
    return cases


def size_cases() -> list[Case]:
    cases = []
    good = valid_bytes(*VALID)
    for cut in range(0, 12):
        what = "empty file" if cut == 0 else f"short header ({cut} bytes)"
        cases.append(file_case(f"header-cut{cut}", good[:cut], 2, what))
    for cut in (12, 13, 16, 100, 4096, len(good) // 2, len(good) - 4, len(good) - 1):
        cases.append(file_case(f"data-cut{cut}", good[:cut], 2, f"file has {cut} bytes"))
    other = valid_bytes(1, 8, 64)
    for cut in range(12, len(other), len(other) // 24):  # cut anywhere in the data of a d = 64 input
        cases.append(file_case(f"d64-cut{cut}", other[:cut], 2, f"file has {cut} bytes"))
    for extra in (1, 3, 4, 12, 4096):
        cases.append(file_case(f"extra{extra}", good + b"\0" * extra, 2, f"file has {len(good) + extra} bytes"))
    # A header that disagrees with the data that follows.
    for B, N, d in ((1, 16, 32), (3, 16, 32), (2, 15, 32), (2, 17, 32), (2, 16, 64), (4, 8, 32), (1, 32, 32),
                    (2, 8, 64), (16, 2, 32), (1, 512, 32)):
        size = 12 + 12 * 2 * 16 * 32
        exit_code = 0 if size == 12 + 12 * B * N * d else 2
        case = file_case(f"mismatch-{B}-{N}-{d}", header(B, N, d) + good[12:], exit_code,
                         "" if exit_code == 0 else f"file has {size} bytes", 4 * B * N * d if exit_code == 0 else None)
        cases.append(case)
    return cases


def value_cases() -> list[Case]:
    """Valid shapes (N <= 64) with hostile values: accepted, an output of the right size."""
    cases = []
    specials = {"nan": np.nan, "inf": np.inf, "-inf": -np.inf, "big": 3e38, "-big": -3e38, "tiny": 1e-45,
                "zero": 0.0, "-zero": -0.0}
    for B, N, d in ((1, 1, 32), (1, 1, 64), (2, 16, 32), (1, 64, 64), (3, 7, 32), (1, 33, 64)):
        for name, value in specials.items():
            for where in (0, 1 * N * d + 5, 2 * N * d + 7):  # in Q, in K, in V
                cases.append(file_case(f"values-{B}-{N}-{d}-{name}-at{where}",
                                       valid_bytes(B, N, d, where, {where: value}), 0, out_bytes=4 * B * N * d))
        cases.append(file_case(f"values-{B}-{N}-{d}-all-nan", np.array([B, N, d], "<i4").tobytes()
                               + np.full(3 * B * N * d, np.nan, "<f4").tobytes(), 0, out_bytes=4 * B * N * d))
    return cases


def stays(name: str, kind: str) -> Callable[[Path], str | None]:
    """A check that `name` is still a `kind` (symlink, fifo, chr) after the run."""
    def check(d: Path) -> str | None:
        p = Path(name) if name.startswith("/") else d / name
        ok = {"symlink": p.is_symlink(), "fifo": p.is_fifo(), "chr": p.is_char_device()}[kind]
        return None if ok else f"{name} is no longer a {kind}"
    return check


def path_cases() -> list[Case]:
    B, N, d = VALID
    out = 4 * B * N * d
    good = valid_bytes(*VALID)

    def with_input(make_output: Callable[[Path], str]) -> Callable[[Path], tuple[str, str]]:
        def build(dir_: Path) -> tuple[str, str]:
            (dir_ / "in.bin").write_bytes(good)
            return "in.bin", make_output(dir_)
        return build

    def link(target: str, name: str = "out.link") -> Callable[[Path], str]:
        def make(dir_: Path) -> str:
            os.symlink(target, dir_ / name)
            return name
        return make

    def device(path: str) -> Callable[[Path], str]:
        return link(path, "dev.link") if AS_ROOT else (lambda dir_: path)

    def fifo(dir_: Path) -> str:
        os.mkfifo(dir_ / "out.fifo")
        return "out.fifo"

    def hard(dir_: Path) -> str:
        os.link(dir_ / "in.bin", dir_ / "same.bin")
        return "same.bin"

    def subdir(dir_: Path) -> str:
        (dir_ / "sub").mkdir()
        return "sub"

    def input_kind(kind: str) -> Callable[[Path], tuple[str, str]]:
        def build(dir_: Path) -> tuple[str, str]:
            if kind == "fifo":
                os.mkfifo(dir_ / "in.fifo")
                return "in.fifo", "out.bin"
            if kind == "dir":
                (dir_ / "in.dir").mkdir()
                return "in.dir", "out.bin"
            if kind == "socket":
                s = socket.socket(socket.AF_UNIX)
                s.bind(str(dir_ / "in.sock"))
                s.close()
                return "in.sock", "out.bin"
            if kind == "link-to-fifo":
                os.mkfifo(dir_ / "f")
                os.symlink("f", dir_ / "in.link")
                return "in.link", "out.bin"
            if kind == "link-to-valid":
                (dir_ / "real.bin").write_bytes(good)
                os.symlink("real.bin", dir_ / "in.link")
                return "in.link", "out.bin"
            return {"zero": "/dev/zero", "null": "/dev/null", "missing": "nope.bin", "empty-name": ""}[kind], "out.bin"
        return build

    long = "o" * 256
    dev_link = [stays("dev.link", "symlink")] if AS_ROOT else []
    cases = [
        Case("out-dev-null", with_input(device("/dev/null")), 0, after=[stays("/dev/null", "chr"), *dev_link]),
        Case("out-dev-full", with_input(device("/dev/full")), 1, "write failed: No space left on device",
             after=[stays("/dev/full", "chr"), *dev_link]),
        Case("out-fifo", with_input(fifo), 0, fifo_output=True, after=[stays("out.fifo", "fifo")]),
        Case("out-is-input", with_input(lambda d_: "in.bin"), 2, "output is the input file"),
        Case("out-is-input-via-dot", with_input(lambda d_: "./in.bin"), 2, "output is the input file"),
        Case("out-symlink-to-input", with_input(link("in.bin")), 2, "output is the input file"),
        Case("out-hardlink-to-input", with_input(hard), 2, "output is the input file"),
        Case("out-symlink-new", with_input(link("target.bin")), 0, output_bytes=out,
             after=[stays("out.link", "symlink")]),
        Case("out-symlink-chain", with_input(lambda d_: (os.symlink("t2.link", d_ / "t1.link"),
                                                         os.symlink("target.bin", d_ / "t2.link"), "t1.link")[2]),
             0, output_bytes=out, after=[stays("t1.link", "symlink"), stays("t2.link", "symlink")]),
        Case("out-symlink-into-missing-dir", with_input(link("nodir/x.bin")), 2, "No such file or directory"),
        Case("out-symlink-to-dir", with_input(lambda d_: (subdir(d_), link("sub")(d_))[1]), 2, "is a directory"),
        Case("out-symlink-loop", with_input(lambda d_: (os.symlink("b.link", d_ / "a.link"),
                                                        os.symlink("a.link", d_ / "b.link"), "a.link")[2]),
             2, "too many levels of symbolic links"),
        Case("out-directory", with_input(subdir), 2, "output path is a directory"),
        Case("out-dot", with_input(lambda d_: "."), 2, "output path is a directory"),
        Case("out-trailing-slash", with_input(lambda d_: "new/"), 2, "output path names a directory"),
        Case("out-missing-dir", with_input(lambda d_: "nodir/out.bin"), 2, "No such file or directory"),
        Case("out-under-a-file", with_input(lambda d_: "in.bin/out.bin"), 2, "not a directory"),
        Case("out-empty-name", with_input(lambda d_: ""), 2, "output path is empty"),
        Case("out-name-256", with_input(lambda d_: long), 2, "output name is too long"),
        Case("out-name-255", with_input(lambda d_: long[:255]), 0, output_bytes=out),
        Case("out-name-1000", with_input(lambda d_: "o" * 1000), 2, "output name is too long"),
        Case("out-existing-file", with_input(lambda d_: ((d_ / "old.bin").write_bytes(b"old"), "old.bin")[1]), 0,
             output_bytes=out),
        Case("in-fifo", input_kind("fifo"), 2, "input is a FIFO"),
        Case("in-link-to-fifo", input_kind("link-to-fifo"), 2, "input is a FIFO"),
        Case("in-directory", input_kind("dir"), 2, "input is a directory"),
        Case("in-socket", input_kind("socket"), 2, "input is a socket"),
        Case("in-dev-zero", input_kind("zero"), 2, "input is a character device"),
        Case("in-dev-null", input_kind("null"), 2, "input is a character device"),
        Case("in-missing", input_kind("missing"), 2, "cannot open input: No such file or directory"),
        Case("in-empty-name", input_kind("empty-name"), 2, "cannot open input"),
        Case("in-link-to-valid", input_kind("link-to-valid"), 0, output_bytes=out),
    ]
    return cases


def mode_is(name: str, mode: int) -> Callable[[Path], str | None]:
    def check(d: Path) -> str | None:
        got = (d / name).stat().st_mode & 0o7777
        return None if got == mode else f"{name} has mode {oct(got)}, expected {oct(mode)}"
    return check


def missing(name: str) -> Callable[[Path], str | None]:
    return lambda d: f"{name} was created" if (d / name).exists() else None


def planted_link(dir_: Path, target: str, owner: int | None) -> tuple[str, str]:
    """shared/out.link -> ../TARGET in a sticky world-writable folder, the link owned by `owner`
    (None: by whoever runs the test): the output path given is the link."""
    (dir_ / "shared").mkdir()
    (dir_ / "shared").chmod(0o1777)
    os.symlink(f"../{target}", dir_ / "shared" / "out.link")
    if owner is not None:
        os.lchown(dir_ / "shared" / "out.link", owner, owner)
    return "in.bin", "shared/out.link"


def neighbour_cases() -> list[Case]:
    """The output rule (src_common/host/output.h) where another user could have been."""
    B, N, d = VALID
    out = 4 * B * N * d
    good = valid_bytes(*VALID)

    def existing(mode: int, name: str = "old.bin") -> Callable[[Path], tuple[str, str]]:
        def build(dir_: Path) -> tuple[str, str]:
            (dir_ / "in.bin").write_bytes(good)
            (dir_ / name).write_bytes(b"old")
            (dir_ / name).chmod(mode)
            return "in.bin", name
        return build

    def sticky_link(owner: int | None) -> Callable[[Path], tuple[str, str]]:
        def build(dir_: Path) -> tuple[str, str]:
            (dir_ / "in.bin").write_bytes(good)
            return planted_link(dir_, "target.bin", owner)
        return build

    def beside_a_live_temporary(dir_: Path) -> tuple[str, str]:
        (dir_ / "in.bin").write_bytes(good)
        (dir_ / ".out.bin.1.0123abcd.tmp").write_bytes(b"init's")  # pid 1 lives
        return "in.bin", "out.bin"

    cases = [
        Case("out-replaced-keeps-mode-0600", existing(0o600), 0, output_bytes=out, after=[mode_is("old.bin", 0o600)]),
        Case("out-replaced-keeps-mode-0640-named-temp", existing(0o640), 0, output_bytes=out,
             after=[mode_is("old.bin", 0o640)], env={"FA_OUTPUT_TEMP": "named"}),
        Case("out-sticky-own-link", sticky_link(None), 0, output_bytes=out,
             after=[stays("shared/out.link", "symlink")]),
        Case("out-beside-a-live-temporary", beside_a_live_temporary, 0, output_bytes=out),
    ]
    if AS_ROOT:  # root may write a read-only file, as cp does; another user's link needs a second user
        nobody = 65534
        cases += [
            Case("out-read-only-file-as-root", existing(0o444), 0, output_bytes=out, after=[mode_is("old.bin", 0o444)]),
            Case("out-sticky-others-link", sticky_link(nobody), 2, "not followed", after=[missing("target.bin")]),
        ]
    else:
        cases.append(Case("out-read-only-file", existing(0o444), 2, "cannot write output: Permission denied"))
    return cases


def corpus() -> list[Case]:
    return header_cases() + size_cases() + value_cases() + path_cases() + neighbour_cases()


def same_bytes(name: str, seed: int, shape: tuple[int, int, int]) -> Callable[[Path], str | None]:
    """A check that `name` holds fa gen's input of this seed and shape."""
    def check(d: Path) -> str | None:
        from fa_cli.cases import generate
        from fa_cli.cases.format import Shape
        generate.write_input(d / ".wanted", Shape(*shape), seed)
        wanted = (d / ".wanted").read_bytes()
        (d / ".wanted").unlink()
        return None if (d / name).read_bytes() == wanted else f"{name} is not seed {seed}'s input"
    return check


def fa_corpus() -> list[Case]:
    """fa's own probes (tests/test_fuzz.py runs them through `python -m fa_cli`)."""
    B, N, d = VALID
    good = valid_bytes(*VALID)
    out_bytes = 4 * B * N * d

    def files(inp: bytes | None = good, out: bytes | None = None, extra: dict[str, bytes] | None = None):
        def build(dir_: Path) -> tuple[str, str]:
            if inp is not None:
                (dir_ / "in.bin").write_bytes(inp)
            if out is not None:
                (dir_ / "out.bin").write_bytes(out)
            for name, data in (extra or {}).items():
                (dir_ / name).write_bytes(data)
            return "in.bin", "out.bin"
        return build

    def fifo_named(name: str):
        def build(dir_: Path) -> tuple[str, str]:
            os.mkfifo(dir_ / name)
            return "in.bin", name
        return build

    def huge(dir_: Path) -> tuple[str, str]:
        with open(dir_ / "huge.json", "wb") as f:
            f.truncate(65 << 20)
        return "in.bin", "huge.json"

    def planted_cache(dir_: Path) -> tuple[str, str]:
        from fa_cli.cases import generate
        from fa_cli.cases.format import Shape
        (dir_ / "cache").mkdir()
        generate.write_input(dir_ / "cache" / "uniform-B2-N64-d32-s0.in", Shape(2, 64, 32), 7)  # seed 7, seed 0's name
        return "in.bin", "b.json"

    def sticky_link(owner: int | None):
        return lambda dir_: planted_link(dir_, "target.in", owner)

    not_regular = "not a regular file"
    bench = ("bench", "--shape", "1,16,32", "--program", "cpu", "--repeat", "1", "-o", "{out}")
    gen = ("gen", "-B", "1", "-N", "16", "-d", "32", "-o", "{out}")
    cases = [
        Case("fa-compare-dev-zero", files(), 2, not_regular, command=("compare", "/dev/zero")),
        Case("fa-compare-dev-urandom", files(), 2, not_regular, command=("compare", "/dev/urandom")),
        Case("fa-compare-fifo", fifo_named("r.json"), 2, not_regular, command=("compare", "{out}")),
        Case("fa-report-dev-zero", files(), 2, not_regular, command=("report", "/dev/zero", "-o", "{dir}/r")),
        Case("fa-report-dev-urandom", files(), 2, not_regular, command=("report", "/dev/urandom", "-o", "{dir}/r")),
        Case("fa-report-fifo", fifo_named("r.json"), 2, not_regular, command=("report", "{out}", "-o", "{dir}/r")),
        Case("fa-compare-65mb", huge, 2, "larger than a results file can be (64 MB)", command=("compare", "{out}")),
        Case("fa-bench-o-dev-zero", files(), 2, "results file is a character device", command=bench[:-1] + ("/dev/zero",)),
        Case("fa-bench-o-fifo", fifo_named("b.json"), 2, "results file is a FIFO", command=bench),
        Case("fa-bench-o-65mb", huge, 2, "larger than a results file can be (64 MB)", command=bench),
        Case("fa-verify-output-cut-short", files(out=b"\0" * (out_bytes - 4)), 2,
             f"out.bin: output has {out_bytes - 4} bytes", command=("verify", "{out}", "--input", "{in}")),
        Case("fa-verify-input-cut-short", files(inp=good[:-4], out=b"\0" * out_bytes), 2,
             f"in.bin: file has {len(good) - 4} bytes", command=("verify", "{out}", "--input", "{in}")),
        Case("fa-verify-expected-empty", files(out=b"\0" * out_bytes, extra={"empty": b""}), 2,
             "empty has 0 (0 float32 values)", command=("verify", "{out}", "--expected", "{dir}/empty")),
        Case("fa-verify-empty-output", files(out=b"\0" * out_bytes, extra={"empty": b""}), 2,
             "empty: output has 0 bytes", command=("verify", "{dir}/empty", "--expected", "{out}")),
        Case("fa-verify-newline-in-name", files(), 2, "a\\nb.out", command=("verify", "{dir}/a\nb.out", "--input", "{in}")),
        Case("fa-gen-own-sticky-link", sticky_link(None), 0, command=gen, creates=("target.in",),
             after=[stays("shared/out.link", "symlink")]),
        Case("fa-gen-expected-dev-full", files(inp=None), 1, "No space left on device",
             command=gen + ("--expected", "/dev/full"), after=[missing("out.bin")]),
        Case("fa-run-time-limit-nan", files(), 2, "finite number above 0",
             command=("run", "{in}", "--program", "cpu", "--time-limit", "nan")),
        Case("fa-run-time-limit-inf", files(), 2, "finite number above 0",
             command=("run", "{in}", "--program", "cpu", "--time-limit", "inf")),
        Case("fa-cache-planted-under-another-seed", planted_cache, 0, creates=("b.json",),
             command=("bench", "--shape", "2,64,32", "--program", "cpu", "--repeat", "1", "--keep-inputs", "-o",
                      "{out}"),
             env={"FA_CACHE": "{dir}/cache"}, after=[same_bytes("cache/uniform-B2-N64-d32-s0.in", 0, (2, 64, 32))]),
        Case("fa-cache-is-a-file", files(), 2, "FA_CACHE=/etc/passwd is not a directory", command=bench,
             env={"FA_CACHE": "/etc/passwd"}),
    ]
    if AS_ROOT:  # another user's link needs a second user
        cases.append(Case("fa-gen-others-sticky-link", sticky_link(65534), 2, "not followed", command=gen,
                          after=[missing("target.in")]))
    return cases


def drain(fifo: Path) -> threading.Thread:
    """Read a FIFO to its end in the background, as a consumer of a program's output would."""
    def read() -> None:
        with open(fifo, "rb") as f:
            while f.read(1 << 16):
                pass
    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


def release(fifo: Path) -> None:
    """Unblock a reader still waiting on a FIFO (its writer never came)."""
    try:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:
        pass
