"""Fit one maintained peer synthesizer (MST or AIM, ``smartnoise-synth``) on a card-day table; runs in the peer
environment (``make synth-peers``), which cannot share the project's: smartnoise-synth pins ``opendp<0.15``.

``python benchmarks/synthetic_peer_child.py METHOD TABLE DOMAIN OUT``: ``TABLE`` a Parquet file of small integer
codes, ``DOMAIN`` a JSON file ``{"cardinality": {column: size}, "rho": r, "delta": d}`` where ``rho`` is the
zCDP budget *per row* the peer may spend; ``OUT`` receives the synthetic rows (Parquet) and ``OUT.json`` the fit
and sample times and this process's peak RSS. Imports nothing of the project (it is not installed here).

Budget: smartnoise-synth takes (epsilon, delta) and spends ``rho = cdp_rho(epsilon, delta)`` (its own
conversion); the epsilon handed to it is the smallest whose ``cdp_rho`` at ``delta`` reaches ``rho`` (bisection),
so the peer spends at most the ``rho`` asked for, to within the bisection's 1e-9 relative tolerance, rounded
down. Domain: every column's categories are the public codes ``0..size-1``, fitted on a public frame (no
preprocessing budget, no category read from the data).
"""

from __future__ import annotations

import json
import resource
import sys
import time

import pandas as pd


def epsilon_for(rho: float, delta: float) -> float:
    """The epsilon at which smartnoise-synth's own conversion spends ``rho`` (at most) at ``delta``."""
    from snsynth.utils import cdp_rho

    low, high = 1e-6, 1.0
    while cdp_rho(high, delta) < rho:
        high *= 2
    while high - low > 1e-9 * high:
        mid = (low + high) / 2
        low, high = (mid, high) if cdp_rho(mid, delta) < rho else (low, mid)
    return low


def main(method: str, table: str, domain_file: str, out: str) -> None:
    from snsynth import Synthesizer
    from snsynth.transform import LabelTransformer, TableTransformer

    domain = json.loads(open(domain_file).read())
    sizes = domain["cardinality"]
    data = pd.read_parquet(table)[list(sizes)]
    public = pd.DataFrame({c: [i % n for i in range(max(sizes.values()))] for c, n in sizes.items()})
    transformer = TableTransformer([LabelTransformer(nullable=False) for _ in sizes])
    transformer.fit(public)
    epsilon = epsilon_for(domain["rho"], domain["delta"])
    started = time.perf_counter()
    synth = Synthesizer.create(method, epsilon=epsilon, delta=domain["delta"], verbose=False)
    synth.fit(data, transformer=transformer)
    fitted = time.perf_counter()
    sample = synth.sample(len(data))  # the peer's default size: as many rows as it was fitted on
    sampled = time.perf_counter()
    pd.DataFrame(sample, columns=list(sizes)).astype("int64").to_parquet(out, index=False)
    with open(out + ".json", "w") as f:
        json.dump({"fit_s": fitted - started, "sample_s": sampled - fitted, "epsilon_per_row": epsilon,
                   "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}, f)


if __name__ == "__main__":
    main(*sys.argv[1:5])
