"""fa_cli/judge/probes/skipped_tiles.py: key tiles skipped where their largest score is under the
running max by more than a threshold are said with the tile and the threshold's bracket; keys left
out by another rule are not."""
import numpy as np

from fa_cli.judge.probes.skipped_tiles import SkippedTiles
from fa_cli.judge.probes.step import ProbeInput, logits, softmax_rows
from fa_cli.judge.steps import Context
from fa_cli.judge.tool_logs import Budget
from fa_cli.programs.programs import Program

GAP = 10 * np.log(2)  # a skip test in log2 units, 10 under the running max


def skipping(s: np.ndarray, T: int, gap: float) -> np.ndarray:
    """Which keys a program drops: those of each tile past the first whose largest score is more than
    `gap` under the running max of the tiles before it."""
    dead = np.zeros(s.shape, dtype=bool)
    running = s[..., :T].max(axis=-1)
    for j0 in range(T, s.shape[-1], T):
        top = s[..., j0:j0 + T].max(axis=-1)
        dead[..., j0:j0 + T] = (top < running - gap)[..., None]
        running = np.maximum(running, top)
    return dead


def context(tmp_path, dead_of) -> Context:
    rng = np.random.default_rng(9)
    inp = ProbeInput(*(rng.uniform(-3, 3, size=(2, 256, 32)).astype(np.float32) for _ in range(3)))
    s = logits(inp.q, inp.k)
    W = softmax_rows(np.where(dead_of(s), -np.inf, s))
    ctx = Context(Program("p", tmp_path / "p"), None, tmp_path, Budget(10.0), lambda line: None, 5e-3, inp, "t")
    ctx.facts.W, ctx.facts.P, ctx.facts.linear = W, inp.weights(), True
    return ctx


def test_tiles_skipped_under_the_running_max_are_said_with_the_thresholds_bracket(tmp_path):
    ctx = context(tmp_path, lambda s: skipping(s, 32, GAP))
    [found] = SkippedTiles().run(ctx)
    said = found.lines[0]
    assert "key tiles of 32" in said and "get no weight, whole" in said, said
    low, high = (float(x) for x in said.split("in log2 units")[0].rsplit("(", 1)[1].split(" to "))
    assert low < 10 < high, said
    assert ctx.facts.named


def test_keys_left_out_by_their_place_are_not_said_as_skipped_tiles(tmp_path):
    ctx = context(tmp_path, lambda s: np.broadcast_to(np.arange(256) % 64 >= 48, s.shape))  # a lane mask
    assert SkippedTiles().run(ctx) == []
    ctx = context(tmp_path, lambda s: skipping(s, 32, GAP) & (np.arange(256) % 32 < 16))  # half tiles
    assert SkippedTiles().run(ctx) == []


def test_weights_flushed_key_by_key_are_no_tile_skip(tmp_path):
    """Each key's weight against the running max set to 0 under 1e-5 (a flush key by key, Q scaled
    3 times so that whole tiles fall under it): keys of kept tiles lose weight too, no skip test."""
    def flushed(s):
        s = 3 * s
        running = np.maximum.accumulate(s, axis=-1)
        return np.exp(s - running) < 1e-5
    ctx = context(tmp_path, flushed)
    ctx.probe.q *= 3
    ctx.facts.P = ctx.probe.weights()
    s = logits(ctx.probe.q, ctx.probe.k)
    ctx.facts.W = softmax_rows(np.where(flushed(s / 3), -np.inf, s))
    assert (ctx.facts.W == 0).any()
    assert SkippedTiles().run(ctx) == []
