"""The formulas a moved output is said by: where every output value is a right value of another
place (linear_map.moved), which place, as columns moved within each row, rows moved, two indices of
a block combined in the other order, a layout of the N x d block, or a shift of the flat index."""
from __future__ import annotations

import numpy as np


def map_formula(r, c, rr, cc, N: int, d: int) -> str:
    """The map as a formula, among: columns moved within each row, rows moved, a layout of the
    N x d block (LAYOUTS), a shift of the flat index."""
    flat, true_flat = r * d + c, rr * d + cc
    if (rr == r).all():
        shifts = np.unique((cc - c) % d)
        if shifts.size == 1:
            return f"row r, column (c + {shifts[0]}) mod d"
        if (cc == (c ^ cc[0, 0])).all():
            return f"row r, column c xor {cc[0, 0]}"
        return columns_in_blocks(c, cc, d) or vectors_at_float_index(c, cc) or one_column_of_each_block(c, cc, d) or \
            components_moved(c, cc, d) or \
            "row r, columns moved: " + ", ".join(f"{x}<-{y}" for x, y in zip(c[0][:6], cc[0][:6])) + " ..."
    if (cc == c).all():
        shifts = np.unique((rr - r) % N)
        return f"row (r + {shifts[0]}) mod N, column c" if shifts.size == 1 else \
            rows_in_blocks(r, rr, N) or "another row, column c"
    for words, source in layouts(N, d):
        if (source(flat, r, c) == true_flat).all():
            return words
    shifts = np.unique((true_flat - flat) % (N * d))
    return f"flat position (r*d + c + {shifts[0]}) mod N*d" if shifts.size == 1 else ""


