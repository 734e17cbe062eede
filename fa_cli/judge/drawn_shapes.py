"""The drawn inputs a passing program is run on, in order, and what each is against the course's
cases (judge/larger_input.py runs them and says what they showed): larger than the cases passed,
rows of 4096, the course's longest rows and most batches, its N of 512, 1024 and 8192, ten batches
(the course's count that no share of 3 or 4 divides), then shapes no course case has: one batch of
an odd N, one whose last tile of 64 keys is over half full, a few batches of rows shorter than a
tile, many batches of 4 rows."""
from __future__ import annotations

from ..cases import suite
from ..cases.format import Shape

LARGER_B, LARGER_N = 4, 2048  # a course shape (N in its list, B * N * d far under its bound)
LARGER_SEED = 29
MIDDLE_B, MIDDLE_N = 2, 4096  # rows past 2048 and under 8192 (its t23, t24): a path for "short" rows taken there
LONGEST_B, LONGEST_N = 2, 32768  # the course's longest rows (its t30 is 2 x 32768 x 64)
EDGE_B, EDGE_N = 1, 129  # beyond the course's shapes: one batch, N odd, one past a tile
HALF_TILE_N = 97  # 64 + 33: a 64-key tile's upper half reached, one past a tile of 32 (course N: multiples of 64)
SMALL_B, SMALL_N = 3, 21  # under a tile of 32 keys or rows, odd, and B * N no multiple of 8 (course N: 128 and up)
TINY_B, TINY_N = 64, 4  # rows of 4 keys: about 1 in 16 has only negative scores (a max that starts at 0 keeps 0,
# an integer max of a float's bits keeps its start), which longer rows almost never have
MOST_B, MOST_N = {32: 13600, 64: 9600}, 128  # the course's most batches (its t11 and t12)
SAMPLED_ROWS = 64  # rows of each batch the longest input is checked on: its float64 output is N^2 d a batch
MOST_ROWS = 8  # rows of each batch the input of most batches is checked on (thousands of batches)
# The course's c10, c26, c27 have 10 batches: no multiple of 4 or 3, so batches dealt to 3 or 4
# streams or blocks in shares of ceil(B / S) leave a short last share (30, its c25, alike).
SHARES_B, SHARES_N = 10, 128


COURSE_NS = (512, 1024, 8192)  # course N the drawn inputs above leave out: a bound at one of them (N > 512
# where N >= 512 belongs) shows only there; the last on sampled rows (its float64 output is N^2 d a batch)


def course_n_shape(N: int):
    """A drawn input of 2 batches at the course's N (at the largest d passed); None where a case
    passed had that N."""
    def shape(passed: list[Shape]) -> Shape | None:
        if not passed or any(s.N == N for s in passed):
            return None
        return Shape(2, N, max(s.d for s in passed))
    shape.__name__ = f"n{N}_shape"
    return shape


def larger_shape(passed: list[Shape]) -> Shape | None:
    """The drawn input's shape, at the d of the first case passed; None where a case passed is as
    large already."""
    if not passed or any(s.N >= LARGER_N and s.B >= LARGER_B for s in passed):
        return None
    return Shape(LARGER_B, LARGER_N, passed[0].d)


def middle_shape(passed: list[Shape]) -> Shape | None:
    """The second drawn input, at rows of 4096; None where a case passed had rows as long."""
    if not passed or any(s.N >= MIDDLE_N for s in passed):
        return None
    return Shape(MIDDLE_B, MIDDLE_N, passed[0].d)


def shares_shape(passed: list[Shape]) -> Shape | None:
    """10 batches of 128 rows; None where a case passed had 10 batches already."""
    if not passed or any(s.B == SHARES_B for s in passed):
        return None
    return Shape(SHARES_B, SHARES_N, passed[0].d)


def edge_shape(passed: list[Shape]) -> Shape | None:
    """One batch of an odd N; None where a case passed was one already."""
    if not passed or any(s.B == 1 and s.N % 2 for s in passed):
        return None
    return Shape(EDGE_B, EDGE_N, passed[0].d)


