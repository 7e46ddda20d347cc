"""GeneratePrivateRelease and the OD files: exact consistency, isotonic paths, public domain, ledger charges that
compose with the marginals on one scope."""

from __future__ import annotations

import hashlib
import hmac

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opal_dp.core import BudgetExceeded, PrivacyCost, PrivacyLedger, SecureBits, SeededBits
from opal_dp.core.ledger_records import Request
from opal_dp.core.prefix_tree import Taxonomy, TreeBudget, build_noisy_prefix_tree
from opal_dp.core.units import PrivacyUnit
from opal_dp.network import load_stops
from opal_dp.prep.sequences import TripAlphabet, to_frame
from opal_dp.private_files import write_parquet_atomic
from opal_dp.release.od.generate import _isotonic, consistent_tree, inconsistent_parents, od_counts, sequences_of, top_sequences
from opal_dp.release.periods import Periods
from opal_dp.release.od.engine import OdPlan, fingerprint, release_od_days, sorted_rows
from opal_dp.release.od.publish import od_tables, validate_od

TAXONOMY = Taxonomy(np.array([0, 3, 6]), np.array([3, 3, 4]))


@pytest.fixture(scope="module")
def alphabet() -> TripAlphabet:
    return TripAlphabet.from_stops(load_stops())


def _pava(y: np.ndarray) -> np.ndarray:
    """Reference least-squares non-decreasing fit (pool adjacent violators)."""
    blocks = []
    for v in y:
        blocks.append([v, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            v2, n2 = blocks.pop()
            v1, n1 = blocks.pop()
            blocks.append([(v1 * n1 + v2 * n2) / (n1 + n2), n1 + n2])
    return np.concatenate([[v] * n for v, n in blocks])


def test_isotonic_paths_are_the_least_squares_fit():
    rng = np.random.default_rng(0)
    values = rng.integers(-20, 40, size=(300, 5)).astype(float)
    fitted = _isotonic(values)
    for row, fit in zip(values, fitted):
        assert np.allclose(fit, _pava(row))


@pytest.mark.parametrize("epsilon", [0.3, 1.0, 5.0])
def test_every_parent_equals_its_children_plus_terminals(epsilon):
    rng = np.random.default_rng(int(epsilon * 10))
    lengths = rng.integers(1, 5, size=4000)
    seqs = rng.integers(0, 10, size=(4000, 4))
    seqs[np.arange(4) >= lengths[:, None]] = -1
    seqs[:2000, 0] = 0  # a heavy branch
    tree = consistent_tree(build_noisy_prefix_tree(seqs, TAXONOMY, TreeBudget(epsilon, 4), SecureBits()))
    assert inconsistent_parents(tree) == 0
    assert len(tree) > 1 and tree.loc[0, "level"] == 0 and (tree["count"].iloc[1:] > 0).all()
    parent = tree["parent"].to_numpy()
    assert (tree["count"].to_numpy()[1:] <= tree["count"].to_numpy()[parent[1:]]).all()
    seq, counts = sequences_of(tree)
    assert counts.sum() == tree.loc[0, "count"]  # the sanitized dataset has the root's number of sequences


def test_inconsistency_is_counted():
    tree = pd.DataFrame({"level": [0, 1, 1], "parent": [-1, 0, 0], "symbol": [-1, 1, 2], "count": [10, 6, 3],
                         "terminal": [0, 6, 3]})
    assert inconsistent_parents(tree) == 1  # 10 != 6 + 3


def test_od_files_stay_in_the_public_domain(alphabet, tmp_path):
    syms = alphabet.encode(["train", "bus", "train"], ["Central", "2000", "Town Hall"], ["Town Hall", "-1", "Central"])
    seqs = np.array([[syms[0], syms[2], -1]] * 400 + [[syms[1], -1, -1]] * 300)
    taxonomy = Taxonomy(alphabet.groups["first"].to_numpy(), alphabet.groups["size"].to_numpy())
    tree = consistent_tree(build_noisy_prefix_tree(seqs, taxonomy, TreeBudget(20.0, 3), SeededBits(2)))
    od = od_counts(tree, alphabet.symbols, "20160725")
    assert set(zip(od["mode"], od["origin"], od["destination"])) >= {("train", "Central", "Town Hall"),
                                                                     ("bus", "2000", "-1")}
    top = top_sequences(tree, alphabet.labels, "20160725", 2)
    assert top["sequence"].iloc[0] == "train:Central>Town Hall | train:Town Hall>Central"
    tables = od_tables({"2016-07-25": tree.assign(draw_id=1)}, alphabet, 5)
    for name, frame in tables.items():
        frame.to_csv(tmp_path / f"{name}.csv", index=False)
    files = ["od.csv", "od-sequences.csv"]
    statement = {"date_runs": [["20160725", "20160725"]], "files": files}
    assert validate_od(tmp_path, statement, alphabet) == []
    bad = tables["od"].copy()
    bad.loc[0, "origin"] = "Nowhere"
    bad.to_csv(tmp_path / "od.csv", index=False)
    assert any("public domain" in p for p in validate_od(tmp_path, statement, alphabet))
    bad = tables["od"].copy()
    bad.loc[bad["mode"] == "train", "mode"] = "ferry"  # train stations are no ferry wharves
    bad.to_csv(tmp_path / "od.csv", index=False)
    assert validate_od(tmp_path, statement, alphabet) == ["od.csv: a (mode, origin, destination) outside the public domain"]
    tables["od"].to_csv(tmp_path / "od.csv", index=False)
    seqs = tables["od-sequences"].copy()
    seqs.loc[0, "sequence"] = seqs.loc[0, "sequence"].replace("train:Central>Town Hall", "train:Central>Nowhere")
    seqs.to_csv(tmp_path / "od-sequences.csv", index=False)
    assert validate_od(tmp_path, statement, alphabet) == ["od-sequences.csv: a trip outside the public domain"]
    assert any("date" in p for p in validate_od(tmp_path, {"date_runs": [["20160726", "20160726"]], "files": files}, alphabet))


def _plan(unit=PrivacyUnit.CARD_DAY) -> OdPlan:
    return OdPlan(unit, TreeBudget(1.0, 3), TAXONOMY)


def release_od_day(seqs, day, plan, ledger, root, run_id, key, fresh=False):
    """One date through ``release_od_days``, its sequences stored first as the pipeline stores them."""
    path = root / "sequences" / run_id / f"{day}.parquet"
    write_parquet_atomic(to_frame(np.asarray(seqs, dtype=np.int32)), path)
    ((_, drawn),) = release_od_days({day: path}, plan, ledger, root, run_id, key, fresh)
    return drawn


def test_od_is_charged_on_the_marginals_scope_and_the_ledger_enforces_the_cap(tmp_path):
    ledger = PrivacyLedger(tmp_path / "ledger.sqlite", {"card_day": (1.5, 1e-6)})
    marginal = Request("card_day", "2016-07-25", "2016-07-25|bus", "2016-07-25", "tap_on_time", "add_remove",
                       PrivacyCost.approx_dp(1.0, 1e-7), "{}", "{}", "x", "raw-v1")
    ledger.begin_many([marginal], run_id="r0")
    seqs = np.array([[0, 1, -1]] * 50)
    with pytest.raises(BudgetExceeded):  # 1.0 (marginal) + 1.0 (tree) > 1.5 on the date
        release_od_day(seqs, "2016-07-25", _plan(), ledger, tmp_path, "r1", b"k" * 32)
    first = release_od_day(seqs, "2016-07-26", _plan(), ledger, tmp_path, "r1", b"k" * 32)
    assert first.decision == "charge" and first.charge.scope == "2016-07-26" and first.charge.marginal == "od"
    again = release_od_day(seqs[::-1].copy(), "2016-07-26", _plan(), ledger, tmp_path, "r2", b"k" * 32)
    assert again.decision == "reuse" and again.tree.equals(first.tree)  # same multiset: no new noise, no charge
    with pytest.raises(BudgetExceeded):
        release_od_day(seqs, "2016-07-26", _plan(), ledger, tmp_path, "r3", b"k" * 32, fresh=True)
    assert ledger.spend("card_day", "2016-07-26").epsilon == pytest.approx(1.0)


def test_card_period_charges_each_date_to_the_period(tmp_path):
    ledger = PrivacyLedger(tmp_path / "ledger.sqlite", {"card_period": (10.0, 1e-6)})
    plan = OdPlan(PrivacyUnit.CARD_PERIOD, TreeBudget(1.0, 3), TAXONOMY, Periods.parse("2016-07-25..2016-07-26"))
    for day in ("2016-07-25", "2016-07-26"):
        release_od_day(np.array([[0, 1, -1]] * 50), day, plan, ledger, tmp_path, "r", b"k" * 32)
    assert ledger.spend("card_period", "2016-07-25..2016-07-26").epsilon == pytest.approx(2.0)


def test_card_period_dates_released_together_are_charged_one_tree_each(tmp_path):
    """The pipeline asks for a period's dates in one batch, all under the period's one input version: each date's
    tree is its own mechanism and must open its own charge, not join the first date's as a part of one histogram.
    Kills the mutant that names every date's tree ``od`` (the period then paid for one tree)."""
    ledger = PrivacyLedger(tmp_path / "ledger.sqlite", {"card_period": (10.0, 1e-6)})
    plan = OdPlan(PrivacyUnit.CARD_PERIOD, TreeBudget(1.0, 3), TAXONOMY, Periods.parse("2016-07-25..2016-07-26"))
    days = ("2016-07-25", "2016-07-26")
    paths = {day: tmp_path / "sequences" / f"{day}.parquet" for day in days}
    for path in paths.values():
        write_parquet_atomic(to_frame(np.array([[0, 1, -1]] * 50, dtype=np.int32)), path)
    drawn = dict(release_od_days(paths, plan, ledger, tmp_path, "r", b"k" * 32,
                                 input_versions={day: "raw-period-v1" for day in days}))
    assert [drawn[day].decision for day in days] == ["charge", "charge"]
    assert sorted(c.marginal for c in ledger.charges()) == ["od 2016-07-25", "od 2016-07-26"]
    assert ledger.spend("card_period", "2016-07-25..2016-07-26").epsilon == pytest.approx(2.0)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 40), st.integers(1, 5), st.sampled_from([(-1, 3), (-1, 161_424), (-(2**31), 2**31 - 1)]),
       st.integers(0, 2**32 - 1))
