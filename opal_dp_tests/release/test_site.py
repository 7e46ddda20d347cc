"""The public page: built from the published tables and statement only, self-contained, escaped, deterministic."""

from __future__ import annotations

import copy
import html
import io
import re

import pandas as pd
import pytest

from opal_dp.core import sbh
from opal_dp.core.accuracy import error_bound_of_sum
from opal_dp.network import MODES
from opal_dp.release.publish import FILES, to_open_data
from opal_dp.release.site import PAGE, external_references, links, render_index, stated_guarantee
from opal_dp_tests.conftest import TINY_STOPS
from opal_dp_tests.release.test_publish import releases, statement

COORDINATES = {1: (-33.88, 151.20), 2: (-33.87, 151.21), 3: (-33.89, 151.22), 10: (-33.88, 151.206),
               11: (-33.873, 151.207), 12: (-33.817, 151.003), 20: (-33.861, 151.211), 21: (-33.80, 151.28),
               30: (-33.883, 151.204), 31: (-33.91, 151.14)}


@pytest.fixture(scope="module")
def stops() -> pd.DataFrame:
    frame = pd.DataFrame(TINY_STOPS, columns=["stop_id", "mode", "name", "postcode"])
    return frame.assign(mode=pd.Categorical(frame["mode"], categories=list(MODES)),
                        lat=frame["stop_id"].map(lambda s: COORDINATES[s][0]),
                        lon=frame["stop_id"].map(lambda s: COORDINATES[s][1]))


@pytest.fixture(scope="module")
def tables() -> dict[str, pd.DataFrame]:
    return to_open_data(releases())


@pytest.fixture(scope="module")
def stated() -> dict:
    return statement(release_id="r1")


@pytest.fixture(scope="module")
def page(tables, stated, stops) -> str:
    return render_index(tables, stated, stops)


def as_read(tables: dict[str, pd.DataFrame], shuffle: int | None = None) -> dict[str, pd.DataFrame]:
    """The tables as a reader of the CSVs gets them (text), rows optionally shuffled."""
    out = {}
    for name, frame in tables.items():
        read = pd.read_csv(io.StringIO(frame.to_csv(index=False)), dtype=str, keep_default_na=False)
        out[name] = read if shuffle is None else read.sample(frac=1, random_state=shuffle)
    return out


def test_links_are_the_release_files(page):
    assert set(links(page)) == set(FILES) - {PAGE}
    assert external_references(page) == []
    assert "<script" not in page and "http" not in page


def test_the_guarantee_is_the_statements(page, stated):
    g = stated["guarantee"]
    assert stated_guarantee(page) == (g["epsilon"], g["delta"])
    assert f'data-value="{g["epsilon"]!r}">{g["epsilon"]:.4g}</span>' in page
    assert f"<strong>{stated['privacy_unit']['protects']}</strong>" in page
    assert f'<span class="per">{g["per"]}</span>' in page and html.escape(stated["privacy_unit"]["meaning"]) in page
    for example in stated["worked_examples"]:
        assert f"epsilon = {example['epsilon']:.4g}, delta = {example['delta']:.3g}" in page
    assert 'id="seeded"' not in page


def test_a_different_statement_gives_a_different_page(tables, stated, stops):
    changed = copy.deepcopy(stated)
    changed["guarantee"].update(epsilon=3.25, delta=1e-9)
    changed["noise_seeded"] = True
    page = render_index(tables, changed, stops)
    assert stated_guarantee(page) == (3.25, 1e-9) and "epsilon = <span" in page and ">3.25</span>" in page
    assert 'id="seeded"' in page and "NOT differentially private" in page


def test_error_bars_are_the_stated_noise_bounds(page, stated):
    on_time = next(m for m in stated["marginals"] if m["name"] == "tap_on_time")
    assert (on_time["noise"], on_time["scale"], on_time["error_bound_95"]) == ("discrete_laplace", 2.0, 6)
    # bus: one day, so the bar of a published count is the statement's own bound
    bus = re.search(r'<svg class="time-chart" id="time-bus".*?</svg>', page)[0]
    assert "<title>2:30: 18.0 ± 6.0 per day</title>" in bus
    # train: two days, both listing 2:30 (counts 118 and 218): the bound of the sum of two draws, halved
    train = re.search(r'<svg class="time-chart" id="time-train".*?</svg>', page)[0]
    two_days = error_bound_of_sum(sbh.pmf(2.0)[1], 2) / 2
    assert two_days != 6.0 and f"<title>2:30: 168.0 ± {two_days:,.1f} per day</title>" in train
    assert len(re.findall("<rect ", bus)) == 3 and 'id="time-ferry"' not in page  # ferry was not released


def test_map_and_top_locations(page):
    circles = re.findall(r"<circle [^>]*><title>([^<]*)</title>", page)
    assert sorted(circles) == sorted(["Bus, postcode 2000: 18.0 tap-ons per day",
                                      "Bus, postcode 2010: 19.0 tap-ons per day",
                                      "Train, Central: 170.0 tap-ons per day"])
    assert "3 published locations with no coordinates" in page  # bus Central, train 2000 and 2010
    top = re.search(r'<table class="top-locations" id="top-train">.*?</table>', page, re.S)[0]
    assert re.findall(r"<tr><td>([^<]*)</td>", top) == ["Central", "2010", "2000"]


def test_labels_are_escaped(tables, stated, stops):
    evil = "<b>Quay & Co</b>"
    renamed = {name: frame.assign(loc=frame["loc"].astype(str).replace("Central", evil))
               for name, frame in tables.items()}
    page = render_index(renamed, stated, stops.assign(name=stops["name"].replace("Central", evil)))
    assert evil not in page and "<b>" not in page
    assert "Train, &lt;b&gt;Quay &amp; Co&lt;/b&gt;: 170.0 tap-ons per day" in page
    assert external_references(page) == []


def test_the_page_is_a_function_of_the_published_bins(tables, stated, stops, page):
    assert render_index(tables, stated, stops) == page
    assert render_index(as_read(tables), stated, stops) == page
    assert render_index(as_read(tables, shuffle=5), stated, stops) == page


def test_bad_input_is_refused(tables, stated, stops):
    with pytest.raises(ValueError, match="tables must be exactly"):
        render_index({"time": tables["time"]}, stated, stops)


@pytest.mark.parametrize("snippet", [
    '<script>fetch("x")</script>', '<img src="map.png">', '<a href="https://example.org/">x</a>',
    '<a href="//cdn.example/x.csv">x</a>', "<a href='/etc/passwd'>x</a>", "<a href=../private/ledger.sqlite>x</a>",
    '<a href="javascript:alert(1)">x</a>', '<link rel="stylesheet" href="a.css">', '<p style="background:url(a.png)">',
    "<style>@import 'a.css';</style>", "<p>see ftp://example.org</p>", '<svg><use href="#a"/></svg>',
    '<iframe srcdoc="x"></iframe>', '<meta http-equiv="refresh" content="0">',
])
def test_external_references_are_found(page, snippet):
    assert external_references(page.replace("</body>", snippet + "</body>"))


def test_a_mode_with_nothing_published_gets_a_note_not_a_chart(tables, stated, stops):
    empty = {name: frame[frame["mode"] != "bus"] for name, frame in tables.items()}
    page = render_index(empty, stated, stops)
    assert 'id="time-bus"' not in page and 'id="top-bus"' not in page
    assert "No time-of-day count of this mode was published." in page
    assert "No location count of this mode was published." in page