def half_tile_shape(passed: list[Shape]) -> Shape | None:
    """One batch whose last 64-key tile holds 33 keys; None where a case passed had such a tile (N mod
    64 past 32) already."""
    if not passed or any(s.N % 64 > 32 for s in passed):
        return None
    return Shape(EDGE_B, HALF_TILE_N, passed[0].d)


def small_shape(passed: list[Shape]) -> Shape | None:
    """The last of all: a few batches of rows shorter than one tile; None where a case passed had
    rows that short already."""
    if not passed or any(s.N < 32 for s in passed):
        return None
    return Shape(SMALL_B, SMALL_N, passed[0].d)


def tiny_shape(passed: list[Shape]) -> Shape | None:
    """The very last: many batches of 4 rows; None where a case passed had rows that short."""
    if not passed or any(s.N <= TINY_N for s in passed):
        return None
    return Shape(TINY_B, TINY_N, passed[0].d)


def drawn_kind(shape: Shape) -> str:
    """What the drawn input is, against the course's cases, in words."""
    if shape.N == HALF_TILE_N:
        return f"one batch whose last tile of 64 keys holds {shape.N % 64}, past half: " + (
            "some course cases have such an N" if any(c.shape.N % 64 > 32 for c in suite.cases("c").values())
            else "no course case has such an N")
    if shape.N == TINY_N:
        return (f"{shape.B} batches of {shape.N} rows: about 1 row in 16 has only negative scores, which rows as long "
                "as the course's almost never have")
    if shape.N == SMALL_N:
        return f"{shape.B} batches of {shape.N} rows, under one tile of 32: " + (
            "some course cases have rows so short" if any(c.shape.N < 32 for c in suite.cases("c").values())
            else "no course case has rows so short")
    if shape.N in COURSE_NS and shape.B == 2:
        return f"2 batches at the course's N = {shape.N}, which no case run has"
    if shape.B == SHARES_B and shape.N == SHARES_N:
        return (f"{SHARES_B} batches, as the course's c10, c26 and c27 have: no multiple of 3 or 4, so batches dealt "
                "to 3 or 4 streams or blocks leave a short last share")
    return "one batch of an odd N: no course case has either" if shape.N % 2 else \
        "larger than the cases passed; not one of the course's cases"


def longest_shape(passed: list[Shape]) -> Shape | None:
    """The third drawn input, at the course's longest rows and the largest d passed (its largest
    input, t30, is 2 x 32768 x 64: a batch of 25 MB, past what a buffer or chunk sized in MB holds);
    None where a case passed reached them."""
    if not passed or any(s.N >= LONGEST_N for s in passed):
        return None
    return Shape(LONGEST_B, LONGEST_N, max(s.d for s in passed))


def most_batches_shape(passed: list[Shape]) -> Shape | None:
    """The fourth drawn input, at the course's most batches at the largest d passed; None where a
    case passed held half as many values or more."""
    if not passed:
        return None
    d = max(s.d for s in passed)
    shape = Shape(MOST_B.get(d, MOST_B[32]), MOST_N, d)
    return None if any(s.B * s.N * s.d * 2 >= shape.B * shape.N * shape.d for s in passed) else shape


def only_at(shape: Shape) -> str:
    """The sizes a mistake found on the drawn shape shows at, in words."""
    if shape.N in (SMALL_N, TINY_N):
        return "such a size (the cases run have rows of a tile or more)"
    if shape.B == SHARES_B and shape.N == SHARES_N:
        return f"{SHARES_B} batches (the cases run have other counts)"
    if shape.N in COURSE_NS and shape.B == 2:
        return f"N = {shape.N} (the cases run have other N)"
    return "such a size (the cases run have B > 1 or an even N)" if shape.N % 2 else "larger sizes"


# The drawn inputs, in order (each run only where the ones before were right), and the rows of
# each batch checked on each (None: all, and a wrong one is looked into as a failing case).
N512, N1024, N8192 = (course_n_shape(N) for N in COURSE_NS)
SHAPES = (larger_shape, middle_shape, longest_shape, most_batches_shape, N512, N1024, N8192, shares_shape, edge_shape,
          half_tile_shape, small_shape, tiny_shape)
ROWS_CHECKED = (None, None, SAMPLED_ROWS, MOST_ROWS, None, None, SAMPLED_ROWS, None, None, None, None, None)
