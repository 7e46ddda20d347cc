"""The synthetic benchmark's peers (MST and AIM, smartnoise-synth) on the bounded card-day table.

The fit runs in the peers' own environment (``make synth-peers``, built by ``make test``); a run outside CI without
it skips the fitting test, CI fails it.
"""

from __future__ import annotations

import itertools
import os
from datetime import date

import numpy as np
import pandas as pd
import pytest

from benchmarks import synthetic_peers as sp
from opal_dp.core import ContributionBounds, PrivacyUnit
from opal_dp.core.accounting import zcdp_rho_for
from opal_dp.network import MODES, load_stops
from opal_dp.prep.binning import bin_trips, location_labels
from opal_dp.prep.bounding import keep_mask
from opal_dp.prep.ingest import ingest_file
from opal_dp.release.synthetic.archetypes import districts, trip_features
from opal_dp.reports import synthetic_score as score
from opal_dp.simulate.trips import generate_days

DAY = date(2016, 7, 26)


def _peer_python():
    """The peers' interpreter; outside CI a missing environment skips, in CI it fails."""
    python = sp.peer_python()
    if python is None:
        if os.environ.get("CI"):
            pytest.fail("the peers' environment is missing: `make test` builds it (make synth-peers)")
        pytest.skip("the peers' environment is not built (make synth-peers)")
    return python


@pytest.fixture(scope="module")
def setting(tmp_path_factory):
    stops = load_stops()
    ((path, _),) = generate_days([DAY], tmp_path_factory.mktemp("raw"), seed=5, scale=0.001, stops=stops)
    binned = bin_trips(ingest_file(path, stops).accepted, stops)
    bounds = ContributionBounds()
    kept = binned.loc[keep_mask(binned, DAY, PrivacyUnit.CARD_PERIOD, bounds, b"\x01" * 32)]
    return stops, districts(stops, location_labels(stops)), {DAY.isoformat(): kept}, bounds


def test_card_day_table_holds_each_kept_card_day_once_with_its_trips_in_tap_on_order(setting):
    _, dist, kept, bounds = setting
    m = bounds.max_trips_per_card_day
    table = sp.card_day_table(kept, [DAY.isoformat()], dist, m)
    trips = trip_features(kept[DAY.isoformat()], dist)
    sizes = sp.cardinality(1, dist, m)
    assert list(table.columns) == list(sizes) and len(table) == trips["card_id"].nunique()
    assert all(table[c].between(0, n - 1).all() for c, n in sizes.items())
    filled = sum((table[f"mode_{j}"] != len(MODES)).to_numpy() for j in range(1, m + 1))
    assert (filled == table["trips"]).all() and filled.sum() == len(trips)
    first = trips.sort_values(["card_id", "window"], kind="stable").groupby("card_id").first()
    assert sorted(zip(first["hour"], first["on_district"])) == sorted(zip(table["hour_1"], table["on_1"]))
    rows = sp.scored_rows(table, m)  # back to one row per trip, in the scored columns
    assert len(rows) == len(trips) and list(rows.columns) == list(score.COLUMNS)
    assert sorted(rows["card_day_trips"]) == sorted(np.repeat(table["trips"], table["trips"]))


def test_peer_budget_is_the_card_budget_by_group_privacy():
    """A card has at most D rows: zCDP group privacy costs D² rho per row, which must equal the card's rho."""
    for epsilon, days in ((8.0, 14), (2.0, 7)):
        assert sp.peer_rho(epsilon, 1e-6, days) * days**2 == pytest.approx(zcdp_rho_for(epsilon, 1e-6), rel=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("method", sp.PEERS)
def test_peer_fits_the_card_day_table_and_samples_rows_in_its_public_domain(setting, tmp_path, method):
    """The peer path end to end on four small columns of the table (the benchmark fits all of them; MST and AIM
    take minutes on the full width), at epsilon 8 per card-day."""
    python = _peer_python()
    _, dist, kept, bounds = setting
    columns = ["archetype", "trips", "mode_1", "hour_1"]
    table = sp.card_day_table(kept, [DAY.isoformat()], dist, bounds.max_trips_per_card_day)[columns]
    sizes = {c: n for c, n in sp.cardinality(1, dist, bounds.max_trips_per_card_day).items() if c in columns}
    sample, measured = sp.fit_peer(method, table, sizes, sp.peer_rho(8.0, 1e-6, 1), 1e-6, tmp_path, python)
    assert list(sample.columns) == columns and len(sample) == len(table)
    assert all(sample[c].between(0, n - 1).all() for c, n in sizes.items())
    assert measured["fit_s"] > 0 and measured["peak_rss_bytes"] > 0 and measured["epsilon_per_row"] > 0
    assert not (tmp_path / "table.parquet").exists()  # the private table is removed after the fit
    # at epsilon 8 the peer has learnt the 2-way marginals: far closer to the truth than independent uniform columns
    rng = np.random.default_rng(0)
    uniform = pd.DataFrame({c: rng.integers(0, sizes[c], len(table)) for c in columns})
    pairs = [list(p) for p in itertools.combinations(columns, 2)]
    fitted = np.mean([score.marginal_l1(table, sample, p) for p in pairs])
    assert fitted < 0.5 * np.mean([score.marginal_l1(table, uniform, p) for p in pairs])


def test_a_peer_past_its_time_limit_is_stopped_and_its_private_table_removed(setting, tmp_path):
    python = _peer_python()
    _, dist, kept, bounds = setting
    table = sp.card_day_table(kept, [DAY.isoformat()], dist, bounds.max_trips_per_card_day)
    sizes = sp.cardinality(1, dist, bounds.max_trips_per_card_day)
    sample, measured = sp.fit_peer("aim", table, sizes, 0.1, 1e-6, tmp_path, python, timeout_s=0.5)
    assert sample is None and measured == {"timed_out_s": 0.5}
    assert not (tmp_path / "table.parquet").exists() and not (tmp_path / "aim.parquet").exists()
