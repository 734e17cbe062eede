"""Why a case did not pass, in words a student can act on.

  WRONG  how many values are over the tolerance and where: the worst one (with the value written
         and the right one), which batches, which rows, which columns; then which of the usual
         mistakes (mistakes.MISTAKES) explains the output, if one does.
  ERROR  the signal by name, the program's last lines on stderr, and for an output of the wrong
         size how far it got (bytes written against bytes expected, the batch and row it stops in).
  TLE    the limit and how long the program had run when it was stopped.

A Diagnosis is a few lines for the terminal and the same facts as fields for results files.
"""
from __future__ import annotations

import re
import signal
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..cases.format import AttentionInput, Shape
from ..programs import timing
from . import reference
from .mistakes import KEY_TILES, MISTAKES, Candidate, Mistake, Sample
from .verify import VerifyResult

# A mistake is named only if its output agrees with the program's on this share of the values
# looked at, and of the wrong ones among them; agrees: within the tolerance, or within
# MATCH_RELATIVE of its size (a wrong answer can be large, and the program computes in float32).
MATCH_SHARE = 0.99
MATCH_RELATIVE = 1e-3
# Rows of each sampled batch the mistakes are tried on (all rows of short sequences).
SAMPLE_ROWS = 32
STDERR_LINES = 3  # of a failed program's stderr, shown


@dataclass
class Diagnosis:
    lines: list[str]
    fields: dict = field(default_factory=dict)


# ---------------------------------------------------------------- where the wrong values are
def listing(values, limit: int = 6) -> str:
    values = [int(v) for v in values]
    shown = ", ".join(map(str, values[:limit]))
    return shown + (f", ... ({len(values)} in all)" if len(values) > limit else "")


def describe_batches(bad: np.ndarray, checked: np.ndarray, B: int) -> str:
    if len(bad) == len(checked):
        return "every batch" if len(checked) == B else f"every batch checked ({len(checked)} of {B})"
    if len(bad) == 1:
        return f"batch {bad[0]} only"
    if np.array_equal(bad, checked[: len(bad)]):
        return f"the first {len(bad)} batches ({bad[0]}..{bad[-1]})"
    if np.array_equal(bad, checked[-len(bad):]):
        return f"the last {len(bad)} batches ({bad[0]}..{bad[-1]})"
    return f"batches {listing(bad)}"


def describe_rows(bad: np.ndarray, checked: np.ndarray, N: int) -> str:
    """bad, checked: sorted distinct row indices (rows wrong in any wrong batch; rows checked)."""
    sampled = len(checked) < N
    about = " (rows were sampled: about)" if sampled else ""
    if len(bad) == len(checked):
        return "every row" + (" checked" if sampled else "")
    R = int(bad[0])
    if np.array_equal(bad, checked[checked >= R]):
        tiles = last_partial_tiles(bad, checked, N)
        if tiles:
            return f"only the last partial tile: rows {R}..{N - 1} (N = {N} is not a multiple of {tiles[0]})"
        return f"rows from {R} on{about}"
    if np.array_equal(bad, checked[checked <= bad[-1]]):
        return f"rows below {int(bad[-1]) + 1}{about}"
    for k in range(2, 65):
        residue = int(bad[0]) % k
        if len(bad) >= 2 and np.all(bad % k == residue) and np.array_equal(bad, checked[checked % k == residue]):
            return f"every {ordinal(k)} row (rows {residue}, {residue + k}, {residue + 2 * k}, ...)"
    if len(bad) == 1:
        return f"row {bad[0]} only"
    if len(bad) <= 12:
        return f"rows {listing(bad)}"
    return periodic_rows(bad, checked) or f"{len(bad)} scattered rows (of {len(checked)} checked)"


