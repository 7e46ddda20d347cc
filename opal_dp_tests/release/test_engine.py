"""Release engine + ledger: idempotent reruns, charged fresh draws, the cap enforced before any noise, draws
stored where the ledger recorded them (once), keyed fingerprints."""

from __future__ import annotations

import os
from uuid import uuid4

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opal_dp.core import BudgetExceeded, DiscreteLaplace, PrivacyLedger, SeededBits
from opal_dp.defs.shared.storage import OpalStorage
from opal_dp.release.marginals.engine import fingerprint, partition_truths, release_partitions
from opal_dp.release.marginals.tables import COUNT, LOC, MARGINALS, TIME, histograms, true_cells
from opal_dp.release.marginals.plan import build_plan
from opal_dp.private_files import read_parquet, write_parquet_exclusive
from opal_dp.release.periods import Periods

LABELS = ["-1", "2000", "2010", "Central", "Manly"]
EPSILON = {m.name: m.default_epsilon for m in MARGINALS}
DELTA = {m.name: 1 / 8e6 for m in MARGINALS}
CAPS = {"trip": (8.0, 6 / 8e6), "card_day": (8.0, 6 / 8e6), "card_period": (8.0, 6 / 8e6)}
KEY = b"k" * 32


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


def plan(bits, unit: str = "trip"):
    return build_plan(unit, EPSILON, DELTA, laplace=DiscreteLaplace(bits), periods=Periods(("2016-07-25",)))


def release(parts, bits, ledger, root, run_id, unit="trip", **kw):
    return release_partitions(parts, plan(bits, unit), ledger, root, run_id, KEY, **kw)


@pytest.fixture
def ledger(tmp_path) -> PrivacyLedger:
    return PrivacyLedger(tmp_path / "ledger.sqlite", CAPS)


@pytest.fixture(params=["local", "memory"])
def store(request, tmp_path):
    """Where draws are stored: a local folder, or the private folder of a storage resource on another fsspec
    filesystem (fsspec's in-memory one stands for an object store)."""
    if request.param == "local":
        return tmp_path
    return OpalStorage(data_dir=f"memory://opal-{uuid4().hex}").private_dir


def test_rerun_over_unchanged_input_reuses_the_stored_release(store, ledger):
    parts = {"2016-07-25|bus": partition(5000), "2016-07-25|train": partition(3000, 1)}
    first = release(parts, SeededBits(1), ledger, store, "run-1")
    bits = CountingBits(2)
    again = release(parts, bits, ledger, store, "run-2")
    assert bits.drawn == 0 and len(ledger.charges()) == 12
    for key in parts:
        for name, result in again[key].items():
            assert result.reused and result.draw.status == "complete"
            assert (store / result.draw.release_ref).exists()
            pd.testing.assert_frame_equal(result.frame, first[key][name].frame)


def test_fresh_draw_is_charged_and_refused_at_the_cap_before_any_noise(tmp_path, ledger):
    parts = {"2016-07-25|bus": partition(5000)}
    release(parts, SeededBits(1), ledger, tmp_path, "run-1")
    bits = CountingBits(2)
    with pytest.raises(BudgetExceeded, match=r"2016-07-25\|bus"):
        release(parts, bits, ledger, tmp_path, "run-2", fresh=True)
    assert bits.drawn == 0 and len(ledger.charges()) == 6  # nothing charged: all or nothing
    ledger.raise_cap("trip", 16, 12 / 8e6, "test")
    fresh = release(parts, bits, ledger, tmp_path, "run-2", fresh=True)
    assert bits.drawn > 0 and ledger.spend("trip", "2016-07-25|bus").epsilon == pytest.approx(16)
    assert not any(r.reused for r in fresh["2016-07-25|bus"].values())


def test_changed_input_is_a_new_release(tmp_path, ledger):
    release({"2016-07-25|bus": partition(5000)}, SeededBits(1), ledger, tmp_path, "run-1")
    with pytest.raises(BudgetExceeded):
        release({"2016-07-25|bus": partition(5001)}, SeededBits(1), ledger, tmp_path, "run-2")


