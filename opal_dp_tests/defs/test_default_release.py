"""The default release protects people (issue "one person, one budget"): ``card_period`` over calendar weeks at
the weekly share of the person cap; two weekly releases in one horizon add up in the second statement, and a
release that would pass the person cap is refused before any noise is drawn, with nothing published."""

from __future__ import annotations

import json
import multiprocessing
from datetime import date, timedelta

import dagster as dg
import pytest

from opal_dp import settings
from opal_dp.audit import early
from opal_dp.cli import run_release
from opal_dp.core import PrivacyUnit
from opal_dp.core.accounting import compose
from opal_dp.defs.shared.budget import PrivacyBudget
from opal_dp.defs.shared.storage import default_storage
from opal_dp.release.od.product import OD_HIERARCHY
from opal_dp.release.published_folder import LATEST
from opal_dp.release.statement.markdown import render_markdown
from opal_dp.release.statement.runs import dates_of, draws_of, ints_of
from opal_dp_tests.fuzz.raw import tiny_day, write_day
from opal_dp_tests.release.test_person_statement import worst_window

WEEKS = [[(date(2016, 7, 25) + timedelta(days=7 * w + d)).isoformat() for d in range(7)] for w in range(2)]


def published() -> tuple[dict, str]:
    folder = default_storage().published_dir / LATEST
    return json.loads((folder / "privacy.json").read_text()), (folder / "PRIVACY.md").read_text()


def draws_in(ledger) -> int:
    return len(ledger.draws_on([d for week in WEEKS for d in week]))


@pytest.fixture(scope="module")
def weekly(tmp_path_factory):
    """Two weekly releases of the default configuration, one after the other, then a fresh draw of the first week
    under a person cap that two weeks fit and three do not."""
    root = tmp_path_factory.mktemp("weekly")
    for i, day in enumerate(d for week in WEEKS for d in week):
        write_day(root / "raw", day, tiny_day(day, trips=1_500, seed=i))
    default = PrivacyBudget()
    hierarchy = OD_HIERARCHY.costs(default, PrivacyUnit.CARD_PERIOD)  # one charge a date, in the week's OD release
    week = [m.cost() for m in default.plan().mechanisms.values()] + hierarchy
    # the third release's first charge is that of its first marginal, larger than one date's OD hierarchy: a cap
    # that two weeks fit and two weeks plus one such charge do not refuses the third release before any noise
    two, three = (compose(costs, delta_target=1e-6).epsilon for costs in (week * 2, week * 2 + hierarchy[:1]))
    # the default weekly budget, stated (a smaller person cap would shrink the share), under a person cap that two
    # weeks fit and a third does not start; the week's own cap is set wide, so that the person account refuses
    epsilon, delta = default.budget()
    budget = {"epsilon": epsilon, "delta": delta, "person_cap_epsilon": (two + three) / 2, "cap_epsilon": 100.0,
              "cap_delta": 1e-3}
    with pytest.MonkeyPatch.context() as env:
        env.setenv(settings.DATA_DIR_ENV, str(root))
        instance = dg.DagsterInstance.ephemeral()
        run_release(instance, dates=WEEKS[0], budget=budget, workers=2)  # the suite's one worker starts no early audit
        first, audit = published(), _audit_metadata(instance)
        assert not early._STARTED and not early_processes()  # the audit started early was taken
        run_release(instance, dates=WEEKS[1], budget=budget)
        second = published()
        ledger = PrivacyBudget(**budget).ledger(default_storage())
        before = draws_in(ledger)
        refused = run_release(instance, dates=WEEKS[0], budget=budget | {"fresh_draw": True}, workers=2).refused
        assert list(refused) == [f"{WEEKS[0][0]}..{WEEKS[0][-1]}"]  # the week's runs fail, and nothing else ran
        yield {"first": first, "second": second, "third": published(), "refused": refused[list(refused)[0]],
               "folder": default_storage().published_dir / LATEST,
               "ledger": ledger, "draws": (before, draws_in(ledger)), "cap": budget["person_cap_epsilon"],
               "audit": audit}
        assert not early._STARTED and not early_processes()  # the refused week's: taken, or stopped


def _audit_metadata(instance: dg.DagsterInstance) -> dict:
    record = instance.fetch_materializations(dg.AssetKey("privacy_audit"), limit=1).records[0]
    return {key: value.value for key, value in record.asset_materialization.metadata.items()}


def early_processes() -> list:
    return [p for p in multiprocessing.active_children() if p.name == "opal_dp-early-audit"]


@pytest.mark.slow
def test_the_card_level_audit_started_beside_the_weeks_steps_and_the_roll_up_took_its_report(weekly):
    """The command line's release (with more than one process) starts the roll-up's card-level audit with the week's
    release (``audit.early``): the step stores that call's report, of the plan's unit, runs and bounds."""
    audit = weekly["audit"]
    assert audit["started_early"] is True and audit["privacy_unit"] == "card_period"
    assert audit["runs_per_input"] == settings.audit_runs_from_env()
    assert audit["card_level_bounds"] == PrivacyBudget().bounds.describe()