def periodic_rows(bad: np.ndarray, checked: np.ndarray) -> str | None:
    """Rows wrong in one run of places within every tile of T rows (T a power of 2 from 4 to 256):
    "rows 32..63 of every 64", where every checked row in that run is wrong, no other is, and the
    run is wrong in two tiles at least."""
    for T in (4, 8, 16, 32, 64, 128, 256):
        places = np.unique(bad % T)
        run = np.arange(places[0], places[-1] + 1)
        if len(places) < T and np.array_equal(places, run) and np.array_equal(bad, checked[np.isin(checked % T, run)]) \
                and np.unique(bad // T).size >= 2:  # the run in two tiles at least: a pattern, not one block
            return f"rows {places[0]}..{places[-1]} of every {T} (rows i with i mod {T} in {places[0]}..{places[-1]})"
    return None


def last_partial_tiles(bad: np.ndarray, checked: np.ndarray, N: int) -> list[int]:
    """The tiles T (of KEY_TILES) whose last, partial tile of rows is exactly the rows wrong, every
    row checked; [] where none is."""
    if len(checked) < N or not len(bad) or not np.array_equal(bad, np.arange(bad[0], N)):
        return []
    return [T for T in KEY_TILES if N % T and N - N % T == bad[0]]


def ordinal(k: int) -> str:
    """2nd, 3rd, 4th, 11th, 21st."""
    suffix = "th" if 10 <= k % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(k % 10, "th")
    return f"{k}{suffix}"


def describe_columns(column_bad: np.ndarray) -> str:
    bad = np.flatnonzero(column_bad)
    d = len(column_bad)
    if len(bad) == d:
        return "every column"
    if len(bad) == 1:
        return f"column {bad[0]} only"
    if np.array_equal(bad, np.arange(bad[0], d)):
        return f"columns {bad[0]}..{d - 1}"
    if np.array_equal(bad, np.arange(0, bad[-1] + 1)):
        return f"columns 0..{bad[-1]}"
    return f"columns {listing(bad)}"


def where_wrong(result: VerifyResult, shape: Shape) -> dict:
    """Which batches, rows and columns hold the values over the tolerance."""
    batches, rows, bad = result.wrong.arrays()
    wrong_batches = np.unique(batches[bad > 0])
    in_wrong = np.isin(batches, wrong_batches)
    bad_rows, checked_rows = np.unique(rows[in_wrong & (bad > 0)]), np.unique(rows[in_wrong])
    rows_said = describe_rows(bad_rows, checked_rows, shape.N)
    if not result.sampled and (blocks := straddling_blocks(batches, rows, bad, shape)):
        rows_said += (f" (the rows of blocks of T = {', '.join(map(str, blocks[:6]))} flat rows, B * N taken together, "
                      "that begin in the batch before: a block's rows all taken as its first row's batch)")
    return dict(batches=describe_batches(wrong_batches, np.unique(batches), shape.B),
                rows=rows_said, columns=describe_columns(result.wrong.column_bad),
                last_partial_tiles=last_partial_tiles(bad_rows, checked_rows, shape.N))


def straddling_blocks(batches: np.ndarray, rows: np.ndarray, bad: np.ndarray, shape: Shape) -> list[int]:
    """The block sizes T (in flat rows, b * N + r) for which the wrong rows are exactly those of the
    blocks that span two batches, from the batch boundary to the block's end: a block whose rows
    all take the batch of its first row. Every row must have been checked, and at least two
    boundaries (B >= 3) tell the block size."""
    B, N = shape.B, shape.N
    if B < 3 or batches.size != B * N:  # two batches: one boundary, which any first c rows of batch 1 fit
        return []
    wrong = np.zeros((B, N), dtype=bool)
    wrong[batches[bad > 0], rows[bad > 0]] = True
    count = wrong.sum(axis=1)
    if count[0] or not count.any() or any(wrong[b, :count[b]].sum() != count[b] for b in range(1, B)):
        return []  # batch 0 wrong, or a batch's wrong rows not its first ones
    T = np.arange(16, 2 * N + 1, 8)[:, None]  # a block's rows: a multiple of 8
    starts = np.arange(1, B)[None, :] * N
    reach = np.minimum(-(-starts // T) * T - starts, N)  # (T, B - 1): the rows past each boundary in its block
    # a block that ends inside each batch it enters: one that covers whole batches is a batch moved
    return [int(t) for t in T[((reach == count[1:][None, :]) & (reach < N)).all(axis=1), 0]]


# ---------------------------------------------------------------- which mistake explains it
def first_wrong_rows(result: VerifyResult, shape: Shape) -> np.ndarray | None:
    """(B,) each batch's first row holding a value over the tolerance (N where none does), from
    the rows the check looked at; None where it did not look at every row."""
    if result.wrong is None or result.sampled:
        return None
    batches, rows, bad = result.wrong.arrays()
    first = np.full(shape.B, shape.N, dtype=np.int64)
    wrong = bad > 0
    np.minimum.at(first, batches[wrong], rows[wrong])
    return first


def take_sample(inp: AttentionInput, out: np.ndarray, tol: float, seed: int = 0,
                first_wrong: np.ndarray | None = None) -> Sample:
    """A few batches (the first, the second, one in the middle, the last) and rows (the first and
    last 8, and random ones between) of the input and the output: enough to tell the mistakes
    apart, small enough for any N."""
    B, N, d = inp.shape.B, inp.shape.N, inp.shape.d
    picks = [0, 1, B // 2, B - 1] if N * d <= 1 << 20 else [0, B - 1]
    batches = np.unique([b for b in picks if b < B])
    if N <= SAMPLE_ROWS:
        rows = np.arange(N)
    else:
        middle = np.random.default_rng(seed).choice(np.arange(8, N - 8), size=min(SAMPLE_ROWS - 16, N - 16),
                                                    replace=False)
        rows = np.unique(np.concatenate([np.arange(8), np.arange(N - 8, N), middle]))
    q, k, v = (np.stack([np.asarray(inp.qkv(int(b))[i][0], dtype=np.float64) for b in batches]) for i in range(3))
    got = np.asarray(out[batches][:, rows], dtype=np.float32)
    correct = reference.attention(q, k, v, np.broadcast_to(rows, (len(batches), len(rows))))
    with np.errstate(invalid="ignore"):  # a signalling NaN (garbage bits) as any NaN
        wrong = ~(np.abs(got - correct) <= tol)  # NaN counts as wrong
    return Sample(batches, rows, q, k, v, got, correct, wrong, lambda b: tuple(x[0] for x in inp.qkv(b)),
                  None if first_wrong is None else first_wrong[batches])


def explains(candidate: Candidate, s: Sample, tol: float) -> bool:
    """The candidate agrees with the output on MATCH_SHARE of the values it speaks for, and on
    MATCH_SHARE of the wrong ones (so a mistake that changes nothing here is never named)."""
    with np.errstate(invalid="ignore"):
        close = ((np.abs(s.got - candidate.values) <= tol + MATCH_RELATIVE * np.abs(candidate.values))
                 | (np.isnan(s.got) & np.isnan(candidate.values)))
    if candidate.unwritten is not None:  # "not written" only for rows left as they were: never a row that
        close |= candidate.unwritten[..., None] & s.wrong & left_as_they_were(s)[..., None]  # holds another's
    judged = np.ones(s.got.shape, dtype=bool) if candidate.judged is None else \
        np.broadcast_to(candidate.judged[..., None], s.got.shape)
    wrong = s.wrong & judged
    if not wrong.any():
        return False
    return close[judged].mean() >= MATCH_SHARE and close[wrong].mean() >= MATCH_SHARE


def left_as_they_were(s: Sample) -> np.ndarray:
    """(G, R) rows of the output that no computation of attention wrote: all zero, or holding a
    value that is not finite or lies beyond what a weighted mean of V's rows can reach."""
    reach = np.abs(s.v).max(axis=(1, 2))[:, None, None] * (1 + 1e-3)
    with np.errstate(invalid="ignore"):
        beyond = ~(np.abs(s.got) <= reach)
    return (s.got == 0).all(axis=2) | beyond.any(axis=2)


def looks_like(inp: AttentionInput, out: np.ndarray, tol: float,
               first_wrong: np.ndarray | None = None) -> list[tuple[Mistake, list[str]]]:
    """Every mistake (with the variants, such as the tile width, that fit) that explains out;
    first_wrong: each batch's first wrong row, where every row was checked."""
    s = take_sample(inp, out, tol, first_wrong=first_wrong)
    found = []
    for mistake in MISTAKES:
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):  # an input with inf or NaN: NaN candidates
            labels = [c.label for c in mistake.outputs(s) if explains(c, s, tol)]
        if labels:
            found.append((mistake, labels))
    return found


def variants(labels: list[str]) -> str:
    """"key tiles of 16", "key tiles of 32" -> "key tiles of 16 or 32"."""
    words = [l.split() for l in labels]
    common = 0
    while all(len(w) > common + 1 and w[common] == words[0][common] for w in words):
        common += 1
    return " ".join(words[0][:common] + [" or ".join(" ".join(w[common:]) for w in words)])


SOURCE_LINES_SHOWN = 2  # lines of the student's source shown for a mistake named


def source_lines(source: Path, pattern: str | tuple[str, ...], limit: int = SOURCE_LINES_SHOWN) -> list[tuple[int, str]]:
    """The first lines of a source that match a mistake's pattern (Mistake.look), comments left out:
    (line number, the line's text). A tuple of patterns: the first line of each, in their order
    (each kind of line that may be at fault shown once)."""
    if isinstance(pattern, tuple):  # a pattern named twice gives its second line the second time
        found: list[tuple[int, str]] = []
        for p in pattern:
            found += [line for line in source_lines(source, p, len(found) + 1) if line not in found][:1]
        return found[:limit]
    if not pattern:
        return []
    try:
        text = source.read_text(errors="replace")
    except OSError:
        return []
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        code = line.split("//")[0].strip()
        if code and not code.startswith(("#include", "*", "/*")) and re.search(pattern, code):
            found.append((number, code if len(code) <= 70 else code[:67] + "..."))
            if len(found) == limit:
                break
    return found


def where_to_look(mistake: Mistake, source: Path | None) -> str:
    """"; lines to look at in hw4.cu: 42 `float scale = ...`" where fa has the source."""
    if source is None:
        return ""
    look = mistake.look
    lines = source_lines(source, look, max(SOURCE_LINES_SHOWN, len(look) if isinstance(look, tuple) else 0))
    if not lines:
        return ""
    return f"; lines to look at in {source.name}: " + quoted(lines)


def quoted(lines: list[tuple[int, str]]) -> str:
    """Source lines as fa shows them: "42 `float scale = ...`, 57 `...`"."""
    return ", ".join(f"{n} `{code}`" for n, code in lines)


def of_wrong(result: VerifyResult, shape: Shape, inp: AttentionInput | None = None,
             out: np.ndarray | None = None, source: Path | None = None) -> Diagnosis:
    share = result.bad / result.checked if result.checked else 0.0
    worst = dict(error=result.max_err, got=result.got, expected=result.expected)
    if len(result.where) == 3:
        worst.update(zip(("batch", "row", "column"), result.where))
    fields = dict(over_tolerance=result.bad, checked=result.checked, share=share, nonfinite=result.nonfinite,
                  worst=worst)
    lines = [f"{result.bad} of {result.checked} values checked ({share:.1%}) are over {result.tol:g}; "
             + (f"{result.nonfinite} are NaN or infinite" if result.nonfinite else "none is NaN or infinite"),
             f"worst: {result.max_err:.3g} at {result.describe_where()} "
             f"(wrote {result.got:.6g}, expected {result.expected:.6g})" if result.got is not None else ""]
    if result.wrong is not None:
        pattern = where_wrong(result, shape)
        fields["pattern"] = pattern
        lines.append(f"wrong in: {pattern['batches']}; {pattern['rows']}; {pattern['columns']}")
    if inp is not None and out is not None:
        found = looks_like(inp, out, result.tol, first_wrong_rows(result, shape))
        fields["looks_like"] = [m.name + (f", {variants(labels)}" if any(labels) else "") for m, labels in found]
        fields["mistakes"] = [m.name for m, _ in found]  # without the variants: the same mistake in every case
        if found:
            lines += [f"looks like: {name}; check: {m.hint}{where_to_look(m, source)}"
                      for name, (m, _) in zip(fields["looks_like"], found)]
        else:
            lines.append(f"looks like: none of the {len(MISTAKES)} usual mistakes fa knows "
                         "(fa verify --help lists them)")
    return Diagnosis([l for l in lines if l], fields)


# ---------------------------------------------------------------- ERROR and TLE
def signal_name(returncode: int) -> str | None:
    """SIGSEGV for a program killed by signal 11 (Popen's -11, or a shell's 139)."""
    number = -returncode if returncode < 0 else returncode - 128 if 128 < returncode < 160 else None
    if number is None:
        return None
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def short_output(size: int, shape: Shape) -> str:
    """How far an output of the wrong size got, in batches and rows."""
    if size > shape.output_bytes:
        return f"output has {size} bytes, {size - shape.output_bytes} more than 4*B*N*d = {shape.output_bytes}"
    values = size // 4
    batch, row = divmod(values // shape.d, shape.N)
    return (f"output has {size} of the {shape.output_bytes} bytes expected (4*B*N*d for {shape}): "
            f"it stops in batch {batch}, row {row}")


HEAD_DIMENSIONS = (32, 64)  # the course's d: a program may hard-code either


def size_explained(output_size: int, shape: Shape, input_path: Path | None,
                   output_path: Path | None) -> tuple[dict, list[str]] | None:
    """An output whose size is what another reading of the format gives: 8 bytes a value (float64
    written where the format has float32), or 4*B*N*D for the other d of the course (the head
    dimension taken as D). Each reading is checked on the first batch's values: the size alone
    says only which readings fit (at d = 32 both give the same size)."""
    doubles = output_size == 2 * shape.output_bytes
    other = [D for D in HEAD_DIMENSIONS if D != shape.d and output_size == 4 * shape.B * shape.N * D]
    if not doubles and not other:
        return None
    paths = input_path is not None and output_path is not None
    if doubles and paths and first_batch_as(shape.d, shape, input_path, output_path, "<f8"):
        return dict(written_as="float64"), [
            f"output has {output_size} bytes = 8*B*N*d: its values written as float64 (8 bytes each) where the "
            "format has float32 (4 bytes)",
            f"read as float64, its first batch's values are the right ones (checked on {HEAD_ROWS_CHECKED} rows)"]
    if not other:
        return dict(written_as=None), [
            f"output has {output_size} bytes = 8*B*N*d, the size of float64 values, but read as float64 its first "
            f"batch's values are not the right ones (checked on {HEAD_ROWS_CHECKED} rows)"]
    D = other[0]
    seen = first_batch_as(D, shape, input_path, output_path) if paths else None
    if seen or seen is None:
        lines = [f"output has {output_size} bytes = 4*B*N*{D}, the size for d = {D}, where this input has d = "
                 f"{shape.d}: the head dimension taken as {D} (hard-coded?)"]
        if seen:
            lines.append(f"its first batch's values are what d = {D} gives on this input read as {D} columns "
                         f"(checked on {HEAD_ROWS_CHECKED} rows)")
        return dict(head_dimension_taken=D), lines
    also = " or 8*B*N*d, the size of float64 values," if doubles else ""
    return dict(head_dimension_taken=None), [
        f"output has {output_size} bytes = 4*B*N*{D}, the size for d = {D},{also} where this input has d = {shape.d}; "
        f"neither reading fits its values: its first batch is not what d = {D} gives on this input read as {D} "
        f"columns{', nor the right values read as float64' if doubles else ''} (checked on {HEAD_ROWS_CHECKED} rows)"]


HEAD_ROWS_CHECKED = 16


def first_batch_as(D: int, shape: Shape, input_path: Path, output_path: Path, dtype: str = "<f4") -> bool | None:
    """Whether the output's first batch, read as dtype, is attention of Q, K, V read as N x D
    matrices from the payload's start (scale 1/sqrt(D) or 1/sqrt(d)); None where the payload is
    too short for that."""
    N = shape.N
    need = 3 * N * D
    payload = np.fromfile(input_path, dtype="<f4", count=need, offset=12)
    got = np.fromfile(output_path, dtype=dtype, count=N * D)
    if payload.size < need or got.size < N * D:
        return None
    q, k, v = (payload[i * N * D:(i + 1) * N * D].reshape(N, D).astype(np.float64) for i in range(3))
    rows = np.unique(np.r_[np.arange(min(8, N)), np.arange(max(0, N - 8), N)])
    with np.errstate(over="ignore", invalid="ignore"):
        got = got.reshape(N, D)[rows].astype(np.float64)
    for scale in (1 / np.sqrt(D), 1 / np.sqrt(shape.d)):
        with np.errstate(over="ignore", invalid="ignore"):
            logits = q[rows] @ k.T * scale
            p = np.exp(logits - logits.max(axis=1, keepdims=True))
            want = p @ v / p.sum(axis=1, keepdims=True)
            if np.mean(np.abs(got - want) <= 5e-3 + MATCH_RELATIVE * np.abs(want)) >= MATCH_SHARE:
                return True
    return False


def of_error(returncode: int, stderr: str, shape: Shape, output_size: int | None, timed_out: bool = False,
             input_path: Path | None = None, output_path: Path | None = None) -> Diagnosis:
    fields: dict = dict(exit_code=returncode)
    lines = []
    name = signal_name(returncode)
    if name and not timed_out:
        fields["signal"] = name
        lines.append(f"killed by {name}" + (f" ({signal.strsignal(getattr(signal, name))})"
                                            if hasattr(signal, name) else ""))
    elif returncode:
        lines.append(f"exit code {returncode}")
    tail = [l for l in stderr.splitlines() if l.strip() and not timing.is_timing_line(l)][-STDERR_LINES:]
    if tail:
        fields["stderr_tail"] = tail
        lines.append("stderr: " + " | ".join(tail))
    if returncode == 0 and output_size is None:
        lines.append("exited 0 but wrote no output file")
    elif output_size is not None and output_size != shape.output_bytes:
        fields.update(output_bytes=output_size, expected_bytes=shape.output_bytes)
        explained = size_explained(output_size, shape, input_path, output_path)
        if explained:  # its size says more than how far it got
            fields.update(explained[0])
            lines += explained[1]
        else:
            lines.append(short_output(output_size, shape))
    return Diagnosis(lines, fields)


def of_tle(limit: float, ran_s: float) -> Diagnosis:
    return Diagnosis([f"stopped at its {limit:g} s time limit after {ran_s:.2f} s (whole process); "
                      "--no-time-limit lets it finish"], dict(time_limit=limit, ran_s=ran_s))
