"""The assessment's attacks on crafted releases whose answers are known."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from opal_dp.core import Relation
from opal_dp_tests.core.helpers import trip_sbh
from opal_dp.release.marginals.tables import COUNT, LOC, MARGINALS, TIME
from opal_dp.reports.attacks import (
    any_marginal,
    combined_residuals,
    differencing,
    duplicated_pairs,
    duplication_effect,
    pair_noise_bound,
    presence_probability,
)

DELTA = 1 / 8_000_000
LABELS = sorted(["-1", "Circular Quay", "Manly", "Parramatta", "Taronga Zoo", "Watsons Bay"])


def mechanisms(relation: Relation = Relation.REPLACE_ONE, scale_by: float = 1.0) -> dict[str, StabilityHistogram]:
    return {m.name: trip_sbh(m.default_epsilon * scale_by, DELTA, relation) for m in MARGINALS}


def frame(cells: list[tuple], by_time: bool = True, by_loc: bool = True) -> pd.DataFrame:
    """Released frame from (time, loc, count) / (time, count) / (loc, count) tuples, canonically ordered."""
    names = [c for c, used in ((TIME, by_time), (LOC, by_loc)) if used] + [COUNT]
    out = pd.DataFrame(cells, columns=names) if cells else pd.DataFrame({n: [] for n in names})
    if by_time:
        out[TIME] = out[TIME].astype("int16")
    if by_loc:
        out[LOC] = pd.Categorical(out[LOC], categories=LABELS)
    out[COUNT] = out[COUNT].astype("int64")
    return out.sort_values(names[:-1]).reset_index(drop=True)


def consistent_release(cells: dict[str, dict[str, list[tuple]]]) -> dict[str, dict[str, pd.DataFrame]]:
    """{key: {tap: [(time, loc, count)]}} -> all six marginals, one-way counts = sums of the cells."""
    out = {m.name: {} for m in MARGINALS}
    for key, taps in cells.items():
        for tap in ("on", "off"):
            tl = frame(taps.get(tap, []))
            out[f"tap_{tap}_time_loc"][key] = tl
            out[f"tap_{tap}_time"][key] = frame(
                list(tl.groupby(TIME)[COUNT].sum().items()), by_loc=False)
            out[f"tap_{tap}_loc"][key] = frame(
                list(tl.groupby(LOC, observed=True)[COUNT].sum().items()), by_time=False)
    return out


FERRY = "2016-07-25|ferry"
CELLS = {
    FERRY: {
        "on": [(32, "Circular Quay", 100), (32, "Manly", 50), (33, "Manly", 40)],
        "off": [(34, "Manly", 98), (-1, "-1", 20)],
    },
    "2016-07-25|train": {"on": [(30, "Parramatta", 300)], "off": [(31, "Parramatta", 290)]},
}


def flagged(residuals: pd.DataFrame) -> pd.DataFrame:
    return residuals.loc[residuals["residual"] >= residuals["threshold"]]


def test_consistent_marginals_expose_nothing():
    residuals = differencing(consistent_release(CELLS), mechanisms())
    assert len(residuals) == 8 + 4  # every released one-way bin: ferry 2 per (tap, by), train 1
    assert (residuals["residual"] == 0).all()
    assert flagged(residuals).empty


def test_time_total_above_its_cells_exposes_the_suppressed_mass():
    release = consistent_release(CELLS)
    on_time = release["tap_on_time"][FERRY]
    on_time.loc[on_time[TIME] == 32, COUNT] += 40  # a suppressed "secret ferry" of 40 at 8:00
    on_time.loc[on_time[TIME] == 33, COUNT] += 17  # below min_released_count 18: noise-sized
    residuals = differencing(release, mechanisms())
    hit = flagged(residuals)
    assert hit[["partition", "tap", "by", "bin", "released", "cells_sum", "residual", "threshold"]].to_dict("records") == [
        {"partition": FERRY, "tap": "on", "by": "time", "bin": "8:00", "released": 190, "cells_sum": 150,
         "residual": 40, "threshold": 18}
    ]
    assert residuals["residual"].iloc[0] == 40  # worst first


def test_residual_exactly_at_threshold_is_reported_and_loc_analogue_works():
    release = consistent_release(CELLS)
    off_loc = release["tap_off_loc"][FERRY]
    off_loc.loc[off_loc[LOC] == "Manly", COUNT] += 18
    release["tap_off_loc"][FERRY] = pd.concat([off_loc, frame([("Watsons Bay", 35)], by_time=False)])
    hit = flagged(differencing(release, mechanisms()))
    assert set(zip(hit["tap"], hit["by"], hit["bin"], hit["residual"])) == {
        ("off", "loc", "Manly", 18), ("off", "loc", "Watsons Bay", 35)}


def test_threshold_follows_each_taps_time_loc_mechanism():
    mech = mechanisms()
    mech["tap_off_time_loc"] = trip_sbh(0.5, DELTA)
    residuals = differencing(consistent_release(CELLS), mech)
    thresholds = residuals.groupby("tap")["threshold"].first().to_dict()
    assert thresholds == {"on": 18, "off": mech["tap_off_time_loc"].min_released_count} and thresholds["off"] > 18


def manly_release(seed: int, windows: range, pair_noise: int, dates=("2016-07-25", "2016-07-26")):
    """CQ->Manly and Manly->CQ trips seen at tap-on (t) and, automatically, tap-off (t + 2), plus unrelated
    busy wharves; every count a noisy view within ``pair_noise`` of its twin."""
    rng = np.random.default_rng(seed)
    cells = {}
    for day in dates:
        on, off = [], []
        for t in windows:
            for origin, dest in (("Circular Quay", "Manly"), ("Manly", "Circular Quay")):
                c = int(rng.integers(40, 400))
                on.append((t, origin, c + int(rng.integers(-pair_noise, pair_noise + 1))))
                off.append((t + 2, dest, c + int(rng.integers(-pair_noise, pair_noise + 1))))
            on.append((t, "Parramatta", int(rng.integers(40, 400))))
            off.append((t + 1, "Taronga Zoo", int(rng.integers(40, 400))))
        cells[f"{day}|ferry"] = {"on": on, "off": off}
    return consistent_release(cells)


def pairs_found(pairs: pd.DataFrame) -> set[tuple]:
    return set(zip(pairs["mode"], pairs["on_loc"], pairs["off_loc"], pairs["offset"]))


def test_manly_like_pairs_are_detected_and_nothing_else():
    pairs = duplicated_pairs(manly_release(1, range(24, 80, 2), pair_noise=4), mechanisms())
    assert pairs_found(pairs) == {("ferry", "Circular Quay", "Manly", 2), ("ferry", "Manly", "Circular Quay", 2)}
    assert (pairs["agreeing"] == 56).all() and (pairs["co_released"] == 56).all() and (pairs["agreement"] == 1).all()
    assert (pairs["max_abs_diff"] <= 8).all()


def test_pairs_beyond_the_noise_bound_are_not_duplicates():
    bound = pair_noise_bound(mechanisms(), 1e-3)
    assert 5 < bound < 15
    release = manly_release(2, range(24, 80, 2), pair_noise=60)  # twins differ by far more than noise does
    assert pairs_found(duplicated_pairs(release, mechanisms())) == set()


def test_too_few_windows_or_inconsistent_agreement_is_not_reported():
    few = manly_release(3, range(30, 33, 2), pair_noise=1, dates=("2016-07-25",))  # 2 windows < min_windows
    assert duplicated_pairs(few, mechanisms()).empty
    assert len(duplicated_pairs(few, mechanisms(), min_windows=2)) == 2
    mixed = manly_release(4, range(24, 80, 2), pair_noise=1)
    cq_on = mixed["tap_on_time_loc"]["2016-07-25|ferry"]
    cq_on.loc[cq_on[LOC] == "Circular Quay", COUNT] += 100  # breaks agreement on one of the two days
    pairs = duplicated_pairs(mixed, mechanisms())
    assert pairs_found(pairs) == {("ferry", "Manly", "Circular Quay", 2)}


def test_empty_release_has_no_pairs_and_no_residuals():
    empty = consistent_release({FERRY: {}})
    assert duplicated_pairs(empty, mechanisms()).empty
    assert differencing(empty, mechanisms()).empty


@pytest.mark.parametrize("relation, k", [(Relation.REPLACE_ONE, 2), (Relation.ADD_REMOVE, 1)])
def test_duplication_effect_on_epsilon_and_noise(relation, k):
    effect = duplication_effect(mechanisms(relation))
    assert effect["loss_measure"] == "approx_dp"
    assert effect["loss_share_tap_on_cell"] == effect["loss_share_tap_off_cell"] == 2.0 / k
    assert effect["loss_on_duplicated_count"] == 4.0 / k
    assert effect["noise_std_reduction"] == pytest.approx(math.sqrt(2), rel=1e-12)
    scale = k / 2.0
    q = math.exp(-1 / scale)
    assert effect["noise_std_one_view"] == pytest.approx(math.sqrt(2 * q) / (1 - q), rel=1e-12)


def test_duplication_effect_with_unequal_scales_is_inverse_variance():
    mech = mechanisms()
    mech["tap_off_time_loc"] = trip_sbh(1.0, DELTA)
    effect = duplication_effect(mech)
    assert effect["loss_on_duplicated_count"] == 1.5
    assert 1 < effect["noise_std_reduction"] < math.sqrt(2)


def test_presence_probability_is_release_probability_of_one():
    mech = mechanisms()
    presence = presence_probability(mech)
    assert presence == {name: m.release_probability(1) for name, m in mech.items()}
    # closed forms: P(Z >= min_released_count - 1) for discrete Laplace Z
    assert presence["tap_on_time_loc"] == pytest.approx(math.exp(-17) / (1 + math.exp(-1)), rel=1e-12)
    assert presence["tap_on_time"] == pytest.approx(math.exp(-34 / 2) / (1 + math.exp(-1 / 2)), rel=1e-12)
    for name, p in presence.items():
        assert 0 < p <= mech[name].delta / 2  # the SBH delta/k bound, k = 2
    assert presence_probability(mech, group=12)["tap_on_time_loc"] > 1e3 * presence["tap_on_time_loc"]
    assert any_marginal(presence) == pytest.approx(1 - math.prod(1 - p for p in presence.values()), rel=1e-9)


def test_differencing_a_day_at_a_time_gives_the_same_table():
    """The asset loads one day's partitions at a time; with residuals planted on two days the table is the
    same, row for row, as over every partition at once."""
    cells = {**CELLS, "2016-07-26|ferry": CELLS[FERRY], "2016-07-26|bus": {"on": [(40, "2000", 60)], "off": []}}
    release = consistent_release(cells)
    release["tap_on_time"][FERRY].loc[lambda f: f[TIME] == 32, COUNT] += 40
    release["tap_off_loc"]["2016-07-26|ferry"].loc[lambda f: f[LOC] == "Manly", COUNT] += 25
    days = {}
    for key in cells:
        days.setdefault(key.split("|")[0], []).append(key)
    chunks = [{name: {k: frames[k] for k in keys} for name, frames in release.items()} for keys in days.values()]
    whole = differencing(release, mechanisms())
    assert set(flagged(whole)["residual"]) == {40, 25}
    pd.testing.assert_frame_equal(combined_residuals(differencing(c, mechanisms()) for c in chunks), whole)
