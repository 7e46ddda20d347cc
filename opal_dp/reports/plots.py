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
