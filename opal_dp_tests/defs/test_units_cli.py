"""Every privacy unit and product runs from the command line on the bundled sample (here at 1/50 of its scale, one
week; the synthetic product both weeks), and each budget flag changes what the ledger charges as ``--help`` says."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from opal_dp.cli import _parser, budget_config, ensure_dagster_home
from opal_dp.core import PrivacyUnit
from opal_dp.core.ledger_records import DEFAULT_PERSON_CAP
from opal_dp.defs.shared.budget import PrivacyBudget
from opal_dp.defs.shared.storage import OpalStorage
from opal_dp.release.marginals.tables import MARGINALS
from opal_dp.release.share import split
from opal_dp.settings import STRICT_PERMISSIONS_ENV
from opal_dp_tests.browser.dagster_dev import REPO_ROOT

SMALL_SAMPLE = "from opal_dp.simulate import sample; sample.SAMPLE_SCALE = 0.002; "  # its two weeks
ONE_WEEK_SAMPLE = f"{SMALL_SAMPLE}sample.SAMPLE_DATES = sample.SAMPLE_DATES[:7]; "


def release(tmp_path: Path, *flags: str, sample: str = ONE_WEEK_SAMPLE) -> tuple[subprocess.CompletedProcess,
                                                                                  OpalStorage]:
    """``python -m opal_dp.cli release --sample ...`` on a new data folder, in a process of its own."""
    data, home = tmp_path / "data", ensure_dagster_home(tmp_path / "home")
    env = {**os.environ, "DAGSTER_HOME": str(home)}
    env.pop(STRICT_PERMISSIONS_ENV, None)
    code = f"{sample}import sys; from opal_dp.cli import main; main(sys.argv[1:])"
    done = subprocess.run([sys.executable, "-c", code, "release", "--data-dir", str(data), "--sample", *flags],
                          capture_output=True, text=True, env=env, timeout=900, cwd=REPO_ROOT)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    return done, OpalStorage(data_dir=str(data))


def statement(storage: OpalStorage, *folder: str) -> dict:
    return json.loads(storage.published_dir.joinpath(*folder, "latest", "privacy.json").read_text())


BUDGET_FLAGS = ("--epsilon", "4", "--delta", "3e-6")  # the trip unit's release also shows what the flags charge


@pytest.mark.slow
@pytest.mark.parametrize("unit", ["card_day", "trip"])
def test_each_unit_releases_the_sample_from_the_command_line(tmp_path, unit):
    """card_day takes its share of the person cap per date (365 dates a year), as card_period does per week; trip is
    the 2016 reproduction (8 per (date, mode)), released with the budget flags: they set what the ledger charges, as
    ``--help`` says, where the 2016 budgets are the default."""
    _, storage = release(tmp_path, "--privacy-unit", unit, *(BUDGET_FLAGS if unit == "trip" else ()))
    stated = statement(storage)
    assert stated["privacy_unit"]["unit"] == unit and len(stated["guarantee"]["scopes"]) == (7 if unit == "card_day"
                                                                                         else 28)
    charges = PrivacyBudget(privacy_unit=unit).ledger(storage).charges(unit)
    if unit == "card_day":
        settings = PrivacyBudget(privacy_unit=unit)
        assert settings.person_share and {c.scope for c in charges} == {f"2016-07-{d}" for d in range(25, 32)}
        assert sum(settings.budget()[0].values()) < 1  # a date's share: about 1/365 of a year's
        assert stated["person"]["bounded"] and stated["person"]["spent"]["epsilon"] <= DEFAULT_PERSON_CAP[0]
    else:
        expected_eps, expected_delta = split(4.0, 3e-6)
        assert {c.marginal: c.epsilon for c in charges} == expected_eps
        assert {c.marginal: c.delta for c in charges} == expected_delta
        assert {json.loads(c.mechanism)["epsilon"] for c in charges} == {0.5, 1.0}  # the mechanisms drawn
        assert {name: eps for name, eps in PrivacyBudget(privacy_unit=unit).budget()[0].items()} == {
            m.name: m.default_epsilon for m in MARGINALS}  # without the flags: the 2016 budgets, 1 and 2


@pytest.mark.slow(90)
def test_synthetic_trips_release_with_the_default_in_the_same_weeks(tmp_path):
    """Both weeks of the sample: the synthetic queries are charged to each week's scope, and their one publication
    states each week's guarantee, the worst first."""
    done, storage = release(tmp_path, "--synthetic", sample=SMALL_SAMPLE)
    synthetic, marginals = statement(storage, "synthetic"), statement(storage)
    weeks = ["2016-07-25..2016-07-31", "2016-08-08..2016-08-14"]
    assert [s["scope"] for s in marginals["guarantee"]["scopes"]] == weeks
    charges = PrivacyBudget(synthetic=True).ledger(storage).charges("card_period")
    assert {c.scope for c in charges} == set(weeks)  # the synthetic queries share the weeks' scopes
    assert {c.scope for c in charges if c.marginal.startswith("synthetic:")} == set(weeks)
    assert [s["scope"] for s in synthetic["guarantee"]["scopes"]] == weeks
    assert synthetic["guarantee"]["per"] == "card over each calendar week"
    assert synthetic["guarantee"]["epsilon"] == max(s["epsilon"] for s in synthetic["guarantee"]["scopes"])
    assert synthetic["privacy_unit"]["unit"] == "card_period" and "synthetic trips:" in done.stdout
    # their cost is in the weekly share: the marginals get less than without them
    assert sum(PrivacyBudget(synthetic=True).budget()[0].values()) < sum(PrivacyBudget().budget()[0].values())


def test_each_budget_flag_reaches_the_privacy_budget_resource():
    parse = _parser().parse_args
    assert budget_config(parse(["release"])) == {"privacy_unit": "card_period"}
    person = PrivacyBudget(**budget_config(parse(["release", "--person-cap", "17,2e-6"])))
    assert (person.person_cap_epsilon, person.person_cap_delta) == (17.0, 2e-6)
    assert sum(person.budget()[0].values()) < sum(PrivacyBudget().budget()[0].values())  # a smaller weekly share
    flags = budget_config(parse(["release", "--budget", '{"od_height": 3, "max_per_bin": 2}', "--max-per-bin", "1",
                                 "--epsilon", "2"]))
    assert flags["od_height"] == 3 and flags["max_per_bin"] == 1 and flags["epsilon"] == split(2.0, 1.0)[0]
    assert PrivacyBudget(**flags).nominal[0] == pytest.approx(2.0)
    assert budget_config(parse(["release", "--privacy-unit", "card_day"]))["privacy_unit"] == PrivacyUnit.CARD_DAY
    with pytest.raises(SystemExit, match="--person-cap must be EPSILON or EPSILON,DELTA"):
        budget_config(parse(["release", "--person-cap", "lots"]))
    with pytest.raises(SystemExit, match="--budget: not a JSON object"):
        budget_config(parse(["release", "--budget", "{od_height: 3"]))
