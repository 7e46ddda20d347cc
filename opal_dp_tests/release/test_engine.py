"""Release engine + ledger: idempotent reruns, charged fresh draws, cap enforced before any noise."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opal_dp.core import BudgetExceeded, DiscreteLaplace, PrivacyLedger, SeededBits, StabilityHistogram
from opal_dp.release.engine import release_partitions
from opal_dp.release.marginals import MARGINALS, histograms

LABELS = ["-1", "2000", "2010", "Central", "Manly"]


class CountingBits(SeededBits):
    """Seeded bits that count how many words were drawn (to prove no noise was drawn)."""

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self.drawn = 0

    def words(self, n: int) -> np.ndarray:
        self.drawn += n
        return super().words(n)


def partition(n: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "tap_on_window": rng.integers(28, 40, n).astype("int16"),
        "tap_on_loc": pd.Categorical.from_codes(rng.integers(1, 5, n), categories=LABELS),
        "tap_off_window": rng.integers(-1, 44, n).astype("int16"),
        "tap_off_loc": pd.Categorical.from_codes(rng.integers(0, 5, n), categories=LABELS),
    })


def mechanisms(bits) -> dict:
    noise = DiscreteLaplace(bits)
    return {m.name: StabilityHistogram(m.default_epsilon, 1 / 8e6, noise=noise) for m in MARGINALS}


@pytest.fixture
def ledger(tmp_path) -> PrivacyLedger:
    return PrivacyLedger(tmp_path / "ledger.sqlite")


def test_rerun_over_unchanged_input_reuses_the_stored_release(tmp_path, ledger):
    parts = {"2016-07-25|bus": partition(5000), "2016-07-25|train": partition(3000, 1)}
    first = release_partitions(parts, mechanisms(SeededBits(1)), ledger, tmp_path / "store", "run-1")
    bits = CountingBits(2)
    again = release_partitions(parts, mechanisms(bits), ledger, tmp_path / "store", "run-2")
    assert bits.drawn == 0 and len(ledger.entries()) == 12
    for key in parts:
        for name, result in again[key].items():
            assert result.reused
            pd.testing.assert_frame_equal(result.frame, first[key][name].frame)


def test_fresh_draw_is_charged_and_refused_at_the_cap_before_any_noise(tmp_path, ledger):
    parts = {"2016-07-25|bus": partition(5000)}
    release_partitions(parts, mechanisms(SeededBits(1)), ledger, tmp_path / "store", "run-1")
    bits = CountingBits(2)
    with pytest.raises(BudgetExceeded, match="2016-07-25\\|bus.*already spent"):
        release_partitions(parts, mechanisms(bits), ledger, tmp_path / "store", "run-2", fresh=True)
    assert bits.drawn == 0 and len(ledger.entries()) == 6  # nothing charged: all or nothing
    roomy = PrivacyLedger(ledger.path, cap_epsilon=16, cap_delta=12 / 8e6)
    fresh = release_partitions(parts, mechanisms(bits), roomy, tmp_path / "store", "run-2", fresh=True)
    assert bits.drawn > 0 and roomy.spent("2016-07-25|bus") == pytest.approx((16, 12 / 8e6))
    assert not any(r.reused for r in fresh["2016-07-25|bus"].values())


def test_changed_input_is_a_new_release(tmp_path, ledger):
    release_partitions({"d|bus": partition(5000)}, mechanisms(SeededBits(1)), ledger, tmp_path, "run-1")
    with pytest.raises(BudgetExceeded):
        release_partitions({"d|bus": partition(5001)}, mechanisms(SeededBits(1)), ledger, tmp_path, "run-2")


@settings(max_examples=25, deadline=None)
@given(n=st.integers(0, 4000), seed=st.integers(0, 2**16), order=st.integers(0, 2**16))
def test_release_is_canonical_and_independent_of_row_order(tmp_path_factory, n, seed, order):
    part = partition(n, seed)
    shuffled = part.sample(frac=1, random_state=order).reset_index(drop=True)
    outputs = []
    for frame in (part, shuffled):
        folder = tmp_path_factory.mktemp("release")
        ledger = PrivacyLedger(folder / "ledger.sqlite")
        outputs.append(release_partitions({"k": frame}, mechanisms(SeededBits(7)), ledger, folder, "run")["k"])
    for name, result in outputs[0].items():
        pd.testing.assert_frame_equal(result.frame, outputs[1][name].frame)
        truth = histograms(part, [result.marginal])[result.marginal.name]
        keys = result.marginal.dimensions
        assert set(map(tuple, result.frame[keys].astype(str).to_numpy())) <= set(map(tuple, truth[keys].astype(str).to_numpy()))
        floor = StabilityHistogram(result.marginal.default_epsilon, 1 / 8e6).min_released_count
        assert (result.frame["count"] >= floor).all()
