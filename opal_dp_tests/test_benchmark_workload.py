"""The planner's workload benchmark reads each method's files as a reader would and scores them as documented."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from benchmarks.workload import hierarchy_answers
from opal_dp.reports.workload import CLASSES, Score, query_answers, table_answers
from opal_dp.core import SeededBits
from opal_dp.core.discrete_gaussian import DiscreteGaussian
from opal_dp.core.units import ContributionBounds
from opal_dp.release.marginals.time_loc_hierarchy import LEVELS, period_budget, release_period, time_loc_domains
from opal_dp.release.marginals.time_loc_tables import summed
from opal_dp_tests.release.test_time_loc_hierarchy import STOPS


def test_a_query_is_summed_from_cells_inside_it_and_never_from_cells_that_straddle_it():
    dom = time_loc_domains(STOPS)["bus", "on"]  # five stations, two districts (four in 200x)
    hours = np.arange(24 * 5)
    assert summed(hours, dom, "station_hour", "station_day").tolist() == [
        sum(h * 5 + s for h in range(24)) for s in range(5)]
    assert summed(np.ones(5), dom, "station_day", "district_day").tolist() == [4, 1]
    assert summed(np.ones(5), dom, "station_day", "district_hour") is None  # a day straddles the hours
    assert summed(np.ones(2), dom, "district_day", "station_day") is None  # a district holds several stations


def test_a_noiseless_hierarchy_answers_every_query_with_the_truth():
    """At a vast rho on the levels above the finest the fit is the truth there, and every cell is listed: every class
    but the finest, read from the published rows, equals the true sums (read from the noisy finest level it would
    not); the finest answers its listed cells only."""
    domains = time_loc_domains(STOPS)
    rng = np.random.default_rng(3)
    dom = domains["bus", "on"]
    finest = np.zeros(dom.cells, dtype=np.int64)
    finest[rng.choice(dom.cells, 60, replace=False)] = rng.integers(50, 400, 60)
    budget = period_budget(1e9, ContributionBounds(4, 1), 1, LEVELS, (1 / 3, 1 / 3, 1 / 3 - 1e-12, 1e-12))
    (release,) = release_period(["2016-07-25"], {("2016-07-25", "bus", "on"): finest}, {("bus", "on"): dom}, budget,
                                LEVELS, DiscreteGaussian(SeededBits(1))).values()
    truth = query_answers(finest, dom)
    answers = hierarchy_answers(release)
    assert sorted(answers) == sorted(CLASSES)
    for c in CLASSES:
        assert (answers[c] == truth[c]).all() == (c != "window_station"), c
    listed = answers["window_station"] > 0
    assert 0 < listed.sum() < 60 and (finest[listed] > 0).all()


def test_the_2016_files_are_read_without_their_remainder_rows():
    dom = time_loc_domains(STOPS)["train", "off"]  # Central, Parramatta, Redfern
    tables = {"tap_off_time_loc": pd.DataFrame({"time_window": [4, 4, -1], "loc": ["Central", "other", "-1"],
                                                "count": [30, 7, 5]}),
              "tap_off_loc": pd.DataFrame({"loc": ["Central", "Redfern", "-1"], "count": [40, 12, 5]}),
              "tap_off_time": pd.DataFrame({"time_window": [4, 9, -1], "count": [37, 20, 5]})}
    answers = table_answers(tables, "off", dom)  # the unknown tap-off cell last in each class
    assert answers["window_station"][4 * 3 + 0] == 30 and answers["window_station"].tolist()[-1] == 5
    assert answers["window_station"].sum() == 35  # the remainder row left out
    assert answers["station_day"].tolist() == [40, 0, 12, 5] and answers["district_day"].tolist() == [40, 12, 0, 5]
    assert answers["mode_day"].tolist() == [62]


def test_scores_share_wre_and_errors_as_documented():
    score = Score()
    score.add(np.array([110, 0, 5, 0]), np.array([100, 200, 10, 0]))
    score.add(np.array([0]), np.array([300]))
    figures = score.figures()
    assert figures["share"] == 110 / 610 and math.isclose(figures["wre"], 15 / 110)
    assert figures["queries_100"] == 3 and figures["median"] == 1.0 and math.isclose(figures["p90"], 1.0)


def test_published_totals_count_as_the_od_hierarchy_does(monkeypatch):
    """The totals the benchmark pins to (``--pinned``) are the default release's: a card-day's first two trips of a
    mode, tap-off only where recorded (noise set to 0 here)."""
    import benchmarks.workload as workload
    from opal_dp.network import MODES
    from opal_dp.prep.binning import location_labels
    from opal_dp.prep.schemas import UNKNOWN, UNKNOWN_LABEL
    from opal_dp.release.settings import PrivacySettings

    monkeypatch.setattr(workload, "measure_totals", lambda counts, budget: counts)
    labels = list(dict.fromkeys([*location_labels(STOPS), UNKNOWN_LABEL]))
    trips = pd.DataFrame({"tap_on_window": np.array([1, 2, 3, 4], np.int16),
                          "tap_on_loc": pd.Categorical(["2000", "2001", "2000", "Central"], categories=labels),
                          "tap_off_window": np.array([2, 3, 4, UNKNOWN], np.int16),
                          "tap_off_loc": pd.Categorical(["2001", "2000", "2001", UNKNOWN_LABEL], categories=labels),
                          "mode": pd.Categorical(["bus", "bus", "bus", "train"], categories=list(MODES)),
                          "card_id": np.full(4, 7, np.int64)})
    totals = workload.published_totals({"2016-07-25": trips}, STOPS, PrivacySettings())
    assert totals[("2016-07-25", "bus")] == (2, 2) and totals[("2016-07-25", "train")] == (1, 0)
