"""The picture of a measurement: P, the program's W and W / P for the first rows of one batch,
side by side (one PNG; its path is printed under fa run's table and fa report shows it)."""
from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from ...files import atomic_file
from ...report.charts import pyplot

ROWS_SHOWN = 64


def draw(W: np.ndarray, P: np.ndarray, batch: int, label: str, path: Path) -> Path:
    plt = pyplot()
    rows = min(ROWS_SHOWN, W.shape[1])
    w, p = W[batch, :rows], P[batch, :rows]
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(p > 1e-6, w / p, np.nan)
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.2), constrained_layout=True)
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
