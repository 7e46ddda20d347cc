"""The peers ``make bench`` compares against (``benchmarks.peers``), each run on one small generated day through
the functions the benchmark calls: six tables of the floor's bins, every count the true one plus noise (so every
total within noise of the true total of its cells), and every large cell released.
A renamed setting, a changed peer API or a mis-keyed bin fails here instead of in a scale-1.0 benchmark.

The peers are the ``bench`` extra, in the lock that ``make test`` installs: in CI (``CI`` set) a missing peer
fails the test; elsewhere it is skipped with the reason.
"""

from __future__ import annotations

import math
import os
from datetime import date

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from benchmarks import peers
from benchmarks.floor import TRIP_RELEASE, Labels, bin_day, day_histograms
from opal_dp.release.marginals.tables import MARGINALS
from opal_dp.simulate.trips import generate_days

KEPT_MODES = ["bus", "train"]
SCALE = 0.01  # about 20,000 trips: cells of the one-way marginals well above every peer's threshold
FALSE_FAILURE = 1e-7  # per peer, on OS randomness: the three peers together at most 3e-7 (QUALITY.md)
# Every peer's Laplace noise on a count has scale at most 2 / epsilon_j, epsilon_j the marginal's share of the
# nominal budget: OpenDP (both front ends) draws integer Laplace of scale 2 / epsilon_j (replace-one, l1
# sensitivity 2; its Polars summary says so), PipelineDP continuous Laplace of 1 / epsilon_j (add/remove).
SENSITIVITY = 2
# Every peer's threshold is below 200 less the noise bound (about 50): OpenDP's Polars front end picks 34 and our
# mechanism 35 at these budgets, PipelineDP less; so a cell of 200+ is released but for the noise event above.
RELEASED_FOR_SURE = 200


# What each peer needs beyond opal_dp's own dependencies (the bench extra).
EXTRA_MODULE = {"opendp_polars": "polars", "pipelinedp": "pipeline_dp"}


def _require(peer: str) -> None:
    if os.environ.get("CI") or peer not in EXTRA_MODULE:
        return  # CI installs the lock with the peers (make test): an import error must fail the test
    pytest.importorskip(EXTRA_MODULE[peer], reason="the bench extra is not installed here (make test installs the lock)")


@pytest.fixture(scope="module")
def day(tmp_path_factory):
    """The day's bus and train trips: two modes, not adjacent in the mode order, so a peer that mixes up modes
    fails; not all four, because OpenDP's Polars front end pays about 4 s per query, six queries a mode."""
    ((path, _),) = generate_days([date(2016, 7, 25)], tmp_path_factory.mktemp("peers") / "raw", seed=5,
                                 scale=SCALE)
    trips = pq.read_table(path)
    trips = trips.filter(pc.is_in(trips["mode"], pa.array(KEPT_MODES)))
    pq.write_table(trips, path)
    labels = Labels.load()
    return path, trips.num_rows, day_histograms(bin_day(path, labels), labels.count)


def _noise_bound(epsilon: float, cells: int) -> float:
    """P(|X| >= t) <= 2 exp(-t / b) for X continuous or integer Laplace of scale b, so t = b ln(2 cells / p) is
    exceeded with probability at most p / cells per cell: at most p = 1e-7 over all ``cells`` of a peer."""
    return SENSITIVITY / epsilon * math.log(2 * cells / FALSE_FAILURE)


@pytest.mark.slow(60)
@pytest.mark.parametrize("name", sorted(peers.PEERS))
def test_peer_releases_the_true_counts_plus_noise(name, day):
    _require(name)
    path, rows, truth = day
    result = peers.PEERS[name]([path])

    assert (result.name, result.days, result.rows) == (name, 1, rows)
    assert set(result.tables) == {m.name for m in MARGINALS}
    assert result.released_bins == sum(len(t) for t in result.tables.values()) > 0
    assert result.seconds > 0
    if name in peers.EXTRAPOLATE_BY:  # the row-level peers run on leading days and are extrapolated to 14
        assert result.full_seconds(14 * rows, 14) > result.seconds
    epsilon = TRIP_RELEASE.budget()[0]
    cells = sum(np.count_nonzero(counts) for counts in truth.values())
    for marginal, table in result.tables.items():
        counts = truth[marginal]
        assert list(table.columns) == peers.COLUMNS
        assert set(table["date"]) == {path.stem.removeprefix("trips_")}
        modes, bins = table["mode"].to_numpy(int), table["bin"].to_numpy(int)
        assert ((0 <= modes) & (modes < counts.shape[0]) & (0 <= bins) & (bins < counts.shape[1])).all(), marginal
        assert not table.duplicated(["mode", "bin"]).any(), marginal
        true = counts[modes, bins]
        assert (true > 0).all(), f"{name} released a bin of {marginal} that no trip is in"
        error = np.abs(table["count"].to_numpy(float) - true)
        assert error.max(initial=0) <= _noise_bound(epsilon[marginal], cells), marginal
        big = counts >= RELEASED_FOR_SURE
        assert big.any() or "time_loc" in marginal, f"the day is too small to test {marginal}"
        released = np.zeros_like(counts, dtype=bool)
        released[modes, bins] = True
        assert released[big].all(), f"{name} suppressed a cell of {marginal} with a count of {RELEASED_FOR_SURE}+"
