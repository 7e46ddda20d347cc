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

from opal_dp.core import Relation, StabilityHistogram, release_probability
from opal_dp_tests.core.helpers import binomial_interval

dp.enable_features("contrib")

DELTA = 1 / 8e6
SPACE = (
    dp.map_domain(dp.atom_domain(T=dp.i64), dp.atom_domain(T=dp.i64)),
    dp.l01inf_distance(dp.absolute_distance(T=dp.i64)),
)


def opendp_map(mech: StabilityHistogram, threshold: int) -> tuple[float, float]:
    k = mech.relation.bins_touched
    meas = dp.m.make_laplace_threshold(*SPACE, scale=mech.scale, threshold=threshold)
    return meas.map((k, k, 1))  # k bins touched, L1 = k, Linf = 1


@pytest.mark.parametrize("epsilon", [1.0, 2.0])
@pytest.mark.parametrize("relation", list(Relation))
def test_default_budget_within_opendp_accounting(epsilon, relation):
    mech = StabilityHistogram(epsilon, DELTA, relation)
    for threshold in (mech.min_released_count, mech.min_released_count - 1):
        eps, delta = opendp_map(mech, threshold)
        assert eps <= epsilon * (1 + 1e-9)
        assert delta <= DELTA


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 2.0])
def test_opendp_delta_at_threshold_minus_one_equals_ours(epsilon):
    """Add/remove (one key): OpenDP's delta at ``min - 1`` is exactly our P(count 1 is released)."""
    mech = StabilityHistogram(epsilon, DELTA, Relation.ADD_REMOVE)
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
