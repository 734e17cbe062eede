"""fa_cli/judge/probes/row_cover.py: rows never written that are a batch's last ones at the probe's
N, looked at over other Ns: a map of blocks onto row tiles that leaves tiles unvisited (an XOR swizzle
over groups of 8 tiles applied to a partial last group) is told from a count that stops short."""
import numpy as np

from fa_cli.judge.probes import readings
from fa_cli.judge.probes.step import ProbeInput
from fa_cli.judge.steps import Context
from fa_cli.judge.tool_logs import Budget
from fa_cli.programs.programs import Program

ROWS = 8  # rows a block


def swizzled_tiles(tiles: int) -> set[int]:
    """The row tiles a grid of `tiles` blocks computes, block x taking tile x ^ ((x >> 3) & 7)."""
    return {x ^ ((x >> 3) & 7) for x in range(tiles)} & set(range(tiles))


def counted_short(tiles: int) -> set[int]:
    """The row tiles a grid of N / ROWS blocks (rounded down) computes."""
    return set(range(tiles - 1)) if tiles > 1 else set(range(tiles))


def program(visits):
    """A stand-in for the program's run: the right output on the row tiles `visits` gives, 0 elsewhere."""
    def run(inp: ProbeInput, program=None):
        N = inp.shape.N
        out = inp.output().astype(np.float32)
        tiles = -(-N // ROWS)
        done = np.zeros(N, dtype=bool)
        for t in visits(tiles):
            done[t * ROWS:(t + 1) * ROWS] = True
        out[:, ~done] = 0.0
        return out
    return run


def said_by(tmp_path, visits, source=None) -> str:
    rng = np.random.default_rng(7)
    inp = ProbeInput(*(rng.uniform(-3, 3, size=(2, 200, 32)).astype(np.float32) for _ in range(3)))
    ctx = Context(Program("p", tmp_path / "p", source=source), None, tmp_path, Budget(60.0), lambda line: None, 5e-3,
                  inp, "t")
    ctx.run = program(visits)
    out = ctx.run(inp)
    W = inp.weights()
    W[:, (out == 0).all(axis=(0, 2))] = 0.0
    ctx.facts.W, ctx.facts.out, ctx.facts.true = W, out, inp.output()
    return " ".join(line for f in readings.RowsNotWritten().run(ctx) for line in f.lines)


def test_a_swizzle_that_leaves_tiles_unvisited_is_told_from_a_count_that_stops_short(tmp_path):
    source = tmp_path / "s.cu"
    source.write_text("int x = blockIdx.x;\nconst int tile = x ^ ((x >> 3) & 7);\nconst dim3 grid(tiles, B);\n")
    said = said_by(tmp_path, swizzled_tiles, source)
    assert "the last 8 rows (192..199)" in said, said  # at the probe's N = 200 the last tile alone: a tail
    # N = 1000: 125 tiles, the last group 120..124 sent to 127..123: tiles 120-122 (rows 960-983) unvisited
    assert "at N = 1000 (2 runs, V and -V - 1) rows 960-983 of every batch hold 0 in both (never written, or " \
        "computed from values of V that read 0) while the 16 rows after them are right" in said, said
    assert "the blocks' map onto the row tiles leaves some unvisited" in said
    assert "2 `const int tile = x ^ ((x >> 3) & 7);`" in said, said
    short = said_by(tmp_path, counted_short, source)
    assert "the last 8 rows (192..199)" in short and "map onto the row tiles" not in short, short
    assert "the rows' cover" in short, short


def test_an_unvisited_last_tile_beside_a_middle_one_is_no_map_said_of_rows_after_them(tmp_path):
    """Tiles skipped in the middle and at the end at N = 1000: no rows after the gap are written, so
    nothing is said of rows after them; one batch alone missing a middle tile is no map either."""
    def ends_too(tiles):
        return set(swizzled_tiles(tiles)) - {tiles - 1}
    said = said_by(tmp_path, ends_too)
    assert "map onto the row tiles" not in said and "the 0 rows after" not in said, said



def test_rows_from_the_largest_power_of_two_under_n_at_two_ns_are_said_as_a_shift_by_log2_n(tmp_path):
    """set50's s09: (b, i) decoded as row >> log2n and row & (2^log2n - 1), log2n = floor(log2 N): at N =
    200 rows 128..199 stay 0, as a count of row tiles of 128 would leave them; at N = 1000 rows 512..999,
    where tiles of 128 would stop at 896: said as a shift by log2 N rounded down, with its lines. Tiles of
    128 counted short are not."""
    source = tmp_path / "s.cu"
    source.write_text("int log2n = 0;\nwhile ((2 << log2n) <= in.N) ++log2n;\n"
                      "const int b = (int)(row >> log2n), i = (int)(row & ((1LL << log2n) - 1));\n")
    said = said_by(tmp_path, lambda tiles: set(range((1 << ((tiles * ROWS).bit_length() - 1)) // ROWS)), source)
    assert "rows from the largest power of two under it on (128 of 200, 512 of 1000), where row tiles of 128 " \
        "would stop at 896: a row's place decoded by a shift or a mask of log2 N rounded down" in said, said
    assert "3 `const int b = (int)(row >> log2n)" in said and "2 `while ((2 << log2n) <= in.N)" in said, said
    tiles_of_128 = said_by(tmp_path, lambda tiles: set(range(tiles * ROWS // 128 * 128 // ROWS)), source)
    assert "the last 72 rows (128..199)" in tiles_of_128 and "power of two" not in tiles_of_128, tiles_of_128
