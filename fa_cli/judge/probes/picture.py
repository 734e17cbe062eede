"""The picture of a measurement: P, the program's W and W / P for the first rows of one batch,
side by side (one PNG; its path is printed under fa run's table and fa report shows it)."""
from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from ... import locations
from ...files import atomic_file
from ...report.charts import pyplot
from ..findings import Finding, Kind
from ..steps import Context, Step

ROWS_SHOWN = 64


class Picture(Step):
    """The picture of W against P, for the first batch the probe got wrong, in fa's cache by
    program and case (diagnosis/PROGRAM-CASE-weights.png)."""

    name = "the picture of W against P"

    def applies(self, ctx: Context) -> bool:
        return ctx.facts.W is not None and ctx.target is not None

    def run(self, ctx: Context) -> list[Finding]:
        path = locations.cache_dir() / "diagnosis" / f"{Path(ctx.program.path).name}-{ctx.case_label}-weights.png"
        wrong = ~(np.abs(ctx.facts.out - ctx.facts.true) <= ctx.tol)
        batch = int(np.argmax(wrong.any(axis=(1, 2))))
        try:
            draw(ctx.facts.W, ctx.facts.P, batch, ctx.probe.label, path)
        except OSError as e:
            return [Finding(Kind.MISSING_TOOL, [f"picture of W against P not written: {e}"])]
        return [Finding(Kind.OBSERVED, [f"picture: P, W and W / P for the first rows of batch {batch}: {path}"],
                        dict(picture=str(path)))]


def draw(W: np.ndarray, P: np.ndarray, batch: int, label: str, path: Path) -> Path:
    plt = pyplot()
    rows = min(ROWS_SHOWN, W.shape[1])
    w, p = W[batch, :rows], P[batch, :rows]
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(p > 1e-6, w / p, np.nan)
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.2))
    fig.subplots_adjust(left=0.05, right=0.98, bottom=0.12, top=0.86, wspace=0.25)  # fixed: no layout solver to wait on
    top = max(float(p.max()), float(np.nanmax(w)) if np.isfinite(w).any() else 0.0)
    for ax, data, title in ((axes[0], p, "P = softmax(Q K^T / sqrt(d))"), (axes[1], w, "W, measured"),):
        shown = ax.imshow(data, aspect="auto", cmap="viridis", vmin=0, vmax=top or 1, interpolation="nearest")
        ax.set_title(title)
        fig.colorbar(shown, ax=ax)
    finite = ratio[np.isfinite(ratio) & (ratio > 0)]
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.5, 2.0)
    bound = max(abs(np.log10(max(lo, 1e-6))), abs(np.log10(max(hi, 1e-6))), 0.05)
    shown = axes[2].imshow(np.log10(np.where(ratio > 0, ratio, np.nan)), aspect="auto", cmap="coolwarm",
                           vmin=-bound, vmax=bound, interpolation="nearest")
    axes[2].set_title("log10(W / P) where P > 1e-6")
    fig.colorbar(shown, ax=axes[2])
    for ax in axes:
        ax.set_xlabel("key")
        ax.set_ylabel("query row")
    fig.suptitle(f"batch {batch}, rows 0..{rows - 1} of {label}", fontsize=10)
    image = io.BytesIO()
    fig.savefig(image, format="png", dpi=100)
    plt.close(fig)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(path) as f:
        f.write(image.getvalue())
    return path
