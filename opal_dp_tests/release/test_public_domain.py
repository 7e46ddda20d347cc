"""The public-domain design: a domain from public data only, noise calibration, files that add up exactly with
their remainder rows, and the expected number of false cells."""

from __future__ import annotations

import math

import numpy as np
import opendp.prelude as dp
import pandas as pd
import pytest
from scipy import stats

from opal_dp.core import (
    ContributionBounds,
    PrivacyCost,
    PrivacyUnit,
    Relation,
    SecureBits,
    SeededBits,
    Sensitivity,
    sensitivity,
)
from opal_dp.network import MODES
from opal_dp.prep.binning import location_labels
from opal_dp.release.marginals.tables import MARGINALS
from opal_dp.release.marginals.open_data import to_open_data
from opal_dp.release.marginals.public_domain import (
    OTHER,
    calibrate,
    domain,
    expected_false_cells,
    min_tau_over,
    noisy,
    release_tap,
    released_frames,
    sum_problems,
    true_blocks,
)
from opal_dp_tests.core.helpers import ALPHA

dp.enable_features("contrib")

TRIP = Sensitivity(l0=2, l1=2, l2_squared=2, linf=1)  # one trip, replace-one
BUDGET = {"time-loc": 2.0, "time": 1.0, "loc": 1.0}
KEY = "2016-07-25|bus"


def many_bus_stops(n: int) -> pd.DataFrame:
    """``n`` bus postcodes and one train station."""
    rows = [(i, "bus", f"stop {i}", 2000 + i) for i in range(n)] + [(n, "train", "Central", 2000)]
    frame = pd.DataFrame(rows, columns=["stop_id", "mode", "name", "postcode"])
    return frame.assign(mode=pd.Categorical(frame["mode"], categories=list(MODES)), lat=-33.9, lon=151.2)


def trips(stops: pd.DataFrame, mode: str, n: int, seed: int = 0, missing_off: float = 0.1) -> pd.DataFrame:
    """Binned trips of ``mode`` inside its domain: a few busy cells and a long tail; some without tap-off."""
    rng = np.random.default_rng(seed)
    universe = location_labels(stops)
    mine = domain(stops, mode, "on").locations
    weights = rng.pareto(1.0, len(mine)) + 0.01

    def locs(size):
        return rng.choice(mine, size=size, p=weights / weights.sum())

    on_w = rng.choice(np.arange(24, 40), size=n)
    off_w = np.minimum(on_w + rng.integers(0, 4, n), 95)
    off_l = locs(n)
    missing = rng.random(n) < missing_off
    off_w[missing], off_l[missing] = -1, "-1"
    return pd.DataFrame({
        "tap_on_window": on_w.astype("int16"),
        "tap_on_loc": pd.Categorical(locs(n), categories=universe),
        "tap_off_window": off_w.astype("int16"),
        "tap_off_loc": pd.Categorical(off_l, categories=universe),
    })


def test_domain_comes_from_the_reference_stops(stops):
    on, off = domain(stops, "bus", "on"), domain(stops, "bus", "off")
    assert on.locations == off.locations == ("2000", "2010")  # postcodes, deduplicated, no "-1"
    assert domain(stops, "train", "on").locations == ("Central", "Parramatta", "Town Hall")
    assert [b.shape for b in on.blocks] == [(96, 2)]
    assert [b.shape for b in off.blocks] == [(96, 2), (1, 1)] and off.blocks[1].windows == (-1,)
    assert off.cells == 96 * 2 + 1


def test_bad_mode_or_tap_is_refused(stops):
    with pytest.raises(ValueError):
        domain(stops, "tram", "on")
    with pytest.raises(ValueError):
        domain(stops, "bus", "in")


def test_true_blocks_count_every_trip_and_refuse_trips_outside_the_domain(stops):
    part = trips(stops, "bus", 500)
    on, off = true_blocks(part, domain(stops, "bus", "on")), true_blocks(part, domain(stops, "bus", "off"))
    assert on[0].sum() == 500 and off[0].sum() + off[1].sum() == 500
    assert off[1][0, 0] == (part["tap_off_window"] == -1).sum()
    strange = part.copy()
    strange.loc[0, "tap_on_loc"] = "Central"  # a train station in a bus partition
    with pytest.raises(ValueError, match="outside the public domain"):
        true_blocks(strange, domain(stops, "bus", "on"))
    half_unknown = part.copy()
    half_unknown.loc[0, ["tap_off_window", "tap_off_loc"]] = (-1, "2000")
    with pytest.raises(ValueError, match="outside the public domain"):
        true_blocks(half_unknown, domain(stops, "bus", "off"))


