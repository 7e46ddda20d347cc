"""The time x location hierarchy of a period: public domains, per-level sensitivity against every card a
bounding allows, and a release whose levels add up exactly."""

from __future__ import annotations

from datetime import date

import numpy as np
import pandas as pd
import pytest
from hypothesis import example, given, settings, strategies as st

from opal_dp.audit.hierarchy import audit_measurement
from opal_dp.core import SeededBits
from opal_dp.core.discrete_gaussian import DiscreteGaussian
from opal_dp.core.hierarchy import Measurement, measure
from opal_dp.core.accounting import PrivacyCost
from opal_dp.core.units import ContributionBounds, PrivacyUnit
from opal_dp.network import MODES
from opal_dp.prep.binning import location_labels
from opal_dp.prep.bounding import CARD, keep_mask
from opal_dp.prep.schemas import UNKNOWN, UNKNOWN_LABEL, WINDOWS_PER_DAY
from opal_dp.release.marginals.tables import TAPS
from opal_dp.release.marginals.time_loc_hierarchy import LEVELS, period_budget, release_period, time_loc_domains

STOPS = pd.DataFrame({
    "stop_id": np.arange(1, 10, dtype=np.int32),
    "mode": pd.Categorical(["bus"] * 5 + ["train", "train", "train", "ferry"], categories=list(MODES)),
    "name": ["b1", "b2", "b3", "b4", "b5", "Central", "Redfern", "Parramatta", "Manly"],
    "postcode": np.array([2000, 2001, 2002, 2003, 2150, 2000, 2016, 2150, 2095], dtype=np.int16),
    "lat": np.zeros(9), "lon": np.zeros(9)})
DESIGNS = (LEVELS, ("mode_day", "district_day", "district_hour", "station_hour", "window_station"),
           ("mode_day", "district_day", "station_day", "station_hour", "window_station"))


def test_domains_come_from_the_stop_list_alone_and_only_tap_off_has_an_unknown_cell():
    domains = time_loc_domains(STOPS)
    assert list(domains) == [(m, t) for m in ("bus", "ferry", "train") for t in TAPS]  # no light rail stop
    bus, train = domains["bus", "on"], domains["train", "off"]
    assert bus.locations == ("2000", "2001", "2002", "2003", "2150") and bus.districts == ("200x", "215x")
    assert train.locations == ("Central", "Parramatta", "Redfern") and train.districts == ("200x", "201x", "215x")
    assert bus.cells == WINDOWS_PER_DAY * 5 and train.cells == WINDOWS_PER_DAY * 3 + 1
    for design in DESIGNS:
        for dom in (bus, train):
            tree = dom.tree(design)
            assert tree.sizes[-1] == dom.cells and tree.sizes[0] == 1
    assert train.tree(DESIGNS[1]).sizes == (1, 3 + 1, 24 * 3 + 1, 24 * 3 + 1, WINDOWS_PER_DAY * 3 + 1)


def test_levels_that_do_not_nest_are_refused():
    dom = time_loc_domains(STOPS)["bus", "on"]  # district 200x has four stations
    with pytest.raises(ValueError, match="district_hour cells are not nested in station_day cells"):
        dom.tree(("mode_day", "station_day", "district_hour", "window_station"))
    with pytest.raises(ValueError, match="from mode_day to window_station"):
        dom.tree(("station_day", "window_station"))


def test_a_trip_outside_the_domain_is_refused_without_echoing_it():
    dom = time_loc_domains(STOPS)["train", "on"]
    with pytest.raises(ValueError, match="outside the public domain") as raised:
        dom.finest_counts(np.array([3]), np.array(["Secret St"], dtype=object))
    assert "Secret" not in str(raised.value)
    with pytest.raises(ValueError, match="only tap-off may be unknown"):
        dom.finest_counts(np.array([UNKNOWN]), np.array([UNKNOWN_LABEL], dtype=object))
    off = time_loc_domains(STOPS)["train", "off"]
    counts = off.finest_counts(np.array([UNKNOWN, 5, 5]), np.array([UNKNOWN_LABEL, "Redfern", "Redfern"], dtype=object))
    assert counts[-1] == 1 and counts[5 * 3 + 2] == 2 and counts.sum() == 3


KEY = bytes(range(32))  # the bounding's PRF key: which trips it keeps, not how many
WINDOW = st.integers(0, 7)  # two hours: windows of one hour collide often
PLACES = {"bus": ["2000", "2001", "2002", "2150"], "train": ["Central", "Redfern"], "ferry": ["Manly"]}
TRIP = st.one_of(*(st.tuples(st.integers(0, 2), st.just(mode), WINDOW, st.sampled_from(places),
                             st.one_of(st.tuples(WINDOW, st.sampled_from(places)), st.just((UNKNOWN, UNKNOWN_LABEL))))
                   for mode, places in PLACES.items()))


