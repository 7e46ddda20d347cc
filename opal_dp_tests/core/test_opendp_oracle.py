"""Our SBH parameters through OpenDP 0.16's privacy map for ``make_laplace_threshold``.

OpenDP releases a key when ``noisy >= threshold`` (checked below), like our ``min_released_count``.
Its 0.16 map, however, bounds the per-key delta by ``P(Z > threshold - linf)``, while a key with
count ``linf`` is released when ``Z >= threshold - linf``: it understates delta by one unit of
the threshold (opendp/opendp#2922). So besides the plain comparison we also feed it
``threshold = min_released_count - 1``, whose reported delta is the true delta of our mechanism.
"""

import math

import opendp.prelude as dp
import pytest

from opal_dp.core import ContributionBounds, PrivacyUnit, Relation, StabilityHistogram, release_probability
from opal_dp.release.marginals.plan import build_plan
from opal_dp_tests.core.helpers import binomial_interval, trip_sbh
from opal_dp.release.periods import Periods

dp.enable_features("contrib")

DELTA = 1 / 8e6
SPACE = (
    dp.map_domain(dp.atom_domain(T=dp.i64), dp.atom_domain(T=dp.i64)),
    dp.l01inf_distance(dp.absolute_distance(T=dp.i64)),
)


def opendp_map(mech: StabilityHistogram, threshold: int) -> tuple[float, float]:
    s = mech.sensitivity
    meas = dp.m.make_laplace_threshold(*SPACE, scale=mech.scale, threshold=threshold)
    return meas.map((s.l0, s.l1, s.linf))  # l0 bins touched, L1 in total, at most Linf each


@pytest.mark.parametrize("epsilon", [1.0, 2.0])
@pytest.mark.parametrize("relation", list(Relation))
def test_default_budget_within_opendp_accounting(epsilon, relation):
    mech = trip_sbh(epsilon, DELTA, relation)
    for threshold in (mech.min_released_count, mech.min_released_count - 1):
        eps, delta = opendp_map(mech, threshold)
        assert eps <= epsilon * (1 + 1e-9)
        assert delta <= DELTA


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 2.0])
def test_opendp_delta_at_threshold_minus_one_equals_ours(epsilon):
    """Add/remove (one key): OpenDP's delta at ``min - 1`` is exactly our P(count 1 is released)."""
    mech = trip_sbh(epsilon, DELTA, Relation.ADD_REMOVE)
    _, delta = opendp_map(mech, mech.min_released_count - 1)
    assert delta == pytest.approx(mech.release_probability(1), rel=1e-9)


def test_opendp_releases_at_threshold_and_understates_delta():
    """Scale 1, threshold 2, count 1: OpenDP releases iff Z >= 1 (rate q/(1+q) = 0.269, measured
    at 1e-6), but its map reports q**2/(1+q) = 0.099."""
    meas = dp.m.make_laplace_threshold(*SPACE, scale=1.0, threshold=2)
    n = 100_000
    released = len(meas({i: 1 for i in range(n)}))
    q = math.exp(-1)
    lo, hi = binomial_interval(released, n)
    assert lo <= q / (1 + q) <= hi
    assert meas.map((1, 1, 1))[1] == pytest.approx(q**2 / (1 + q), rel=1e-9)
    assert release_probability(1, 1.0, 2) == pytest.approx(q / (1 + q), rel=1e-12)


PERIOD = tuple(f"2016-07-{d}" for d in range(25, 32)) + tuple(f"2016-08-{d:02d}" for d in range(8, 15))
NOMINAL = ({"tap_on_time": 1.0, "tap_on_loc": 1.0, "tap_off_time": 1.0, "tap_off_loc": 1.0,
            "tap_on_time_loc": 2.0, "tap_off_time_loc": 2.0}, {name: DELTA for name in (
            "tap_on_time", "tap_on_loc", "tap_off_time", "tap_off_loc", "tap_on_time_loc", "tap_off_time_loc")})


@pytest.mark.parametrize("unit", list(PrivacyUnit))
@pytest.mark.parametrize("relation", list(Relation))
@pytest.mark.parametrize("bounds", [ContributionBounds(), ContributionBounds(3, 2, 10)])
def test_every_unit_with_laplace_within_opendp_accounting(unit, relation, bounds):
    """(unit, laplace): each marginal's stated (epsilon, delta) covers OpenDP's map at the unit's sensitivity,
    and OpenDP's delta at ``min_released_count - 1`` (the #2922 correction) equals ours exactly."""
    plan = build_plan(unit, *NOMINAL, relation=relation, mechanism="laplace", bounds=bounds, periods=Periods(PERIOD))
    for mech in plan.mechanisms.values():
        eps, delta = opendp_map(mech, mech.min_released_count - 1)
        assert eps <= mech.epsilon * (1 + 1e-9)
        assert delta <= mech.delta
        assert delta == pytest.approx(mech.sensitivity.l0 * mech.release_probability(mech.sensitivity.linf), rel=1e-9)