def test_calibration():
    lap = calibrate("laplace", TRIP, BUDGET)
    assert lap.parameters == {"time-loc": 1.0, "time": 2.0, "loc": 2.0}  # l1 / epsilon
    q = math.exp(-1)
    assert lap.variances["time-loc"] == pytest.approx(2 * q / (1 - q) ** 2)
    gauss = calibrate("gaussian", TRIP, {"time-loc": 0.5, "time": 0.25, "loc": 0.25})
    assert gauss.parameters["time-loc"] == pytest.approx(math.sqrt(2 / (2 * 0.5)))  # l2² / (2 rho)
    for bad in ({"time-loc": 1.0}, {**BUDGET, "time": 0.0}, {**BUDGET, "loc": float("nan")}):
        with pytest.raises(ValueError):
            calibrate("laplace", TRIP, bad)
    with pytest.raises(ValueError):
        calibrate("sbh", TRIP, BUDGET)


def _tables(stops, part, mode, noise, tau):
    """One partition's three published tables by the release's own path (``released_frames`` per tap, then
    ``to_open_data``), as the published files read back (text columns)."""
    releases = {}
    for tap in ("on", "off"):
        dom = domain(stops, mode, tap)
        frames = released_frames(dom, release_tap(part, dom, noise, tau), part[f"tap_{tap}_loc"].cat.categories)
        releases.update({m.name: {f"2016-07-25|{mode}": frames[m.table]} for m in MARGINALS if m.tap == tap})
    return {t: f.astype({c: str for c in f.columns if c != "count"}) for t, f in to_open_data(releases).items()}


@pytest.mark.parametrize("mechanism,budget,tau", [
    ("laplace", BUDGET, 1), ("laplace", BUDGET, 9), ("laplace", BUDGET, 60),
    ("gaussian", {"time-loc": 0.5, "time": 0.25, "loc": 0.25}, 12),
])
def test_published_files_add_up_exactly(mechanism, budget, tau):
    stops = many_bus_stops(40)
    tables = _tables(stops, trips(stops, "bus", 20_000), "bus", calibrate(mechanism, TRIP, budget), tau)
    joint, time, loc = tables["time-loc"], tables["time"], tables["loc"]
    assert (joint["count"] > 0).all() and (time["count"] > 0).all() and (loc["count"] > 0).all()
    assert (joint.loc[(joint["time"] != OTHER) & (joint["loc"] != OTHER), "count"] >= tau).all()
    for tap in ("on", "off"):
        j = joint[joint["tap"] == tap]
        by_time = j[j["time"] != OTHER].groupby("time")["count"].sum()
        by_loc = j[j["loc"] != OTHER].groupby("loc")["count"].sum()
        t = time[time["tap"] == tap].set_index("time")["count"]
        lo = loc[loc["tap"] == tap].set_index("loc")["count"]
        assert by_time.sort_index().equals(t.sort_index())  # including each time's loc = other row
        assert by_loc.sort_index().equals(lo.sort_index())  # including each location's time = other row
        assert t.sum() == lo.sum()
    assert sum_problems(tables) == []
    # the unknown cell only ever pairs with itself or a remainder
    unknown = joint[(joint["time"] == "-1") | (joint["loc"] == "-1")]
    assert set(unknown["time"]) <= {"-1", OTHER} and set(unknown["loc"]) <= {"-1", OTHER}
    assert (unknown["tap"] == "off").all()


def test_sum_problems_finds_files_that_do_not_add_up():
    stops = many_bus_stops(10)
    tables = _tables(stops, trips(stops, "bus", 5_000), "bus", calibrate("laplace", TRIP, BUDGET), 9)
    assert sum_problems(tables) == []
    joint = tables["time-loc"]
    dropped = {**tables, "time-loc": joint.drop(index=joint.index[joint["loc"] == OTHER][0])}
    assert any("time.csv" in p for p in sum_problems(dropped))
    bumped = {**tables, "loc": tables["loc"].assign(count=tables["loc"]["count"] + (tables["loc"].index == 0))}
    problems = sum_problems(bumped)
    assert any("loc.csv" in p for p in problems) and any("totals" in p for p in problems)


def test_expected_false_cells_bounds_an_empty_partition():
    """On a partition with no trips every listed cell is false; their number over many releases stays under
    ``expected_false_cells`` (an upper estimate: the rounding de-lists the cells that their line's estimate,
    about 0, cannot hold; on an empty partition almost all of them). One-sided by design: the claim is a bound."""
    stops = many_bus_stops(150)
    dom = domain(stops, "bus", "on")
    noise, tau, reps = calibrate("laplace", TRIP, BUDGET, SeededBits(6)), 5, 60
    empty = trips(stops, "bus", 0)
    listed = sum(int(b.listed.sum()) for _ in range(reps) for b in release_tap(empty, dom, noise, tau))
    expected = reps * expected_false_cells(noise, dom.cells, tau)
    slack = stats.norm.isf(ALPHA / 2) * math.sqrt(expected)  # Poisson-like count
    assert listed <= 1.15 * expected + slack
    assert expected > 1000


@pytest.mark.parametrize("mechanism,budget", [("laplace", BUDGET),
                                              ("gaussian", {"time-loc": 0.5, "time": 0.25, "loc": 0.25})])