def kept_by_bounding(trips: list[tuple], day: int, bounds: ContributionBounds) -> pd.DataFrame:
    """One card's trips ``(day, mode, on window, on location, (off window, off location))`` of ``day``, as
    ``prep.bounding`` keeps them for ``card_period``."""
    mine = [t for t in trips if t[0] == day]
    labels = location_labels(STOPS)
    frame = pd.DataFrame({
        CARD: np.full(len(mine), 7, dtype=np.int64),
        "mode": pd.Categorical([t[1] for t in mine], categories=list(MODES)),
        "tap_on_window": np.array([t[2] for t in mine], dtype=np.int16),
        "tap_on_loc": pd.Categorical([t[3] for t in mine], categories=labels),
        "tap_off_window": np.array([t[4][0] for t in mine], dtype=np.int16),
        "tap_off_loc": pd.Categorical([t[4][1] for t in mine], categories=labels)})
    return frame.loc[keep_mask(frame, date(2016, 7, 25 + day), PrivacyUnit.CARD_PERIOD, bounds, KEY)]


@settings(max_examples=300, deadline=None)
@example(a=2, per_bin=1, days=1, design=DESIGNS[1],  # two trips in one hour and district, one per window and stop
         trips=[(0, "bus", 0, "2000", (0, "2000")), (0, "bus", 1, "2001", (1, "2001"))])
@given(a=st.integers(1, 5), per_bin=st.integers(1, 3), days=st.integers(1, 3), design=st.sampled_from(DESIGNS),
       trips=st.lists(TRIP, max_size=40))
def test_no_card_changes_a_level_by_more_than_its_budgeted_l2(a, per_bin, days, design, trips):
    """A card's trips kept by the real bounding (``prep.bounding``), each tap an item of its tap's trees (the unknown
    tap-off cell included), counted into every level of every (date, mode, tap) tree: ``sum d²`` per level is within
    ``period_budget``'s (an under-estimate is an under-noised release)."""
    domains = time_loc_domains(STOPS)
    bounds = ContributionBounds(a, per_bin)
    budget = period_budget(1.0, bounds, days, design, (1 / len(design),) * len(design))
    totals = np.zeros(len(design))
    for day in range(days):
        kept = kept_by_bounding(trips, day, bounds)
        for mode in kept["mode"].astype(str).unique():
            mine = kept.loc[kept["mode"] == mode]
            for tap in TAPS:
                dom = domains[mode, tap]
                finest = dom.finest_counts(mine[f"tap_{tap}_window"].to_numpy("int64"),
                                           mine[f"tap_{tap}_loc"].astype(str).to_numpy(object))
                totals += [float((level ** 2).sum()) for level in dom.tree(design).level_counts(finest)]
    assert (totals <= np.array(budget.l2_squared)).all()


def test_the_budgeted_l2_is_reached_by_a_card_that_piles_up():
    """The bounds are tight: a card-day's four trips in the four windows of one hour at four stations of one
    district (one per window and per station, as bounding allows) reach each level's figure; both taps, both days,
    reach the period's (a larger figure would only over-noise)."""
    design = ("mode_day", "district_hour", "station_hour", "window_station")
    budget = period_budget(1.0, ContributionBounds(4, 1), 2, design, (0.25,) * 4)
    dom = time_loc_domains(STOPS)["bus", "on"]
    finest = dom.finest_counts(np.array([0, 1, 2, 3]), np.array(["2000", "2001", "2002", "2003"], dtype=object))
    per_day = [int((level ** 2).sum()) for level in dom.tree(design).level_counts(finest)]
    assert per_day == [16, 16, 4, 4] and budget.l2_squared == tuple(4 * v for v in per_day)  # 2 days x 2 taps


@pytest.mark.parametrize("design", DESIGNS)
def test_every_level_adds_up_to_the_level_above_and_every_trip_is_in_one_row(design):
    domains = time_loc_domains(STOPS)
    rng = np.random.default_rng(5)
    finest = {}
    for day in ("2016-07-25", "2016-07-26"):
        for mode, tap in domains:
            dom = domains[mode, tap]
            counts = np.zeros(dom.cells, dtype=np.int64)
            if mode != "ferry":  # an empty tree is measured too
                counts[rng.integers(0, dom.cells, 40)] = rng.integers(0, 3000, 40)
            finest[day, mode, tap] = counts
    budget = period_budget(2.0, ContributionBounds(4, 1), 2, design, (1 / len(design),) * len(design))
    released = release_period(("2016-07-25", "2016-07-26"), finest, domains, budget, design,
                              DiscreteGaussian(SeededBits(3)))
    assert sorted(released) == sorted(finest)
    for release in released.values():
        tree, fitted = release.domain.tree(design), release.fitted
        for level, parent in enumerate(tree.parents[:-1]):
            below = np.bincount(parent, weights=fitted.counts[level + 1], minlength=tree.sizes[level])
            assert (below == fitted.counts[level]).all()
        finest_sum = np.bincount(tree.parents[-1], weights=fitted.listed, minlength=tree.sizes[-2]) + fitted.remainder
        assert (finest_sum == fitted.counts[-1]).all() and (fitted.listed >= 0).all()


