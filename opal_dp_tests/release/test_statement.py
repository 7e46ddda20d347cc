"""Privacy statement: every figure is a parameter or follows from the parameters alone."""

from __future__ import annotations

import json
import math

import pytest

from opal_dp.core import DiscreteLaplace, Relation, SeededBits, StabilityHistogram
from opal_dp.release.marginals import MARGINALS
from opal_dp.release.statement import (
    PACKAGES,
    TRUE_COUNTS,
    open_data_partition,
    privacy_statement,
    render_markdown,
)

PARTITIONS = ["2016-07-26|train", "2016-07-25|bus", "2016-07-25|train"]
DELTA = 1 / 8_000_000
CAP = (8.0, 6 * DELTA)


def mechanisms(relation: Relation = Relation.REPLACE_ONE, seed: int | None = None) -> dict[str, StabilityHistogram]:
    """The 2016 parameters; noise from the OS CSPRNG unless ``seed`` is given."""
    noise = DiscreteLaplace(SeededBits(seed)) if seed is not None else None
    return {m.name: StabilityHistogram(m.default_epsilon, DELTA, relation, noise) for m in MARGINALS}


def statement(mechs: dict | None = None, relation: str = "replace_one", release_id: str = "r1") -> dict:
    return privacy_statement(
        mechs or mechanisms(), PARTITIONS, relation, CAP, release_id, "2016-08-01T00:00:00+00:00"
    )


def test_parameters_are_the_mechanisms():
    mechs = mechanisms()
    s = statement(mechs)
    assert [m["name"] for m in s["marginals"]] == [m.name for m in MARGINALS]
    for entry in s["marginals"]:
        params = mechs[entry["name"]].describe()
        for key in ("epsilon", "delta", "scale", "threshold", "min_released_count"):
            assert entry[key] == params[key]
    thresholds = {e["name"]: (round(e["threshold"], 2), e["min_released_count"]) for e in s["marginals"]}
    assert thresholds["tap_on_time"] == (34.18, 35) and thresholds["tap_off_time_loc"] == (17.59, 18)
    assert s["per_partition"] == {"epsilon": 8.0, "delta": math.fsum([DELTA] * 6)}
    assert (s["ledger_cap"]["epsilon"], s["ledger_cap"]["delta"]) == CAP
    assert s["privacy_unit"]["relation"] == "replace_one" and s["noise_seeded"] is False
    assert s["partitions"]["keys"] == [
        {"date": "20160725", "mode": "bus"},
        {"date": "20160725", "mode": "train"},
        {"date": "20160726", "mode": "train"},
    ]
    assert set(s["software"]) == set(PACKAGES)


def test_accuracy_figures_follow_from_parameters():
    mechs = mechanisms()
    for entry in statement(mechs)["marginals"]:
        mech = mechs[entry["name"]]
        assert entry["release_probability"] == {str(n): mech.release_probability(n) for n in TRUE_COUNTS}
        assert entry["presence_probability"] == mech.release_probability(1) < 1e-7
        assert entry["error_bound_95"] == mech.error_bound(0.95)


def test_json_round_trip_renders_identically():
    s = statement()
    back = json.loads(json.dumps(s))
    assert back == s
    assert render_markdown(back) == render_markdown(s)


def test_seeded_noise_is_flagged_loudly():
    seeded = statement(mechanisms(seed=7))
    assert seeded["noise_seeded"] is True and "SEEDED" in seeded["mechanism"]["randomness"]
    head = render_markdown(seeded).splitlines()[:4]
    assert any("WARNING" in line and "SEEDED" in line for line in head)
    assert "WARNING" not in render_markdown(statement())


def test_add_remove_relation_and_mismatch():
    s = statement(mechanisms(Relation.ADD_REMOVE), relation="add_remove")
    assert s["privacy_unit"]["relation"] == "add_remove" and "(k = 1)" in s["privacy_unit"]["meaning"]
    assert s["marginals"][0]["scale"] == 1.0
    with pytest.raises(ValueError, match="replace_one"):
        statement(mechanisms(Relation.ADD_REMOVE), relation="replace_one")
    with pytest.raises(ValueError, match="exactly the marginals"):
        privacy_statement({"tap_on_time": mechanisms()["tap_on_time"]}, PARTITIONS, "replace_one", CAP, "r", "t")


def _leaves(node, path=()):
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _leaves(value, (*path, key))
    elif isinstance(node, list):
        for value in node:
            yield from _leaves(value, path)
    else:
        yield path, node


def test_no_figure_derived_from_data():
    """Every number is a parameter, a function of one, or a version; no totals, suppressed bins or rows."""
    mechs = mechanisms()
    s = statement(mechs)
    keys = {key for path, _ in _leaves(s) for key in path}
    for word in ("total", "suppress", "rows", "true", "bins", "sum"):
        assert not any(word in key for key in keys), word
    allowed = {1, *CAP, s["per_partition"]["epsilon"], s["per_partition"]["delta"]}
    for mech in mechs.values():
        allowed |= {v for v in mech.describe().values() if not isinstance(v, (str, bool))}
        allowed |= {mech.release_probability(n) for n in TRUE_COUNTS} | {mech.error_bound(0.95)}
    numbers = {v for _, v in _leaves(s) if isinstance(v, (int, float)) and not isinstance(v, bool)}
    assert numbers <= allowed


@pytest.mark.parametrize("key", ["2016-07-25", "2016-07-25|tram", "2016-13-01|bus", "20160725|bus"])
def test_bad_partition_keys_are_refused(key):
    with pytest.raises(ValueError):
        open_data_partition(key)