def test_card_day_modes_share_one_charge_per_marginal(tmp_path, ledger):
    parts = {f"2016-07-25|{m}": partition(2000, i) for i, m in enumerate(("bus", "ferry", "light_rail", "train"))}
    out = release(parts, SeededBits(1), ledger, tmp_path, "run-1", unit="card_day")
    assert len(ledger.charges("card_day")) == 6 and len(ledger.draws()) == 24
    assert {r.charge.scope for p in out.values() for r in p.values()} == {"2016-07-25"}
    assert sorted({r.decision for p in out.values() for r in p.values()}) == ["charge", "join"]


def test_a_resumed_charge_loads_the_draw_a_killed_run_had_stored(tmp_path, store, ledger):
    """A run charged and stored its draws, then was killed before completing: the rerun resumes those charges
    and loads the stored draws; it draws no noise (never two draws under one charge)."""
    parts = {"2016-07-25|bus": partition(5000)}
    scratch = PrivacyLedger(tmp_path / "scratch.sqlite", CAPS)
    drawn = release(parts, SeededBits(1), scratch, store / "scratch", "scratch")["2016-07-25|bus"]
    for d in ledger.begin_many(_requests(parts), run_id="killed"):
        write_parquet_exclusive(drawn[d.charge.marginal].frame, store / d.draw.release_ref)
    bits = CountingBits(3)
    resumed = release(parts, bits, ledger, store, "run-2")["2016-07-25|bus"]
    assert bits.drawn == 0 and len(ledger.charges()) == 6
    for name, result in resumed.items():
        assert result.decision == "resume" and result.draw.status == "complete"
        pd.testing.assert_frame_equal(result.frame, drawn[name].frame, check_categorical=False)


def _requests(parts):
    from opal_dp.core.ledger_records import Request
    from opal_dp.release.marginals.engine import mechanism_id

    p = plan(SeededBits(0))
    from opal_dp.core.input_version import stand_ins

    truths = {k: histograms(v) for k, v in parts.items()}
    prints = {k: fingerprint(truths[k], KEY) for k in parts}
    versions = stand_ins({k: k for k in parts}, prints)  # what the engine stands in without raw files
    return [Request("trip", k, k, k.split("|")[0], name, "replace_one", m.cost(), mechanism_id(m), p.bounds_json(),
                    prints[k], versions[k]) for k in parts for name, m in p.mechanisms.items()]


def test_two_writers_of_one_draw_keep_the_first(store):
    first, second = partition(10), partition(10, 1)
    path = store / "releases" / "d.parquet"
    assert write_parquet_exclusive(first, path).equals(first)
    stands = write_parquet_exclusive(second, path)
    pd.testing.assert_frame_equal(stands, read_parquet(path))
    pd.testing.assert_frame_equal(stands.reset_index(drop=True), first.reset_index(drop=True), check_categorical=False)
    assert sorted(p.name for p in path.parent.iterdir()) == ["d.parquet"]  # the loser's temporary is gone


def test_temporaries_of_dead_writers_are_removed(tmp_path, ledger):
    folder = tmp_path / "releases" / "trip"
    folder.mkdir(parents=True)
    dead = folder / ".x.parquet.999999999.tmp"
    alive = folder / f".y.parquet.{os.getpid()}.tmp"
    dead.write_bytes(b"half")
    alive.write_bytes(b"in progress")
    release({"2016-07-25|bus": partition(100)}, SeededBits(1), ledger, tmp_path, "run-1")
    assert not dead.exists() and alive.exists()


