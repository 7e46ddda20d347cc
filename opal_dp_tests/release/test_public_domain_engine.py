"""The public-domain design through the release engine: a tap's three tables are drawn together, add up exactly
with their remainder rows, are charged at delta 0 (Laplace), and a partially stored tap is never completed by
redrawing the missing tables."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from opal_dp.core import PrivacyLedger
from opal_dp.prep.binning import location_labels
from opal_dp.release.marginals.checks import DESIGN_CHECKS, ReleaseUnderCheck, blocking_problems
from opal_dp.release.marginals import engine
from opal_dp.release.marginals.engine import PartialTap, release_partitions
from opal_dp.release.marginals.tables import MARGINALS
from opal_dp.release.marginals.plan import build_plan
from opal_dp.release.marginals.public_domain import OTHER, sum_problems
from opal_dp.release.marginals.open_data import to_open_data
from opal_dp.release.periods import Periods

STOPS = pd.DataFrame({
    "stop_id": [1, 2, 3, 4, 5],
    "mode": ["bus", "bus", "bus", "train", "train"],
    "name": ["a", "b", "c", "Central", "Manly"],
    "postcode": ["2000", "2010", "2010", "2000", "2095"],
    "lat": [0.0] * 5, "lon": [0.0] * 5,
})
LABELS = ["-1", "2000", "2010", "Central", "Manly"]
EPSILON = {m.name: m.default_epsilon for m in MARGINALS}
DELTA = {m.name: 1 / 8e6 for m in MARGINALS}
KEY = b"k" * 32
BIG_CAPS = {u: (100.0, 1e-3) for u in ("trip", "card_day", "card_period")}


def bus_partition(n: int, seed: int = 0) -> pd.DataFrame:
    """Bus trips at 2000/2010; a fifth without a tap-off (-1, -1)."""
    rng = np.random.default_rng(seed)
    off = rng.random(n) < 0.8
    return pd.DataFrame({
        "tap_on_window": rng.integers(28, 34, n).astype("int16"),
        "tap_on_loc": pd.Categorical.from_codes(rng.integers(1, 3, n), categories=LABELS),
        "tap_off_window": np.where(off, rng.integers(30, 36, n), -1).astype("int16"),
        "tap_off_loc": pd.Categorical.from_codes(np.where(off, rng.integers(1, 3, n), 0), categories=LABELS),
    })


def plan(unit="trip"):
    return build_plan(unit, EPSILON, DELTA, design="public_domain", stops=STOPS, periods=Periods(("2016-07-25",)))


def test_a_public_domain_release_adds_up_and_is_pure(tmp_path):
    ledger = PrivacyLedger(tmp_path / "ledger.sqlite", BIG_CAPS)
    parts = {"2016-07-25|bus": bus_partition(4000)}
    out = release_partitions(parts, plan(), ledger, tmp_path, "run-1", KEY)
    assert {c.delta for c in ledger.charges()} == {0.0} and len(ledger.charges()) == 6
    tables = to_open_data({name: {k: r[name].frame for k, r in out.items()} for name in out["2016-07-25|bus"]})
    assert sum_problems(tables) == []
    listed = tables["time-loc"][(tables["time-loc"]["time"] != OTHER) & (tables["time-loc"]["loc"] != OTHER)]
    assert (listed["count"] >= plan().tau).all()


def test_a_partially_stored_tap_is_refused_not_redrawn(tmp_path, monkeypatch):
    ledger = PrivacyLedger(tmp_path / "ledger.sqlite", BIG_CAPS)
    parts = {"2016-07-25|bus": bus_partition(3000)}
    real, written = engine.write_parquet_exclusive, []

    def crash_after_first(frame, path):  # the run dies after storing one table of the first tap
        if written:
            raise KeyboardInterrupt("killed")
        written.append(path)
        return real(frame, path)

    monkeypatch.setattr(engine, "write_parquet_exclusive", crash_after_first)
    with pytest.raises(KeyboardInterrupt):
        release_partitions(parts, plan(), ledger, tmp_path, "run-1", KEY)
    monkeypatch.setattr(engine, "write_parquet_exclusive", real)
    stored_before = sorted((tmp_path / "releases").rglob("*.parquet"))
    assert stored_before == written

    earlier = {"2016-07-24|bus": bus_partition(1000, seed=5), **parts}  # a new partition served first
    with pytest.raises(PartialTap, match=r"2016-07-25\|bus tap-on"):
        release_partitions(earlier, plan(), ledger, tmp_path, "run-2", KEY)
    assert sorted((tmp_path / "releases").rglob("*.parquet")) == stored_before  # nothing drawn, nothing redrawn
    assert all(d.status == "pending" for d in ledger.draws())

    out = release_partitions(parts, plan(), ledger, tmp_path, "run-3", KEY, fresh=True)  # charged anew
    assert len(ledger.charges("trip", "2016-07-25|bus")) == 12
    tables = to_open_data({name: {k: r[name].frame for k, r in out.items()} for name in out["2016-07-25|bus"]})
    assert sum_problems(tables) == []


def test_a_rerun_reuses_the_whole_tap(tmp_path):
    ledger = PrivacyLedger(tmp_path / "ledger.sqlite", BIG_CAPS)
    parts = {"2016-07-25|bus": bus_partition(2000)}
    first = release_partitions(parts, plan("card_day"), ledger, tmp_path, "run-1", KEY)
    again = release_partitions(parts, plan("card_day"), ledger, tmp_path, "run-2", KEY)
    for name, result in again["2016-07-25|bus"].items():
        assert result.reused
        pd.testing.assert_frame_equal(result.frame, first["2016-07-25|bus"][name].frame)


def under_checks(tmp_path, mutate=None):
    """The blocking checks' view of one released public-domain partition; ``mutate(name, frame)`` tampers."""
    ledger = PrivacyLedger(tmp_path / "ledger.sqlite", BIG_CAPS)
    p = plan()
    out = release_partitions({"2016-07-25|bus": bus_partition(3000)}, p, ledger, tmp_path, "run-1", KEY)
    spend = ledger.spend("trip", "2016-07-25|bus")
    labels = frozenset(location_labels(STOPS))
    checks = []
    for name, r in out["2016-07-25|bus"].items():
        frame = r.frame if mutate is None else mutate(name, r.frame.copy())
        checks.append(ReleaseUnderCheck("2016-07-25|bus", r.marginal, frame, r.truth, p.mechanisms[name].describe(),
                                        ledger.draws([r.draw.id])[0], r.charge, spend, BIG_CAPS["trip"], labels,
                                        p.domains["bus", r.marginal.tap]))
    return checks