def swapped_index(i: np.ndarray, R: int, a: int) -> np.ndarray:
    """q0 + (j mod a)*(R/a) + j div a for each index i = q0 + j of a block of R from q0."""
    return i - i % R + (i % R % a) * (R // a) + i % R // a


def two_indices_swapped(i: np.ndarray, src: np.ndarray, n: int) -> tuple[int, int, int] | None:
    """(R, a, b) where index q0 + j holds q0 + (j mod a)*b + j div a in every block of R (a*b = R; a
    block of R past n, its first n indices: a thread's rows of a 256-row block at N = 128)."""
    for R in (8, 16, 32, 64, 128, 256):
        if n % R == 0 or R > n:
            for a in (x for x in range(2, R) if R % x == 0):
                if (src == swapped_index(i, R, a)).all():
                    return R, a, R // a
    return None


def rows_written_in_another_order(i: np.ndarray, src: np.ndarray, N: int) -> str:
    """Rows i of a batch that each hold row src's result, as a thread's rows read in one order and
    written in the other ('' where none fits): the formula must move every row it moves under N,
    not only the wrong ones (two swapped rows fit many a formula)."""
    if (found := two_indices_swapped(i, src, N)) is None:
        return ""
    R, a, per = found
    j = np.arange(N)
    moves = swapped_index(j, R, a)
    if not set(j[(moves != j) & (moves < N)]) <= set(int(x) for x in i):
        return ""
    return (f"row (i mod {a})*{per} + i div {a} of its block of {R} rows: the result of row {per}*x + y written at "
            f"row {a}*y + x (x < {a}, y < {per}: a thread x's rows y read in one order and written in another)")


def rows_in_blocks(r: np.ndarray, rr: np.ndarray, N: int) -> str:
    """Rows moved within each block of R rows as two indices combined in the other order; '' where
    none fits."""
    if (found := two_indices_swapped(r, rr, N)) is None:
        return ""
    R, a, b = found
    return (f"row q0 + (i mod {a})*{b} + i div {a}, column c (i = r - q0, each block of {R} rows from q0): "
            f"the rows numbered {b}*x + y when computed (x < {a}, y < {b}: say x a warp, y its row) are "
            f"stored at {a}*y + x, the two indices combined in the other order")


def columns_in_blocks(c: np.ndarray, cc: np.ndarray, d: int) -> str:
    """Columns moved within each block of R columns as two indices combined in the other order."""
    if (found := two_indices_swapped(c, cc, d)) is None:
        return ""
    R, a, b = found
    return (f"row r, column c0 + (i mod {a})*{b} + i div {a} (i = c - c0, each block of {R} columns from c0): the "
            f"columns numbered {b}*x + y when computed (x < {a}, y < {b}: say x a lane, y its column of {b}) are "
            f"stored at {a}*y + x (a thread's columns indexed lane*{b} + y where lane + {a}*y belongs, or the other "
            "way round)")


COMPONENTS = "the components of each"  # components_moved's words: linear_map shows the moved components' lines
NAMES = "xyzw"


def components_moved(c: np.ndarray, cc: np.ndarray, d: int) -> str:
    """Columns moved only within each aligned block of w = 2 or 4 (a float2's or float4's), the same
    way in every block: the vector's components named (z<-w: component z holds w's value)."""
    for w in (2, 4):
        if d % w or (cc // w != c // w).any():
            continue
        own, took = c % w, cc % w
        per = {int(x): np.unique(took[own == x]) for x in range(w)}
        if all(v.size == 1 for v in per.values()) and any(per[x][0] != x for x in per):
            moved = ", ".join(f"{NAMES[x]}<-{NAMES[int(v[0])]}" for x, v in per.items() if v[0] != x)
            return (f"row r, {COMPONENTS} block of {w} columns moved the same way: {moved} (the block's columns "
                    f"named {NAMES[:w]}; each holds the value of the one after its arrow): as a float{w}'s components "
                    "crossed where it is loaded, met with a weight or stored (o.z += p * v.w where p * v.z belongs), "
                    f"or two indices of a thread's {w} columns exchanged")
    return ""


PACKED = "a pack of"  # the words of one_column_of_each_block, which linear_map shows a pack's lines under


def one_column_of_each_block(c: np.ndarray, cc: np.ndarray, d: int) -> str:
    """Every column of each block of w columns holding the block's column k (one k for all)."""
    for w in (2, 4, 8):
        k = cc - (c - c % w)
        if d % w == 0 and np.unique(k).size == 1 and 0 <= k.flat[0] < w:
            return (f"row r, column c - c mod {w} + {k.flat[0]}: every column of each block of {w} holds the block's "
                    f"column {k.flat[0]} ({PACKED} {w} values given one value for all, e.g. __float2half2_rn(x) "
                    "where __floats2half2_rn(x, y) belongs, or a vector's components all taken from one)")
    return ""


def layouts(N: int, d: int):
    """The layouts of a batch's N x d block that a program's transposes make, each as the right
    value's flat position (r'*d + c') that output position (r, c) (flat f = r*d + c) holds: the
    block written column by column, read column by column, transposed twice the same way (a
    transpose given the sizes swapped), and each T x T tile transposed in place."""
    def by_columns(f):  # f = c'*N + r': the right (r', c') stored column by column
        return (f % N) * d + f // N

    def read_by_columns(f):  # (r, c) takes the right block's flat element c*N + r
        return (f % d) * N + f // d
    yield ("the element at flat position r*d + c read as the block's transpose (written column by column: "
           "(r, c) at c*N + r)"), lambda f, r, c: by_columns(f)
    yield ("flat position c*N + r (the block read column by column, as though it were d x N)",
           lambda f, r, c: read_by_columns(f))
    yield ("flat position t(t(r*d + c)), t(f) = (f mod N)*d + f div N: the block transposed twice the same way "
           "(a d x N block transposed back as though it were N x d: a transpose given its sizes swapped)"), \
        lambda f, r, c: by_columns(by_columns(f))
    yield ("flat position t(t(r*d + c)), t(f) = (f mod d)*N + f div d: the block transposed twice the same way "
           "(an N x d block transposed as though it were d x N: a transpose given its sizes swapped)"), \
        lambda f, r, c: read_by_columns(read_by_columns(f))
    for T in (8, 16, 32, 64):
        if N % T == 0 and d % T == 0:
            yield (f"row {T}*(r div {T}) + c mod {T}, column {T}*(c div {T}) + r mod {T}: each {T} x {T} tile "
                   "transposed in place (a tile's row and column index swapped where it is loaded or stored)"), \
                (lambda T: lambda f, r, c: (T * (r // T) + c % T) * d + T * (c // T) + r % T)(T)


def vectors_at_float_index(c: np.ndarray, cc: np.ndarray) -> str:
    """Column c holding column c div w + c mod w: a load or store of w floats at a time (float2,
    float4) whose start is its vector's index where w times it belongs; '' where no w fits."""
    for w in (2, 4, 8):
        if (cc == c // w + c % w).all():
            return (f"row r, column c div {w} + c mod {w}: the {w} floats of vector i (columns {w}*i ..) taken from "
                    f"column i on, a load or store of {w} floats at a time started at i where {w}*i belongs")
    return ""