def test_fingerprint_is_keyed_and_covers_every_bin_and_count():
    """Keyed (another key, another fingerprint; equal inputs, equal fingerprints), and any change of one count,
    one time window, one location or the label universe changes it: a fingerprint that skipped a part of the
    mechanism input would let the ledger reuse a draw of different data."""
    truths = histograms(partition(500))
    a = fingerprint(truths, b"a" * 32)
    assert a != fingerprint(truths, b"b" * 32)
    assert a == fingerprint({k: v.copy() for k, v in histograms(partition(500)).items()}, b"a" * 32)

    def changed(name: str, edit) -> str:
        frame = truths[name].copy()
        edit(frame)
        return fingerprint({**truths, name: frame}, b"a" * 32)

    def one_more(frame):
        frame.loc[frame.index[0], COUNT] += 1

    def later(frame):
        frame.loc[frame.index[0], TIME] += 1

    def elsewhere(frame):
        codes = frame[LOC].cat.codes.to_numpy().copy()
        codes[0] = (codes[0] + 1) % len(frame[LOC].cat.categories)
        frame[LOC] = pd.Categorical.from_codes(codes, categories=frame[LOC].cat.categories)

    def renamed(frame):
        frame[LOC] = frame[LOC].cat.rename_categories({"Manly": "Manly Wharf"})

    fingerprints = {changed("tap_on_time", one_more), changed("tap_on_loc", one_more), changed("tap_on_time", later),
                    changed("tap_on_loc", elsewhere), changed("tap_off_time_loc", renamed)}
    assert len(fingerprints) == 5 and a not in fingerprints


@settings(max_examples=25, deadline=None)
@given(n=st.integers(0, 4000), seed=st.integers(0, 2**16), order=st.integers(0, 2**16))
def test_release_is_canonical_and_independent_of_row_order(tmp_path_factory, n, seed, order):
    part = partition(n, seed)
    shuffled = part.sample(frac=1, random_state=order).reset_index(drop=True)
    outputs = []
    for frame in (part, shuffled):
        folder = tmp_path_factory.mktemp("release")
        ledger = PrivacyLedger(folder / "ledger.sqlite", CAPS)
        outputs.append(release({"2016-07-25|bus": frame}, SeededBits(7), ledger, folder, "run")["2016-07-25|bus"])
    for name, result in outputs[0].items():
        pd.testing.assert_frame_equal(result.frame, outputs[1][name].frame)
        truth = histograms(part, [result.marginal])[result.marginal.name]
        keys = result.marginal.dimensions
        assert set(map(tuple, result.frame[keys].astype(str).to_numpy())) <= set(map(tuple, truth[keys].astype(str).to_numpy()))
        floor = plan(SeededBits(0)).mechanisms[name].min_released_count
        assert (result.frame["count"] >= floor).all()


def test_truths_made_in_a_worker_release_what_the_engine_would(tmp_path):
    """``partition_truths`` (run in the per-day workers) gives the histograms the engine makes from the trips and
    the true cells of the trips kept and over the bound; released with them, every draw is the same."""
    kept, over = partition(4000, 3), partition(300, 4)
    write_parquet_exclusive(kept, tmp_path / "kept.parquet")
    write_parquet_exclusive(pd.concat([over.assign(mode="bus"), partition(50, 5).assign(mode="train")],
                                      ignore_index=True), tmp_path / "over.parquet")
    truths, cells = partition_truths(tmp_path / "kept.parquet", tmp_path / "over.parquet", "bus",
                                     [m.name for m in MARGINALS])
    expected = histograms(kept)
    assert sorted(truths) == sorted(expected)
    for name, frame in expected.items():
        pd.testing.assert_frame_equal(truths[name], frame)
    pd.testing.assert_frame_equal(cells, true_cells(expected, over))
    assert cells["count"].sum() == 2 * (4000 + 300) and cells["bounded_count"].sum() == 2 * 4000
    key, outputs = "2016-07-25|bus", []
    for given_truths in (None, {"2016-07-25|bus": truths}):
        folder = tmp_path / f"release-{len(outputs)}"
        ledger = PrivacyLedger(folder / "ledger.sqlite", CAPS)
        outputs.append(release({key: kept}, SeededBits(7), ledger, folder, "run", truths=given_truths)[key])
    for name, result in outputs[0].items():
        pd.testing.assert_frame_equal(result.frame, outputs[1][name].frame)
        assert result.draw.fingerprint == outputs[1][name].draw.fingerprint
    with pytest.raises(ValueError, match="truths must hold"):
        release({key: kept}, SeededBits(7), PrivacyLedger(tmp_path / "l.sqlite", CAPS), tmp_path, "run",
                truths={key: {n: t for n, t in truths.items() if n != "tap_on_time"}})
