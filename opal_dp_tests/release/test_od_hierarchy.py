"""The hierarchical OD release (``release.od.hierarchy``): a domain from the stop list only, the per-cell bound,
one ledger charge per date for all its modes (and the person account), exact totals and one row per trip."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opal_dp.core import BudgetExceeded, PrivacyLedger, SeededBits
from opal_dp.core.totals import TotalsBudget
from opal_dp.core.hierarchy import HierarchyBudget
from opal_dp.core.units import PrivacyUnit
from opal_dp.network import MODES, load_stops
from opal_dp.prep.sequences import TripAlphabet, to_frame
from opal_dp.private_files import write_parquet_atomic
from opal_dp.release.od.hierarchy import (
    OTHER,
    HierarchyPlan,
    OdDomain,
    domain_problems,
    release_od_hierarchy,
    sum_problems,
)

BUDGET = HierarchyBudget(0.5, (0.1, 0.3, 0.6), max_items=3, max_per_cell=1)
TOTALS = TotalsBudget(0.25, max_items=3, max_per_mode=2)


@pytest.fixture(scope="module")
def alphabet() -> TripAlphabet:
    return TripAlphabet.from_stops(load_stops())


@pytest.fixture(scope="module")
def domain(alphabet) -> OdDomain:
    return OdDomain.from_stops(load_stops(), alphabet)


def test_the_domain_is_every_location_pair_of_the_stop_list(domain, alphabet):
    assert domain.cells == alphabet.size  # every (mode, origin, destination) symbol, nothing else
    symbols = alphabet.symbols
    for i in (0, alphabet.size // 2, alphabet.size - 1):
        dom = domain.modes[symbols["mode"].iloc[i]]
        o, d = divmod(int(domain.symbol_cell[i]), len(dom.destinations))
        assert (dom.origins[o], dom.destinations[d]) == (symbols["origin"].iloc[i], symbols["destination"].iloc[i])


def test_a_card_day_keeps_at_most_max_per_cell_trips_of_one_pair(domain, alphabet):
    seqs = np.array([[5, 5, 9, 5], [5, -1, -1, -1]])
    mode = alphabet.symbols["mode"].iloc[5]
    one, two = domain.counts(seqs, 1)[mode], domain.counts(seqs, 2)[mode]
    cell = domain.symbol_cell[5]
    assert one[cell] == 2 and two[cell] == 3 and one.sum() == 3 and two.sum() == 4
    with pytest.raises(ValueError, match="outside the public OD alphabet"):
        domain.counts(np.array([[alphabet.size]]), 1)


@given(st.lists(st.lists(st.integers(0, 34), min_size=4, max_size=4), max_size=25), st.integers(1, 3))
@settings(max_examples=100, deadline=None)
def test_the_totals_count_each_card_day_s_first_trips_of_a_mode_and_no_padding(domain, rows, max_per_mode):
    """``OdDomain.totals`` against a count trip by trip: padding is no trip and no tap-off, of no mode."""
    symbols = np.array([-1, *range(0, 40, 3), *range(domain.symbol_mode.size - 20, domain.symbol_mode.size)])
    seqs = symbols[np.array(rows, dtype=np.int64).reshape(-1, 4)]  # PAD, and symbols of every mode and both taps
    expected = {m: [0, 0] for m in domain.modes}
    for row in seqs.tolist():
        seen = {}
        for symbol in row:
            if symbol == -1:
                continue
            mode = MODES[domain.symbol_mode[symbol]]
            seen[mode] = seen.get(mode, 0) + 1
            if seen[mode] <= max_per_mode:
                expected[mode][0] += 1
                expected[mode][1] += bool(domain.symbol_off[symbol])
    assert {m: c.tolist() for m, c in domain.totals(seqs, max_per_mode).items()} == expected
    with pytest.raises(ValueError, match="outside the public OD alphabet"):
        domain.totals(np.array([[domain.symbol_mode.size]]), max_per_mode)


def _store(seqs, day, root):
    path = root / "sequences" / f"{day}.parquet"
    write_parquet_atomic(to_frame(np.asarray(seqs, dtype=np.int32)), path)
    return path


def _trips(alphabet) -> np.ndarray:
    """300 card-days: a busy pair, a quiet one, a pair of another mode."""
    busy, quiet = 0, 1
    other = int(np.flatnonzero(alphabet.symbols["mode"] != alphabet.symbols["mode"].iloc[0])[0])
    rows = [[busy, other, -1]] * 250 + [[quiet, -1, -1]] * 3 + [[busy, -1, -1]] * 47
    return np.array(rows)


def test_one_charge_per_date_for_all_its_modes_and_exact_rows(tmp_path, alphabet, domain):
    ledger = PrivacyLedger(tmp_path / "ledger.sqlite", {"card_day": (10.0, 1e-6)})
    plan = HierarchyPlan(PrivacyUnit.CARD_DAY, BUDGET, domain, TOTALS)
    path = _store(_trips(alphabet), "2016-07-25", tmp_path)
    out = list(release_od_hierarchy({"2016-07-25": path}, plan, ledger, tmp_path, "r1", b"k" * 32,
                                    bits=SeededBits(1)))
    assert sorted(m for _, m, _ in out) == sorted(domain.modes)
    assert len({d.charge.id for _, _, d in out}) == 1 and sorted({d.decision for _, _, d in out}) == ["charge", "join"]
    assert ledger.spend("card_day", "2016-07-25").rho == pytest.approx(BUDGET.rho + TOTALS.rho)  # levels and totals
    person = ledger.person_spend("2016-07-25", "2016-07-25")  # the person account is charged too
    assert [c.marginal for c in person.charges] == ["od_hierarchy"] and person.guarantee.rho == pytest.approx(0.75)
    frame = pd.concat([d.rows for _, _, d in out], ignore_index=True)
    assert sum_problems(frame) == [] and domain_problems(frame, domain) == []
    busy = alphabet.symbols.iloc[0]
    listed = frame[(frame["level"] == "location") & (frame["origin"] == busy["origin"])
                   & (frame["destination"] == busy["destination"])]
    assert len(listed) == 1 and abs(int(listed["count"].iloc[0]) - 297) < 40  # sigma 2.2 on the finest level
    quiet = alphabet.symbols.iloc[1]
    assert not ((frame["origin"] == quiet["origin"]) & (frame["destination"] == quiet["destination"])).any()
    assert (frame.loc[frame["origin"] == OTHER, "destination"] == OTHER).all()
    again = list(release_od_hierarchy({"2016-07-25": path}, plan, ledger, tmp_path, "r2", b"k" * 32))
    assert all(d.decision == "reuse" for _, _, d in again)  # same input: the stored draws, no new noise
    assert pd.concat([d.rows for _, _, d in again], ignore_index=True).equals(frame)


def test_the_ledger_refuses_a_hierarchy_over_the_cap_before_any_noise(tmp_path, alphabet, domain):
    ledger = PrivacyLedger(tmp_path / "ledger.sqlite", {"card_day": (1.0, 1e-6)})  # rho 0.5 is epsilon > 1
    plan = HierarchyPlan(PrivacyUnit.CARD_DAY, BUDGET, domain, TOTALS)
    with pytest.raises(BudgetExceeded):
        list(release_od_hierarchy({"2016-07-25": _store(_trips(alphabet), "2016-07-25", tmp_path)}, plan, ledger,
                                  tmp_path, "r1", b"k" * 32))
    assert not (tmp_path / "releases").exists() or not any((tmp_path / "releases").rglob("*.parquet"))


def test_sum_problems_names_a_level_that_does_not_add_up():
    frame = pd.DataFrame({"date": "d", "mode": "bus", "level": ["mode", "district", "location", "location"],
                          "origin_district": ["all", "200x", "200x", "200x"],
                          "destination_district": ["all", "201x", "201x", "201x"],
                          "origin": ["all", "all", "2000", OTHER], "destination": ["all", "all", "2010", OTHER],
                          "count": [10, 10, 7, 2]})
    assert len(sum_problems(frame)) == 1
    frame.loc[3, "count"] = 3
    assert sum_problems(frame) == []
    twice = pd.concat([frame, frame.iloc[[1]]], ignore_index=True)  # a district pair listed twice
    twice.loc[0, "count"] = 20  # the mode total of both
    assert sum_problems(twice) == ["d bus ('200x', '201x'): is listed twice",
                                   "d bus ('200x', '201x'): its location rows do not sum to its district row"]


def test_the_plan_follows_the_privacy_settings(domain):
    from opal_dp.release.od.hierarchy import hierarchy_plan
    from opal_dp.release.settings import PrivacySettings

    plan = hierarchy_plan(PrivacySettings(privacy_unit="card_day", od_hierarchy_rho=0.3), domain)
    assert plan.budget.cost().rho == pytest.approx(0.3) and plan.budget.l2_squared == (16, 16, 8)
    one = hierarchy_plan(PrivacySettings(privacy_unit="card_day", od_hierarchy_rho=0.3, od_hierarchy_max_per_pair=1),
                         domain)
    assert one.budget.l2_squared == (16, 16, 4) and one.tau < plan.tau
    assert plan.scope("2016-07-25") == "2016-07-25" and plan.ledger_unit is PrivacyUnit.CARD_DAY
    period = hierarchy_plan(PrivacySettings(privacy_unit="card_period", period="2016-07-25..2016-07-31"), domain)
    assert period.scope("2016-07-26") == "2016-07-25..2016-07-31" and period.marginal("2016-07-26").endswith("26")
    assert plan.tau >= 1 and plan.tau == hierarchy_plan(PrivacySettings(od_hierarchy_rho=0.3), domain).tau
    weekly = hierarchy_plan(PrivacySettings(), domain)  # the default: rho 0.004 a date, charged to the week
    assert weekly.budget.cost().rho == pytest.approx(0.004) and weekly.scope("2016-07-26") == "2016-07-25..2016-07-31"
    for bad in ({"od_hierarchy_rho": 0}, {"od_hierarchy_max_per_pair": 0}):
        with pytest.raises(ValueError):
            PrivacySettings(**bad)


class UnchargedTotals(HierarchyBudget):
    """Planted bug: the mode totals are measured but left out of the charge."""

    def cost(self):
        from opal_dp.core import PrivacyCost

        return PrivacyCost.zcdp(sum(self.level_rho[1:]), 0.0)


def _audit_from_the_ledger(tmp_path, alphabet, domain, budget, seed, scale_totals=1.0):
    """Release one date, then audit the production measurement against the charges the ledger holds
    (``audit_charges``, as ``privacy_audit`` does)."""
    from opal_dp.audit.hierarchy import audit_charges
    from opal_dp.core.discrete_gaussian import DiscreteGaussian
    from opal_dp.core.hierarchy import measure

    ledger = PrivacyLedger(tmp_path / "ledger.sqlite", {"card_day": (10.0, 1e-6)})
    plan = HierarchyPlan(PrivacyUnit.CARD_DAY, budget, domain, TOTALS)
    list(release_od_hierarchy({"2016-07-25": _store(_trips(alphabet), "2016-07-25", tmp_path)}, plan, ledger,
                              tmp_path, "r1", b"k" * 32, bits=SeededBits(seed)))
    charges = [c for c in ledger.charges() if c.marginal == "od_hierarchy"]
    noise = DiscreteGaussian(SeededBits(seed + 1))
    (report,) = audit_charges(charges, BUDGET, lambda t, c, b: measure(t, c, b, noise),
                              measure_totals=lambda t, b: t + noise.sample(b.sigma * scale_totals, t.size).reshape(t.shape)
                              ).values()
    return report


@pytest.mark.slow
def test_the_audit_passes_the_release_against_its_ledger_charge(tmp_path, alphabet, domain):
    assert _audit_from_the_ledger(tmp_path, alphabet, domain, BUDGET, seed=21).passed


@pytest.mark.slow
def test_the_audit_catches_a_release_whose_charge_leaves_out_a_level(tmp_path, alphabet, domain):
    planted = UnchargedTotals(BUDGET.rho, BUDGET.shares, BUDGET.max_items, BUDGET.max_per_cell)
    report = _audit_from_the_ledger(tmp_path, alphabet, domain, planted, seed=22)
    assert not report.passed and report.rho_lower > report.charged_rho


@pytest.mark.slow
def test_the_audit_catches_totals_measured_with_less_noise_than_charged(tmp_path, alphabet, domain):
    """Planted bug: the totals' noise at 0.6 of the sigma their charge pays for (rho 0.25 really costs 0.69)."""
    report = _audit_from_the_ledger(tmp_path, alphabet, domain, BUDGET, seed=23, scale_totals=0.6)
    assert not report.passed and report.rho_lower > report.charged_rho