def test_the_audit_passes_the_measurement_and_catches_a_level_uncharged_or_a_domain_from_the_data():
    """``audit.hierarchy.audit_measurement`` on a real (mode, tap) tree at a period budget: the production measurement
    passes; charging every level but the station-hours (an uncharged level) fails on the loss bound; noise on the
    occupied cells only (a domain taken from the data) fails on the silent cells of an empty input."""
    dom = time_loc_domains(STOPS)["train", "off"]
    tree = dom.tree(LEVELS)
    budget = period_budget(0.05, ContributionBounds(4, 1), 7, LEVELS, (0.02, 0.25, 0.28, 0.45))
    noise = DiscreteGaussian(SeededBits(9))

    def production(tree, finest, budget):
        return measure(tree, finest, budget, noise)

    def occupied_only(tree, finest, budget):
        truth = tree.level_counts(finest)
        return Measurement(tuple(np.where(t > 0, t + noise.sample(s, t.size).reshape(t.shape), 0)
                                 for t, s in zip(truth, budget.sigmas)))

    passed = audit_measurement(production, budget, budget.cost(), tree, runs=20_000)
    assert passed.passed and passed.silent_cells == 0
    uncharged = PrivacyCost.zcdp(budget.rho - budget.level_rho[2], 0.0)
    assert not audit_measurement(production, budget, uncharged, tree, runs=20_000).passed
    silent = audit_measurement(occupied_only, budget, budget.cost(), tree, runs=200)
    assert not silent.passed and silent.silent_cells == sum(tree.sizes)


def test_every_public_tree_is_measured_and_the_thresholds_never_read_the_data():
    """Trees without trips are measured too, at the thresholds of the period's public sizes: the same with or
    without an empty tree among the truths; a truth outside the period's dates and domains is refused."""
    domains = time_loc_domains(STOPS)
    budget = period_budget(0.5, ContributionBounds(4, 1), 2)
    dates = ("2016-07-25", "2016-07-26")
    dom = domains["train", "on"]
    busy = {("2016-07-25", "train", "on"): np.full(dom.cells, 50, dtype=np.int64)}
    empty = {**busy, ("2016-07-26", "ferry", "off"): np.zeros(domains["ferry", "off"].cells, dtype=np.int64)}
    one, two = (release_period(dates, truth, domains, budget, noise=DiscreteGaussian(SeededBits(1)))
                for truth in (busy, empty))
    assert sorted(one) == sorted((d, m, t) for d in dates for m, t in domains)
    assert {r.taus for r in one.values()} == {r.taus for r in two.values()} and len({r.taus for r in one.values()}) == 1
    with pytest.raises(ValueError, match="outside the period"):
        release_period(dates[:1], busy | {("2016-07-27", "train", "on"): busy["2016-07-25", "train", "on"]}, domains,
                       budget)


def test_a_level_lists_the_cells_whose_own_noisy_count_reaches_its_threshold():
    """Listing reads each cell's noisy measurement against the level's public threshold, not its fitted count (the
    station-hours here sit at the threshold, so the two differ for some); the remainder of a parent is the fitted
    count of its other cells."""
    domains = time_loc_domains(STOPS)
    budget = period_budget(0.05, ContributionBounds(4, 1), 1)
    dom = domains["bus", "on"]
    probe = release_period(["2016-07-25"], {}, {("bus", "on"): dom}, budget, noise=DiscreteGaussian(SeededBits(4)))
    tau = probe["2016-07-25", "bus", "on"].taus[1]  # the station-hours' (public: the sizes and the budget)
    counts = np.zeros((96, 5), dtype=np.int64)
    counts[:, :3] = tau // 4  # every station-hour of three stations at the threshold, two stations without trips
    release = release_period(["2016-07-25"], {("2016-07-25", "bus", "on"): counts.ravel()}, {("bus", "on"): dom},
                             budget, noise=DiscreteGaussian(SeededBits(4)))["2016-07-25", "bus", "on"]
    tree, differ = dom.tree(release.levels), 0
    for level in (1, 2):
        listed, remainder = release.rows(level)
        fitted, noisy = release.fitted.counts[level], release.measured.levels[level]
        expected = (noisy >= release.taus[level - 1]) & (fitted > 0)
        assert (listed > 0).tolist() == expected.tolist() and 0 < expected.sum() < len(fitted)
        assert (remainder == np.bincount(tree.parents[level - 1], weights=np.where(expected, 0, fitted),
                                         minlength=tree.sizes[level - 1])).all()
        differ += int((expected != (fitted >= release.taus[level - 1])).sum())
    assert differ > 0
