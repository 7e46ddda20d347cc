"""The statement's person section equals an independent recomputation from the ledger's charges, and PRIVACY.md
opens with its sentence."""

from __future__ import annotations

from datetime import date, timedelta

from opal_dp.core.accounting import PrivacyCost, compose
from opal_dp.core.ledger import PrivacyLedger
import re

import pytest

from opal_dp.release.statement.person import person_section, person_sentence
from opal_dp.release.statement.markdown import render_markdown
from opal_dp_tests.core.test_ledger import release, request
from opal_dp_tests.release.test_statement import released, statement
from opal_dp.release.statement.runs import ints_of

WIDE = {"trip": (100.0, 1e-3), "card_day": (100.0, 1e-3), "card_period": (100.0, 1e-3)}


def worst_window(ledger: PrivacyLedger, first: str, last: str):
    """Every window of the horizon touching first..last, day by day: the one whose card-level charges cost most."""
    cap = ledger.person_cap()
    charges = [c for c in ledger.charges() if c.unit in ("card_day", "card_period")]
    h = timedelta(days=cap.horizon_days - 1)
    best = None
    start = date.fromisoformat(first) - h
    while start <= date.fromisoformat(last):
        end = (start + h).isoformat()
        inside = [c for c in charges if c.last_date >= start.isoformat() and c.first_date <= end]
        spent = compose([c.cost for c in inside], delta_target=cap.delta)
        if best is None or (spent.epsilon, spent.delta) > (best[0].epsilon, best[0].delta):
            best = (spent, sorted(c.id for c in inside))
        start += timedelta(days=1)
    return best


def test_the_person_section_is_what_the_ledger_charges_give(tmp_path) -> None:
    ledger = PrivacyLedger(tmp_path / "l.sqlite", WIDE, person_cap=(40.0, 1e-5), horizon_days=60)
    day = lambda n: (date(2016, 7, 25) + timedelta(days=n)).isoformat()  # noqa: E731
    release(ledger, *[request("od", unit="card_day", day=day(n), mode="all", cost=PrivacyCost.approx_dp(1.0, 0.0))
                      for n in range(-20, 14)])  # trees before and during the period
    this = release(ledger, *[request(m, unit="card_period", day=day(n), scope=f"{day(0)}..{day(13)}",
                                     cost=PrivacyCost.zcdp(0.1, 1e-8)) for m in ("a", "b") for n in (0, 5)])
    release(ledger, request(unit="trip", day=day(3)))
    charges = {d.charge.id: d.charge for d in this}.values()
    section = person_section(ledger, [day(0), day(13)], charges)
    spent, ids = worst_window(ledger, day(0), day(13))
    assert section["spent"] == spent.describe() and ints_of(section["charges"]) == ids
    assert section["this_release"] == compose([c.cost for c in charges], delta_target=1e-5).describe()
    assert (section["horizon_days"], section["cap"]["epsilon"], section["cap"]["delta"]) == (60, 40.0, 1e-5)
    assert ints_of(section["trip_unit_charges"]) == [c.id for c in ledger.charges("trip")]
    assert section["sentence"].startswith(
        person_sentence(60, 40.0, 1e-5, (section["window"]["first"], section["window"]["last"]), spent.epsilon,
                        section["this_release"]["epsilon"]) + " Trip-level files were")


def test_privacy_md_opens_with_the_person_sentence(tmp_path) -> None:
    card = statement(*released(tmp_path / "card", unit="card_day"))
    assert render_markdown(card).splitlines()[2] == f"**{card['person']['sentence']}**"
    assert card["person"]["this_release"]["epsilon"] > 0
    trip = statement(*released(tmp_path / "trip"))
    assert trip["person"]["sentence"].startswith("This release protects single trips: it has no person-level bound")
    assert render_markdown(trip).splitlines()[2].startswith(f"**{trip['person']['sentence']} Whatever else")