def test_domain_problems_names_rows_outside_the_stop_list(domain):
    bus = domain.modes["bus"]
    home, away = bus.origin_districts[bus.origin_district[0]], bus.destination_districts[bus.destination_district[0]]
    frame = pd.DataFrame({"date": "d", "mode": "bus", "level": ["mode", "district", "location", "location"],
                          "origin_district": ["all"] + [home] * 3, "destination_district": ["all"] + [away] * 3,
                          "origin": ["all", "all", bus.origins[0], OTHER],
                          "destination": ["all", "all", bus.destinations[0], OTHER], "count": [3, 3, 2, 1]})
    assert domain_problems(frame, domain) == []
    frame.loc[2, "origin"] = "Nowhere"
    assert domain_problems(frame, domain) == ["bus: 1 rows outside the public domain"]
    frame.loc[2, "origin"] = next(o for o, d in zip(bus.origins, bus.origin_district) if d != bus.origin_district[0])
    assert domain_problems(frame, domain) == ["bus: 1 rows outside the public domain"]  # not its district


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32), st.lists(st.tuples(st.integers(0, 38), st.integers(0, 39), st.integers(1, 300)),
                                       max_size=30))
def test_published_rows_add_up_and_hold_each_pair_once(domain, seed, trips):
    """The ferry domain (39 x 40 pairs), random busy pairs and noise: the rows add up level by level, and a
    location pair is either its own row or inside its district pair's remainder row, never twice."""
    from opal_dp.core.discrete_gaussian import DiscreteGaussian
    from opal_dp.core.hierarchy import fit, measure
    from opal_dp.release.od.hierarchy import rows

    ferry = domain.modes["ferry"]
    counts = np.zeros(ferry.cells, np.int64)
    for o, d, n in trips:
        counts[o * len(ferry.destinations) + d] += n
    fitted = fit(ferry.tree, measure(ferry.tree, counts, BUDGET, DiscreteGaussian(SeededBits(seed))), BUDGET.sigmas,
                 tau=12)
    frame = rows(ferry, fitted, "20160725")
    assert sum_problems(frame) == [] and domain_problems(frame, domain) == []
    keys = ["level", "origin_district", "destination_district", "origin", "destination"]
    assert not frame.duplicated(keys).any() and (frame["count"] >= 0).all()
