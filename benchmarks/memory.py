"""Peak resident memory of a process and all its descendants together (the pipeline's worker processes
included), sampled from ``/proc`` every 0.1 s in a background thread.

``os.wait4`` reports the largest single process of a tree, not their sum; with per-day worker processes
(``opal_dp.parallel``) the sum is what the machine must hold. A spike shorter than the sampling period can be
missed, so the reported peak is the larger of the sampled sum and the single-process maximum.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

PAGE = os.sysconf("SC_PAGE_SIZE")


def tree_rss_bytes(root: int) -> int:
    """Sum of the resident set sizes of ``root`` and its descendants now (0 once it has exited)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            fields = stat[stat.rindex(")") + 2:].split()
            pid = int(entry.name)
            children.setdefault(int(fields[1]), []).append(pid)
            rss[pid] = int(fields[21]) * PAGE  # field 24 of stat: resident pages
        except (OSError, ValueError, IndexError):
            continue  # exited while being read
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        total += rss.get(pid, 0)
        stack.extend(children.get(pid, []))
    return total


class TreeRssSampler:
    """``with TreeRssSampler(pid) as sampler: ...`` then ``sampler.peak_bytes``."""

    def __init__(self, pid: int, period_s: float = 0.1) -> None:
        self.pid, self.period_s, self.peak_bytes = pid, period_s, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            self.peak_bytes = max(self.peak_bytes, tree_rss_bytes(self.pid))

    def __enter__(self) -> TreeRssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