def test_the_measurement_of_empty_cells_has_the_calibrated_tail(mechanism, budget):
    """``noisy`` on 10^6 empty cells: the number at or above tau is Binomial(10^6, P(Z >= tau)) with the tail of
    the calibrated law, for every table (exact two-sided binomial test, 1e-6 over the three tables). Zero noise,
    or noise at half or twice the scale, moves the count by far more than its standard error: it fails."""
    noise = calibrate(mechanism, TRIP, budget, SeededBits(5))  # seeded: the outcome is fixed, the bound a priori
    cells = np.zeros(10**6, dtype=np.int64)
    for table, law in noise.laws.items():
        scale = noise.parameters[table]  # the recorded scale (or sigma), not the law's own
        tau = max(1, round(2 * scale))  # P(Z >= tau) of a few percent
        above = int(np.count_nonzero(noisy(cells, law) >= tau))
        assert stats.binomtest(above, cells.size, _tail(mechanism, scale, tau)).pvalue > ALPHA / 3, table


def _tail(mechanism: str, scale: float, tau: int) -> float:
    """P(Z >= tau) from the closed form (Laplace) or the normalised pmf (Gaussian), independent of the samplers."""
    if mechanism == "laplace":
        q = math.exp(-1 / scale)
        return q**tau / (1 + q)
    z = np.arange(-int(40 * scale) - 1, int(40 * scale) + 2)
    weights = np.exp(-(z**2) / (2 * scale**2))
    return float(weights[z >= tau].sum() / weights.sum())


def test_the_threshold_keeps_false_cells_under_the_target():
    noise = calibrate("laplace", TRIP, BUDGET)
    cells = 122_000  # about one day: 2 taps x 97 windows x ~630 locations
    tau = min_tau_over([(noise, cells)], 20.0)
    assert expected_false_cells(noise, cells, tau) <= 20.0 < expected_false_cells(noise, cells, tau - 1)
    with pytest.raises(ValueError):
        min_tau_over([(noise, cells)], 0.0)


@pytest.mark.parametrize("mechanism, scale", [("laplace", 1.0), ("laplace", 0.05), ("gaussian", 0.02),
                                              ("gaussian", 0.2)])
@pytest.mark.parametrize("target", [1e-3, 0.7, 20.0, 5e4])
def test_the_threshold_search_finds_what_counting_up_finds(mechanism, scale, target):
    """Doubling then bisecting gives the first threshold that counting up from 1 reaches, over two taps whose noise
    differs (a Gaussian's budget as rho: sigma from about 2 to 7)."""
    pieces = [(calibrate(mechanism, TRIP, {t: b * scale for t, b in BUDGET.items()}), 122_000),
              (calibrate(mechanism, TRIP, {t: b * scale / 2 for t, b in BUDGET.items()}), 40_000)]
    tau = 1
    while sum(expected_false_cells(noise, cells, tau) for noise, cells in pieces) > target:
        tau += 1
    assert min_tau_over(pieces, target) == tau


def test_uses_the_secure_source_by_default():
    noise = calibrate("laplace", TRIP, BUDGET)
    assert all(isinstance(law.bits, SecureBits) for law in noise.laws.values())


PERIOD_DAYS = 14
UNITS = [(unit, relation, bounds) for unit in PrivacyUnit for relation in Relation
         for bounds in (ContributionBounds(), ContributionBounds(3, 2, 10))]


@pytest.mark.parametrize("unit,relation,bounds", UNITS)
def test_laplace_epsilon_confirmed_by_opendp(unit, relation, bounds):
    """OpenDP's discrete Laplace map at the unit's L1 sensitivity gives exactly the budgeted epsilon, and the
    cost carries delta = 0 (pure DP)."""
    sens = sensitivity(unit, relation, bounds, PERIOD_DAYS)
    noise = calibrate("laplace", sens, BUDGET)
    for table, epsilon in BUDGET.items():
        meas = dp.m.make_laplace(dp.vector_domain(dp.atom_domain(T=dp.i64)), dp.l1_distance(T=dp.i64),
                                 scale=noise.parameters[table])
        assert meas.map(sens.l1) == pytest.approx(epsilon, rel=1e-9)
        assert noise.cost(table) == PrivacyCost.approx_dp(epsilon, 0.0)


@pytest.mark.parametrize("unit,relation,bounds", UNITS)
def test_gaussian_rho_confirmed_by_opendp(unit, relation, bounds):
    """OpenDP's discrete Gaussian map is ``d²/(2 sigma²)`` at an integer L2 distance ``d``; at our L2² it is
    the budgeted rho (checked at d = 1, 2, 3 and rescaled: L2² need not be a square)."""
    sens = sensitivity(unit, relation, bounds, PERIOD_DAYS)
    rhos = {"time-loc": 0.5, "time": 0.25, "loc": 0.25}
    noise = calibrate("gaussian", sens, rhos)
    for table, rho in rhos.items():
        meas = dp.m.make_gaussian(dp.vector_domain(dp.atom_domain(T=dp.i64)), dp.l2_distance(T=dp.i64),
                                  scale=noise.parameters[table])
        for d in (1, 2, 3):
            assert meas.map(d) * sens.l2_squared / d**2 == pytest.approx(rho, rel=1e-9)
        assert noise.cost(table) == PrivacyCost.zcdp(rho, 0.0)