@pytest.mark.slow
def test_the_default_release_is_card_level_and_opens_with_the_person_sentence(weekly):
    statement, markdown = weekly["first"]
    assert statement["privacy_unit"]["unit"] == "card_period"
    assert [s["scope"] for s in statement["guarantee"]["scopes"]] == [f"{WEEKS[0][0]}..{WEEKS[0][-1]}"]
    person = statement["person"]
    assert person["bounded"] and person["horizon_days"] == 365
    assert (person["cap"]["epsilon"], person["cap"]["delta"]) == (weekly["cap"], 1e-6)
    assert markdown.splitlines()[2] == f"**{person['sentence']}**" == render_markdown(statement).splitlines()[2]
    assert person["sentence"].startswith("Whatever one person does with their card, everything published about any 365 "
                                          "consecutive days")
    od = statement["od"]  # od.csv from the OD hierarchy; no trees (their share goes to the marginals)
    assert od["files"] == ["od.csv", "totals.csv"] and "epsilon_per_tree" not in od
    assert od["hierarchy"]["rho_per_date"] == 0.004 and od["hierarchy"]["totals"]["rho"] == 0.004
    assert dates_of(od["date_runs"]) == [d.replace("-", "") for d in WEEKS[0]] and od["scopes"][0]["unit"] == "card_period"
    charged = {c.id for c in weekly["ledger"].charges() if c.marginal.startswith("od_hierarchy ")}
    assert set(draws_of(od["hierarchy"]["draws"])) <= {d.id for d in weekly["ledger"].draws() if d.charge_id in charged}
    assert "### od.csv: hierarchical OD counts with exact totals" in markdown


@pytest.mark.slow
def test_privacy_md_states_each_product_once_with_the_ledgers_unit(weekly):
    """No paragraph of PRIVACY.md is printed twice, and every product's stated protection is the unit of the ledger
    scopes its charges went to (the OD files' card-day measurements, charged to the week, protect the card-week)."""
    statement, markdown = weekly["second"]
    paragraphs = [p.strip() for p in markdown.split("\n\n") if len(p.strip()) > 80]
    assert len(paragraphs) == len(set(paragraphs)), [p[:80] for p in paragraphs if paragraphs.count(p) > 1]
    units = {c.unit for c in weekly["ledger"].charges()}
    assert units == {"card_period"} == {s["unit"] for s in statement["od"]["scopes"]}
    stated = [statement["privacy_unit"]["protects"], statement["od"]["protects"]]
    assert all(p.startswith(PrivacyUnit.CARD_PERIOD.protects) for p in stated), stated
    assert "one service day" not in markdown.split("## Origin-destination")[1].split("- protects: ")[1].split("\n")[0]


@pytest.mark.slow
def test_the_second_weeks_statement_counts_the_first_and_equals_the_ledger(weekly):
    first, second = weekly["first"][0]["person"], weekly["second"][0]["person"]
    ledger = weekly["ledger"]
    assert set(ints_of(first["this_release_charges"])) < set(ints_of(second["charges"]))
    assert second["spent"]["epsilon"] > first["spent"]["epsilon"]
    spent, ids = worst_window(ledger, WEEKS[0][0], WEEKS[1][-1])
    assert second["spent"] == spent.describe() and ints_of(second["charges"]) == ids
    mine = [c for c in ledger.charges() if c.id in ints_of(second["this_release_charges"])]
    assert second["this_release"] == compose([c.cost for c in mine], delta_target=1e-6).describe()
    scopes = [s["scope"] for s in weekly["second"][0]["guarantee"]["scopes"]]
    assert scopes == [f"{w[0]}..{w[-1]}" for w in WEEKS]  # two weekly scopes in one release


@pytest.mark.slow
def test_a_release_past_the_person_cap_is_refused_before_any_noise_and_nothing_is_published(weekly):
    assert "person budget exceeded" in weekly["refused"]
    assert weekly["draws"][0] == weekly["draws"][1]  # no draw recorded for the refused release
    assert weekly["third"] == weekly["second"]  # latest is still the second release


@pytest.mark.slow
def test_each_file_states_the_share_of_the_trips_its_rows_cover(weekly):
    """privacy.json's coverage is what the published files give (the sum of a file's counts over the trips of
    totals.csv, both taps; od.csv's individually listed pairs over the tap-on trips), never a true count, and the
    page's files table and PRIVACY.md state the same shares."""
    import pandas as pd

    folder = weekly["folder"]
    statement, markdown = weekly["second"]
    coverage = statement["coverage"]
    totals = pd.read_csv(folder / "totals.csv", dtype={"date": str})
    trips = {tap: int(totals.loc[totals["tap"] == tap, "count"].sum()) for tap in ("on", "off")}
    assert coverage["trips"] == trips
    for name in ("time-loc", "time", "loc"):
        counts = pd.read_csv(folder / f"{name}.csv", dtype=str)["count"].astype(int).sum()
        assert coverage["files"][f"{name}.csv"] == round(counts / sum(trips.values()), 4)
    od = pd.read_csv(folder / "od.csv", dtype=str)
    listed = od[(od["level"] == "location") & (od["origin"] != "other")]["count"].astype(int).sum()
    assert coverage["files"]["od.csv"] == round(listed / trips["on"], 4) and coverage["files"]["totals.csv"] == 1.0
    # each table within [0, 1.05] (noise can lift a share past 1). No order between the tables: they are noised and
    # thresholded independently, so on this tiny week one time x location cell through its threshold (p ~1.4e-6)
    # covers more than a time table with none
    assert all(0 <= coverage["files"][f"{name}.csv"] <= 1.05 for name in ("time-loc", "time", "loc"))
    page = (folder / "index.html").read_text(encoding="utf-8")
    for name, share in coverage["files"].items():
        assert f'<a href="{name}">{name}</a>' in page and f"- {name}: {share:.0%}" in markdown
        row = page.split(f'<a href="{name}">{name}</a>', 1)[1].split("</tr>", 1)[0]
        assert f">{share:.0%}</td>" in row, row