def test_sorted_rows_is_the_lexicographic_order(n, height, bounds, seed):
    """The packed sort (ranks in 64 bits) and its fallback (wide columns) both give ``lexsort``'s order, so the
    tree's input fingerprint is the same whatever the route."""
    rows = np.random.default_rng(seed).integers(bounds[0], bounds[1], size=(n, height), endpoint=True, dtype=np.int64)
    rows = rows.astype(np.int32)
    expected = rows[np.lexsort(rows.T[::-1])]
    got = sorted_rows(rows)
    assert got.dtype == rows.dtype and np.array_equal(got, expected)


def test_the_fingerprint_is_of_the_multiset_of_sequences():
    rows = np.array([[3, 1, -1], [0, 7, 2], [3, 1, -1], [3, 0, 9]], dtype=np.int32)
    key = b"k" * 32
    expected = hmac.new(key, rows[np.lexsort(rows.T[::-1])].tobytes() + b"(4, 3)", hashlib.sha256).hexdigest()
    assert fingerprint(rows, key) == fingerprint(rows[::-1], key) == expected
    assert fingerprint(rows[:3], key) != expected != fingerprint(rows, b"x" * 32)


def test_sorted_rows_with_more_than_64_bits_of_ranks_falls_back_to_lexsort():
    rng = np.random.default_rng(7)  # 70,000 distinct values a column: 17 bits each, 68 in all
    rows = np.stack([rng.permutation(70_000) * 2 for _ in range(4)], axis=1).astype(np.int32)
    assert np.array_equal(sorted_rows(rows), rows[np.lexsort(rows.T[::-1])])