def failing(problems):
    return {name for name, found in problems.items() if found}


def test_the_public_domain_checks_pass_on_a_release_and_catch_tampering(tmp_path):
    assert blocking_problems(under_checks(tmp_path / "a")) == {n: [] for n in DESIGN_CHECKS["public_domain"]}

    def outside(name, frame):  # a cell at a train station in the bus joint
        if name == "tap_on_time_loc":
            frame["loc"] = frame["loc"].cat.add_categories(["Central"]) if "Central" not in frame["loc"].cat.categories \
                else frame["loc"]
            frame.loc[0, "loc"] = "Central"
        return frame

    assert "within_public_domain" in failing(blocking_problems(under_checks(tmp_path / "b", outside)))

    def below_tau(name, frame):  # a listed cell below tau; the one-way total moved with it
        if name == "tap_on_time_loc":
            listed = (frame["time_window"] >= 0) & (frame["loc"] != OTHER)
            frame.loc[listed.idxmax(), "count"] = 1
        return frame

    assert {"listed_counts_reach_tau", "sums_exact"} <= failing(blocking_problems(under_checks(tmp_path / "c", below_tau)))

    def one_more(name, frame):  # one trip more in time.csv than in its time-loc rows
        if name == "tap_off_time":
            frame.loc[0, "count"] += 1
        return frame

    assert failing(blocking_problems(under_checks(tmp_path / "d", one_more))) == {"sums_exact"}
