"""``od.csv`` from the OD hierarchy (``release.od.hierarchy_publish``): the gate refuses rows that are not the fit
of the ledger's stored draw, the file holds every level with exact sums, and the published-file validation catches
a file that no longer adds up or leaves the public domain."""

from __future__ import annotations

import pandas as pd
import pytest

from opal_dp.core import PrivacyLedger, SeededBits
from opal_dp.core.units import PrivacyUnit
from opal_dp.release.od.hierarchy import HierarchyPlan, OdDomain, release_od_hierarchy, sum_problems
from opal_dp.release.od.hierarchy_publish import (
    OD_HIERARCHY_COLUMNS,
    hierarchy_gate,
    hierarchy_draw_ids,
    hierarchy_statement,
    hierarchy_table,
    stored_totals,
    totals_table,
    validate_hierarchy_csv,
)
from opal_dp.network import load_stops
from opal_dp.prep.sequences import TripAlphabet
from opal_dp_tests.release.test_od_hierarchy import BUDGET, TOTALS, _store, _trips

DAY = "2016-07-25"


@pytest.fixture
def released(tmp_path):
    """One date released through the ledger: ``(ledger, plan, {date: rows with draw_id})``."""
    alphabet = TripAlphabet.from_stops(load_stops())
    ledger = PrivacyLedger(tmp_path / "ledger.sqlite", {"card_day": (10.0, 1e-6)})
    plan = HierarchyPlan(PrivacyUnit.CARD_DAY, BUDGET, OdDomain.from_stops(load_stops(), alphabet), TOTALS)
    out = list(release_od_hierarchy({DAY: _store(_trips(alphabet), DAY, tmp_path)}, plan, ledger, tmp_path, "r1",
                                    b"k" * 32, bits=SeededBits(5)))
    frame = pd.concat([d.rows.assign(draw_id=d.draw.id) for _, _, d in out], ignore_index=True)
    return ledger, plan, {DAY: frame}


def test_the_gate_passes_the_fit_of_the_stored_draw_and_refuses_anything_else(released, tmp_path):
    ledger, plan, frames = released
    problems, totals = hierarchy_gate(frames, ledger, tmp_path, plan.domain, plan.tau)
    assert problems == []
    assert totals.equals(totals_table(stored_totals(frames, ledger, tmp_path)))  # the same reads of the draws
    assert list(totals["mode"]) == [m for m in sorted(plan.domain.modes) for _ in ("on", "off")]
    listed = frames[DAY].index[(frames[DAY]["level"] == "location") & (frames[DAY]["origin"] != "other")][0]
    moved = {DAY: frames[DAY].copy()}
    moved[DAY].loc[listed, "count"] += 1  # one trip more in a listed pair: no longer the fit, no longer exact
    problems, totals = hierarchy_gate(moved, ledger, tmp_path, plan.domain, plan.tau)
    assert totals is None  # nothing to publish from a gate with problems
    assert any("not the fit of the ledger's stored draw" in p for p in problems)
    assert any("do not sum to its district row" in p for p in problems)
    other_tau, _ = hierarchy_gate(frames, ledger, tmp_path, plan.domain, plan.tau + 1)  # a threshold not recorded
    assert other_tau and all("not the fit" in p for p in other_tau)
    unknown = {DAY: frames[DAY].assign(draw_id=10_000)}
    assert all("no completed ledger draw" in p for p in hierarchy_gate(unknown, ledger, tmp_path, plan.domain,
                                                                       plan.tau)[0])


def test_od_csv_holds_every_level_exactly_and_validates(released, tmp_path):
    ledger, plan, frames = released
    table = hierarchy_table(frames)
    assert list(table.columns) == OD_HIERARCHY_COLUMNS and set(table["date"]) == {"20160725"}
    rank = table["level"].map({"mode": 0, "district": 1, "location": 2})
    assert (table.groupby(["date", "mode"])["level"].first() == "mode").all()  # the mode row first, then by level
    assert all(r.is_monotonic_increasing for _, r in rank.groupby([table["date"], table["mode"]]))
    assert (table.loc[table["level"] != "mode", "count"] > 0).all()
    assert sum_problems(table) == []
    section = hierarchy_statement(hierarchy_draw_ids(frames), ledger)
    assert section["rho_per_date"] == BUDGET.rho and section["listing_threshold"] == plan.tau
    assert section["date_runs"] == [["20160725", "20160725"]] and section["draws"]["count"] == len(plan.domain.modes)
    table.to_csv(tmp_path / "od.csv", index=False)
    assert validate_hierarchy_csv(tmp_path, ["20160725"], plan.domain) == []
    assert validate_hierarchy_csv(tmp_path, ["20160726"], plan.domain) == [
        "od.csv: a date that privacy.json does not list"]
    broken = table.copy()
    broken.loc[broken.index[broken["level"] == "district"][0], "count"] += 5
    broken.to_csv(tmp_path / "od.csv", index=False)
    assert any("do not sum" in p for p in validate_hierarchy_csv(tmp_path, ["20160725"], plan.domain))
    outside = table.copy()
    outside.loc[outside.index[(outside["level"] == "location") & (outside["origin"] != "other")][0],
                "origin"] = "Nowhere"
    outside.to_csv(tmp_path / "od.csv", index=False)
    assert any("outside the public domain" in p for p in validate_hierarchy_csv(tmp_path, ["20160725"],
                                                                                  plan.domain))
    zero = table.copy()
    zero.loc[zero.index[zero["level"] == "district"][0], "count"] = 0
    zero.to_csv(tmp_path / "od.csv", index=False)
    assert any("positive integer" in p for p in validate_hierarchy_csv(tmp_path, ["20160725"], plan.domain))
    table.drop(columns=["level"]).to_csv(tmp_path / "od.csv", index=False)
    assert validate_hierarchy_csv(tmp_path, ["20160725"], plan.domain)[0].startswith("od.csv: columns must be")


def test_a_hierarchy_rows_draw_holds_every_trip_once_per_level(released):
    """Every counted trip (300 card-days, 550 trips, none over the pair bound) is in one row per level: each level
    of each mode sums to the mode row, and the mode rows are the trips up to their noise (sigma 9.5 each: 80 is
    over 5.9 sigma of their sum, a false failure below 1e-8; the draw is seeded anyway)."""
    _, _, frames = released
    frame = frames[DAY]
    for _, part in frame.groupby("mode"):
        total = int(part.loc[part["level"] == "mode", "count"].iloc[0])
        assert int(part.loc[part["level"] == "district", "count"].sum()) == total
        assert int(part.loc[part["level"] == "location", "count"].sum()) == total
    assert abs(int(frame.loc[frame["level"] == "mode", "count"].sum()) - 550) <= 80