SENTENCE = re.compile(
    r"Whatever one person does with their card, everything published about any (\d+) consecutive days changes the "
    r"probability of any conclusion about them by at most a factor of e\^([\d.e+-]+), plus ([\d.e+-]+) \(epsilon = "
    r"([\d.e+-]+), delta = \3\); the \1 days from (\d{4}-\d\d-\d\d) to (\d{4}-\d\d-\d\d), the costliest such "
    r"stretch overlapping this release, used epsilon = ([\d.e+-]+) of it, this release epsilon = ([\d.e+-]+)\. Someone "
    r"who travels on several cards has this protection for each card, not for all of them together\.")


@pytest.mark.parametrize("unit", ["trip", "card_day", "card_period"])
def test_the_first_sentence_states_one_epsilon_for_the_person_and_never_delta_spent(tmp_path, unit) -> None:
    """The first sentence of PRIVACY.md, per unit: card units state the person's epsilon over the horizon, the
    probability the bound fails, and what the horizon and the release used, each figure the ledger's; the trip unit
    says first that it has no person-level bound. No sentence speaks of delta as something spent or used."""
    ledger, draws = released(tmp_path, unit=unit)
    stated = statement(ledger, draws)
    sentence = stated["person"]["sentence"]
    assert render_markdown(stated).splitlines()[2].startswith(f"**{sentence}")
    assert not re.search(r"delta[^.;]*(spent|used)|(spent|used)[^.;]*delta", render_markdown(stated).splitlines()[2])
    if unit == "trip":
        assert sentence.startswith("This release protects single trips: it has no person-level bound")
        return
    found = SENTENCE.fullmatch(sentence)
    assert found, sentence
    cap = ledger.person_cap()
    days = sorted({c.first_date for c in ledger.charges()} | {c.last_date for c in ledger.charges()})
    window, _ = worst_window(ledger, days[0], days[-1])
    mine = compose([c.cost for c in ledger.charges()], delta_target=cap.delta)
    assert (int(found[1]), float(found[2]), float(found[3]), float(found[4])) == (
        cap.horizon_days, cap.epsilon, cap.delta, cap.epsilon)
    assert (found[5], found[6]) == (stated["person"]["window"]["first"], stated["person"]["window"]["last"])
    assert (date.fromisoformat(found[6]) - date.fromisoformat(found[5])).days == cap.horizon_days - 1
    assert found[5] <= days[-1] and days[0] <= found[6]  # the stretch overlaps the release's dates
    assert float(found[7]) == float(f"{window.epsilon:.3g}") and float(found[8]) == float(f"{mine.epsilon:.3g}")


def test_the_marginals_engine_charges_a_part_of_a_replaced_raw_file_anew(tmp_path) -> None:
    """The reviewer's scenario through ``release_partitions``: card_day, bus drawn from raw version A, the raw file
    replaced (version B), train drawn: six new charges, not six free joins."""
    from opal_dp.core import DiscreteLaplace, SeededBits
    from opal_dp.release.marginals.engine import release_partitions
    from opal_dp.release.marginals.tables import MARGINALS
    from opal_dp.release.marginals.plan import build_plan
    from opal_dp_tests.release.test_engine import partition

    ledger = PrivacyLedger(tmp_path / "l.sqlite", WIDE)
    plan = build_plan("card_day", {m.name: m.default_epsilon for m in MARGINALS}, {m.name: 1e-9 for m in MARGINALS},
                      mechanism="laplace",
                      laplace=DiscreteLaplace(SeededBits(1)))
    day = "2016-07-25"
    bus = release_partitions({f"{day}|bus": partition(3000, 0)}, plan, ledger, tmp_path, "r1", b"k" * 32,
                             input_versions={day: "raw-A"})
    train = release_partitions({f"{day}|train": partition(3000, 1)}, plan, ledger, tmp_path, "r2", b"k" * 32,
                               input_versions={day: "raw-B"})
    assert {r.decision for r in bus[f"{day}|bus"].values()} == {"charge"}
    assert {r.decision for r in train[f"{day}|train"].values()} == {"charge"}
    assert len(ledger.charges("card_day")) == 12 and ledger.spend("card_day", day).epsilon > 15.9
    ferry = release_partitions({f"{day}|ferry": partition(3000, 2)}, plan, ledger, tmp_path, "r3", b"k" * 32,
                               input_versions={day: "raw-B"})
    assert {r.decision for r in ferry[f"{day}|ferry"].values()} == {"join"}
