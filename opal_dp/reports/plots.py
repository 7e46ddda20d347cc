"""Figures of the internal reports: matplotlib off-screen, every figure titled as internal and returned as PNG."""

from __future__ import annotations

import io


def figure(ncols: int, figsize: tuple[float, float], **kwargs):
    """A figure with ``ncols`` axes, drawn off-screen (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(1, ncols, figsize=figsize, dpi=90, **kwargs)


def png(fig, title: str) -> bytes:
    """The figure as PNG bytes under ``title`` (say it is internal and not DP), then closed."""
    import matplotlib.pyplot as plt

    fig.suptitle(title)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    return buffer.getvalue()


def true_vs_released(points, title: str) -> bytes:
    """PNG: one panel per level (the keys of each method's points, in order), released against true count
    (log-log), one colour per method; ``points[method][level]``: (true counts, released counts)."""
    import numpy as np

    levels = tuple(next(iter(points.values())))
    fig, axes = figure(len(levels), (4.2 * len(levels), 3.6), squeeze=False)
    for ax, level in zip(axes[0], levels):
        top = 1.0
        for method, by_level in points.items():
            true, rel = (np.asarray(v) for v in by_level[level])
            keep = (true > 0) | (rel > 0)
            ax.scatter(true[keep] + 1, rel[keep] + 1, s=3, alpha=0.4, label=method)
            top = max(top, float(np.max(true, initial=0)), float(np.max(rel, initial=0)))
        ax.plot([1, top + 1], [1, top + 1], color="black", linewidth=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(level)
        ax.set_xlabel("true count + 1")
        ax.set_ylabel("released count + 1")
        ax.legend(fontsize=7, markerscale=3, loc="upper left")
    return png(fig, title)
