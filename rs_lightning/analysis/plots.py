"""PNG plots of certification results (matplotlib, headless)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from rs_lightning.smoothing.certificate import L2, LABELS, STEPS  # noqa: E402

from .metrics import ECDF_GRID, certified_accuracy, pa_ecdf  # noqa: E402


def place_legend(ax, entries: int, **kwargs) -> None:
    """Inside the axes for a few curves; beside them (right, the figure widened to make room) for more, so no
    curve is hidden. Call before ``tight_layout``."""
    if entries > 4:
        width, height = ax.figure.get_size_inches()
        ax.figure.set_size_inches(width + 4.0, height)
        ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, **kwargs)
    else:
        ax.legend(**kwargs)


def certified_accuracy_figure(
    runs: Mapping[str, tuple[np.ndarray, np.ndarray]],
    max_radius: float | None = None,
    norm: str = L2,
    bands: Mapping[str, float] | None = None,
):
    """Certified accuracy vs radius in ``norm``; ``runs`` maps a label to ``(radius, correct)`` arrays;
    ``bands`` maps a label to the half-width of its simultaneous band (the DKW ε of
    :func:`~rs_lightning.analysis.uncertainty.certified_accuracy_bands`), shaded around its curve."""
    fig, ax = plt.subplots(figsize=(5, 3.5))
    floor = STEPS[norm]
    top = max_radius or max([float(np.max(r, initial=0.0)) for r, _ in runs.values()] + [floor]) * 1.05
    grid = np.linspace(0.0, top, 400)
    for label, (radius, correct) in runs.items():
        curve = certified_accuracy(radius, correct, grid)
        (line,) = ax.plot(grid, curve, label=label)
        if bands and label in bands:
            low, high = np.clip(curve - bands[label], 0, 1), np.clip(curve + bands[label], 0, 1)
            ax.fill_between(grid, low, high, color=line.get_color(), alpha=0.18, linewidth=0)
    ax.set(
        xlabel=f"radius ({LABELS[norm]}, [0,1] pixel units)",
        ylabel="certified accuracy",
        ylim=(0, 1.02),
        xlim=(0, top),
    )
    ax.grid(alpha=0.3)
    place_legend(ax, len(runs))
    fig.tight_layout()
    return fig


def pa_ecdf_figure(runs: Mapping[str, np.ndarray], grid=ECDF_GRID, bands: Mapping | None = None):
    """The pA ECDF y(x) = share of inputs with p̂A >= x (Sun et al., ICML 2025); ``runs`` maps label -> p̂A;
    ``bands`` maps a label to its :class:`~rs_lightning.analysis.uncertainty.Band` (shaded)."""
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for label, pa in runs.items():
        (line,) = ax.step(grid, pa_ecdf(pa, grid), where="post", label=label)
        band = (bands or {}).get(label)
        if band is not None:
            ax.fill_between(
                band.x, band.lower, band.upper, step="post", color=line.get_color(), alpha=0.18, linewidth=0
            )
    ax.set(
        xlabel="$p_A$ (accuracy under noise)",
        ylabel="share of inputs with $\\hat p_A \\geq x$",
        ylim=(0, 1.02),
        xlim=(float(grid[0]), float(grid[-1])),
    )
    ax.grid(alpha=0.3)
    place_legend(ax, len(runs))
    fig.tight_layout()
    return fig


def save_figure(fig, path: str | Path) -> Path:
    """Write ``fig`` as PNG and close it."""
    path = Path(path)
    fig.savefig(path, dpi=120, bbox_inches="tight")  # keeps a legend placed beside the axes
    plt.close(fig)
    return path
