"""Every production draw takes its randomness from the OS CSPRNG, through the code path itself.

``os.urandom`` is replaced by a stream from a test seed: with the same stream twice, each production draw
(Laplace and Gaussian noise, sparse noise, the public-domain measurement, the prefix tree, the synthetic data's
queries, the row shuffles of bounding and sequences) repeats exactly; with another stream it changes. So all
of its randomness flows from ``os.urandom``, and none from a generator of its own.

Kills the mutation "``SecureBits`` replaced by a fixed-seed PCG64" (``core.bits``): the draws would then ignore
the stream, and the two streams would give the same output. The chance that a correct draw repeats under two
different streams is below 1e-100 for each draw here (hundreds of independent noise values), so the test
cannot fail on a correct build.
"""

from __future__ import annotations

import os
import pickle
from datetime import date

import numpy as np
import pytest

from opal_dp.audit.card_level import trips_of
from opal_dp.core import ContributionBounds, DiscreteLaplace, PrivacyUnit, SecureBits, Sensitivity
from opal_dp.core.discrete_gaussian import DiscreteGaussian
from opal_dp.core.prefix_tree import Taxonomy, TreeBudget, build_noisy_prefix_tree
from opal_dp.core.sparse_noise import GaussianNoise, LaplaceNoise, sparse_threshold_cells
from opal_dp.network import load_stops
from opal_dp.prep.bounding import bound_day
from opal_dp.release.marginals import public_domain as pd_design
from opal_dp.release.synthetic import queries as sq

BUSY = np.full(300, 1000, dtype=np.int64)  # released whatever the noise: the output shows every draw


class StreamUrandom:
    """``os.urandom`` replaced by a seeded stream; counts the bytes asked for."""

    def __init__(self, seed: int) -> None:
        self._rng, self.taken = np.random.default_rng(seed), 0

    def __call__(self, n: int) -> bytes:
        self.taken += n
        return self._rng.bytes(n)


def synthetic_counts():
    plan = sq.synthetic_plan(1.0, 1e-6, ContributionBounds(), ["2016-07-25"], load_stops())
    return sq.draw(np.full(len(plan.domain.cells["counts"]), 1000), plan, "counts")


def row_order():
    trips = trips_of((4,) * 50, (1, 1))  # 202 rows
    return bound_day(trips, date(2016, 7, 25), PrivacyUnit.TRIP, ContributionBounds(), bytes(32)).kept


PRODUCTION_DRAWS = {
    "laplace": lambda: DiscreteLaplace().sample(3.0, 300),
    "gaussian": lambda: DiscreteGaussian().sample(3.0, 300),
    "sparse laplace": lambda: sparse_threshold_cells(LaplaceNoise(2.0), 10**5, 4),
    "sparse gaussian": lambda: sparse_threshold_cells(GaussianNoise(3.0), 10**5, 6),
    "public domain": lambda: {table: pd_design.noisy(BUSY, law) for table, law in pd_design.calibrate(
        "gaussian", Sensitivity(2, 2, 2, 1), {"time-loc": 0.5, "time": 0.25, "loc": 0.25}).laws.items()},
    "prefix tree": lambda: build_noisy_prefix_tree(
        np.tile(np.array([[0, 4], [3, 7], [6, 1]]), (100, 1)), Taxonomy(np.array([0, 3, 6]), np.array([3, 3, 4])),
        TreeBudget(1.0, 2)),
    "synthetic": synthetic_counts,
    "row shuffle": row_order,
}


def run_with(monkeypatch, seed: int, draw) -> tuple[bytes, int]:
    stream = StreamUrandom(seed)
    monkeypatch.setattr(os, "urandom", stream)
    return pickle.dumps(draw()), stream.taken


@pytest.mark.parametrize("name", sorted(PRODUCTION_DRAWS))
def test_every_production_draw_comes_from_os_urandom(monkeypatch, name):
    """Kills "SecureBits replaced by a fixed-seed PCG64": the output must follow the OS stream."""
    draw = PRODUCTION_DRAWS[name]
    first, taken = run_with(monkeypatch, 1, draw)
    again, _ = run_with(monkeypatch, 1, draw)
    other, _ = run_with(monkeypatch, 2, draw)
    assert taken > 0, f"{name} drew nothing from os.urandom"
    assert first == again, f"{name} has randomness that does not come from os.urandom"
    assert first != other, f"{name} ignores os.urandom"


def test_the_production_source_has_no_seed_and_no_state():
    """Kills a seeded or stateful ``SecureBits``: no constructor argument, no generator attribute, and each word
    is exactly the next 8 bytes of ``os.urandom``."""
    with pytest.raises(TypeError):
        SecureBits(0)  # type: ignore[call-arg]
    assert SecureBits.seeded is False and vars(SecureBits()) == {}
    stream = b"".join(i.to_bytes(8, "little") for i in (7, 2**64 - 1, 12345))
    real = os.urandom
    try:
        os.urandom = lambda n: stream[:n]
        assert SecureBits().words(3).tolist() == [7, 2**64 - 1, 12345]
    finally:
        os.urandom = real
