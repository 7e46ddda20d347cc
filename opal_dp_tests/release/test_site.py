"""The public page: built from the published tables and statement only, self-contained, escaped, deterministic."""

from __future__ import annotations

import copy
import html
import io
import re
from datetime import date, timedelta

import numpy as np
import pandas as pd
import pytest

from opal_dp.core import sbh
from opal_dp.core.accuracy import error_bound_of_sum
from opal_dp.network import MODES
from opal_dp.prep.schemas import UNKNOWN_LABEL
from opal_dp.release.marginals.open_data import to_open_data
from opal_dp.release.published_folder import FILES
from opal_dp.release.page.common import per_day
from opal_dp.release.page.summary import PageSummary
from opal_dp.release.page.render import PAGE, external_references, links, render_index, stated_guarantee, stated_sizes
from opal_dp.release.page.catalogue import PageSettings
from opal_dp.release.statement.markdown import render_markdown
from opal_dp.release.statement.plain import plain_guarantee
from opal_dp_tests.conftest import TINY_STOPS
from opal_dp_tests.release.test_publish import releases, statement
from opal_dp.release.statement.runs import partitions_section

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
    assert {u for u in links(page) if not u.startswith("#")} == set(FILES) - {PAGE}
    assert {u[1:] for u in links(page) if u.startswith("#")} <= set(re.findall(r'<section id="([^"]+)"', page))
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
    bus = re.search(r'<svg class="chart time-chart" id="time-bus".*?</svg>', page)[0]
    assert "<title>2:30, tap-ons: 18.0 ± 6.0 per day</title>" in bus
    assert "<title>2:30, tap-offs: 69.0 ± 6.0 per day</title>" in bus
    # train: two days, both listing 2:30 (counts 118 and 218): the bound of the sum of two draws, halved
    train = re.search(r'<svg class="chart time-chart" id="time-train".*?</svg>', page)[0]
    two_days = error_bound_of_sum(sbh.pmf(2.0)[1], 2) / 2
    assert two_days != 6.0 and f"<title>2:30, tap-ons: 168.0 ± {two_days:,.1f} per day</title>" in train
    assert len(re.findall("<rect ", bus)) == 3 + 3 and 'id="time-ferry"' not in page  # ferry was not released


def test_map_and_top_locations(page):
    whole = re.search(r'<svg class="map" id="map".*?</svg>', page)[0]
    circles = re.findall(r"<circle [^>]*><title>([^<]*)</title>", whole)
    assert sorted(circles) == sorted(["Bus, postcode 2000: 18.0 tap-ons per day",
                                      "Bus, postcode 2010: 19.0 tap-ons per day",
                                      "Train, Central: 170.0 tap-ons per day"])
    assert "3 published locations with no coordinates" in page  # bus Central, train 2000 and 2010
    top = re.search(r'<table class="top-locations" id="top-train">.*?</table>', page, re.S)[0]
    assert re.findall(r"<tr><td>([^<]*)</td>", top) == ["Central", "2010", "2000"]
    assert re.search(r'<svg class="map" id="map".*?class="scale-bar".*?</svg>', page)
    assert ">Central</text>" in whole  # the busiest place is labelled


def _without(tables: dict[str, pd.DataFrame], table: str, **row: str) -> dict[str, pd.DataFrame]:
    """The tables with the one row of ``table`` matching ``row`` left out, as if its noisy count missed the
    threshold that day."""
    frame = tables[table]
    hit = np.logical_and.reduce([frame[k].astype(str) == v for k, v in row.items()])
    assert hit.sum() == 1, row
    return {**tables, table: frame[~hit]}


def test_a_suppressing_design_averages_only_what_was_published_every_day(tables, stated, stops):
    """SBH leaves out counts under its threshold: train Central's tap-ons and the 2:30 tap-ons of train published on
    one of train's two days have no average (the day left out could hold up to 34, half of it far beyond the ±), are
    named as such, and are neither listed, drawn, nor given a bar; what was published on both days is unchanged."""
    partial = _without(_without(tables, "loc", mode="train", date="20160726", tap="on", loc="Central"),
                       "time", mode="train", date="20160726", tap="on", time="2:30")
    page = render_index(partial, stated, stops)
    top = re.search(r'<table class="top-locations" id="top-train">.*?</table>', page, re.S)[0]
    assert re.findall(r"<tr><td>([^<]*)</td>", top) == ["2010", "2000"]
    assert "1 other location of this mode was published on too few days to average (in loc.csv)." in page
    whole = re.search(r'<svg class="map" id="map".*?</svg>', page)[0]
    assert not re.findall(r"<title>Train, Central", whole) and "1 location published on too few days is not drawn" in page
    train = re.search(r'<svg class="chart time-chart" id="time-train".*?</svg>', page)[0]
    assert "2:30, tap-ons" not in train and "<title>13:30, tap-ons: 169.0 ± " in train
    assert "<title>2:30, tap-offs: 219.0 ± " in train  # its tap-offs were published on both days
    assert "a window has a bar only where its days without a published count can lower its average by no more than its bar" in page
    assert "a location is listed only where its days without a published count can lower its average by no more" in page
    time = partial["time"]
    no_window = {**partial, "time": time[(time["mode"] != "train") | (time["date"] != "20160726")
                                         | (time["time"] == UNKNOWN_LABEL)]}
    assert "No 15-minute window of this mode was published on enough of its 2 days." in render_index(
        no_window, stated, stops)
    loc = partial["loc"]
    no_place = {**partial, "loc": loc[(loc["mode"] != "train") | (loc["date"] != "20160726")]}
    assert "No location of this mode was published on enough of its 2 days." in render_index(no_place, stated, stops)


def test_a_key_missing_on_a_few_of_many_days_keeps_its_average_where_the_gap_is_within_its_bound():
    """Over 60 days (discrete Laplace of scale 2, threshold 35): a place missing one day can be understated by at most
    34 / 60 = 0.57, within its ± (the bound of 59 draws over 60 days, about 0.7), and keeps its average; one missing
    half its days could be 17 low and has none. Without ``whole`` both are averaged."""
    marginal = {"noise": "discrete_laplace", "scale": 2.0, "min_released_count": 35}
    rows = pd.DataFrame({"loc": ["all"] * 60 + ["one gap"] * 59 + ["half"] * 30, "count": 100})
    averaged = per_day(rows, "loc", 60, marginal, whole=True)
    assert averaged.loc["one gap", "average"] == pytest.approx(59 * 100 / 60)
    assert 34 / 60 <= averaged.loc["one gap", "error"] and np.isnan(averaged.loc["half", "average"])
    assert averaged.loc["all", "average"] == 100
    assert per_day(rows, "loc", 60, marginal)["average"].notna().all()


def test_a_consistent_design_counts_a_missing_count_as_0(tables, stated, stops):
    """The consistent designs list every one-way count that rounds to 1 or more: a missing one is an estimate of 0."""
    partial = _without(tables, "loc", mode="train", date="20160726", tap="on", loc="Central")
    consistent = copy.deepcopy(stated) | {"design": {"name": "public_domain", "tau": 5,
                                                     "expected_false_cells_per_day": 1.0}}
    page = render_index(partial, consistent, stops)
    top = re.search(r'<table class="top-locations" id="top-train">.*?</table>', page, re.S)[0]
    assert re.findall(r"<tr><td>([^<]*)</td>", top) == ["2010", "2000", "Central"]
    assert "<tr><td>Central</td><td class=\"num\">60.0 ± " in top  # 120 on one of two days
    assert "published on too few days" not in page and "(estimates under 1) count as 0" in page


def test_the_measured_trend_names_what_its_bound_leaves_out(tables, stated, stops):
    """totals.csv counts a card's first trips of a day only: the page says which, from the statement, and that the ±
    does not cover the trips left out."""
    time = tables["time"]
    totals = (time[time["time"] != "-1"].groupby(["mode", "date", "tap"], observed=True)["count"].sum()
              .reset_index().assign(error_95=9))
    measured = copy.deepcopy(stated) | {"od": {"files": ["totals.csv"], "hierarchy": {"totals": {
        "sigma": 4.5, "max_items": 3, "max_per_mode": 1, "error_bound_95": 9}}}}
    page = render_index(PageSummary.of_tables({**tables, "totals": totals}), measured, stops)
    trend = re.search(r'<section id="trend".*?</section>', page, re.S)[0]
    assert ("from totals.csv, where each is measured on its own and never suppressed; a card counts with its first 3 "
            "trips of a day, at most 1 of them in one mode, so a card's further trips that day are not counted and the "
            "figures run low by those few trips, which the ± does not cover") in trend


def test_a_week_with_totals_but_no_marginals_of_a_mode_has_its_weekly_row(tables, stated, stops):
    """totals.csv covers every mode of a week's OD release; a mode whose marginals were not released that week (a
    refused or pending (week, mode)) still gets that week's row, per date of its totals, instead of failing the page."""
    totals = pd.DataFrame({"mode": "train", "date": ["20160725", "20160726", "20160801"], "tap": "on",
                           "count": [1000, 1200, 1400], "error_95": 9})
    totals = pd.concat([totals, totals.assign(tap="off")], ignore_index=True)
    measured = copy.deepcopy(stated) | {"od": {"files": ["totals.csv"], "hierarchy": {"totals": {
        "sigma": 4.5, "max_items": 3, "max_per_mode": 1, "error_bound_95": 9}}}}
    page = render_index(PageSummary.of_tables({**tables, "totals": totals}), measured, stops)
    weeks = re.search(r"<summary>Train: trips per day of each week since the first published date</summary>(.*?)"
                      r"</table>", page, re.S)[1]
    assert re.findall(r'<tr><td>([\d-]+)</td><td class="num">(\d)</td><td class="num">([\d,]+) ±', weeks) == [
        ("2016-07-25", "2", "1,100"), ("2016-08-01", "1", "1,400")]
    one_date = totals[totals["date"] != "20160726"]  # the OD release of 2016-07-26 withheld, its marginals not
    page = render_index(PageSummary.of_tables({**tables, "totals": one_date}), measured, stops)
    weeks = re.search(r"<summary>Train: trips per day of each week since the first published date</summary>(.*?)"
                      r"</table>", page, re.S)[1]
    assert re.findall(r'<tr><td>([\d-]+)</td><td class="num">(\d)</td><td class="num">([\d,]+) ±', weeks)[0] == (
        "2016-07-25", "1", "1,000")  # a sum of one date's total, divided by that one date


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


def test_a_mode_whose_only_time_count_is_of_unknown_time_gets_a_note_not_an_empty_chart(tables, stated, stops):
    time = tables["time"]
    unknown = (time["mode"] == "bus") & (time["tap"] == "off") & (time["time"] == UNKNOWN_LABEL)
    assert unknown.any(), "the fixture publishes bus tap-offs of unknown time"
    page = render_index({**tables, "time": time[(time["mode"] != "bus") | unknown]}, stated, stops)
    assert 'id="time-bus"' not in page
    assert "No time-of-day count of this mode was published." in page


def test_the_page_reads_on_a_phone_and_has_a_catalogue_entry(page, stated):
    assert '<meta name="viewport" content="width=device-width, initial-scale=1">' in page
    assert "Creative Commons Attribution 4.0 International (CC BY 4.0)" in page and "CC-BY-4.0" in page
    assert '<span id="coverage">2016-07-25 to 2016-07-26 (2 service dates)</span>' in page
    assert "weekly" in page and "Publisher</dt><dd>not stated" in page
    assert "release r1, 2016-07-25 to 2016-07-26 (2 service dates)" in page  # the citation


def test_the_catalogue_settings_are_the_publishers_and_escaped(tables, stated, stops, monkeypatch):
    monkeypatch.setenv("OPAL_DP_PUBLISHER", "Transport <Agency> & Co")
    monkeypatch.setenv("OPAL_DP_CONTACT", "opendata@agency.example")
    monkeypatch.setenv("OPAL_DP_LICENCE", "CC0-1.0")
    monkeypatch.setenv("OPAL_DP_UPDATE_FREQUENCY", "")
    settings = PageSettings.from_env()
    assert settings == PageSettings("Transport <Agency> & Co", "opendata@agency.example", "CC0-1.0", "weekly")
    page = render_index(tables, stated, stops, settings=settings)
    assert "Transport &lt;Agency&gt; &amp; Co" in page and "<Agency>" not in page
    assert "Creative Commons Zero 1.0 Universal (CC0 1.0)" in page and "CC BY 4.0" not in page
    assert "opendata@agency.example" in page and external_references(page) == []


def test_daily_trend_is_the_sum_of_time_csv_per_date_and_tap(page):
    train = re.search(r'<svg class="chart trend-chart" id="trend-train".*?</svg>', page)[0]
    titles = re.findall(r"<title>([^<]*)</title>", train)
    three = error_bound_of_sum(sbh.pmf(2.0)[1], 3)
    # tap-on: every window; tap-off: the -1 rows (no tap-off recorded) left out
    assert titles == [f"Mon 25 Jul 2016 (weekday), tap-ons: {118 + 119 + 120} ± {three:,.0f}",
                      f"Tue 26 Jul 2016 (weekday), tap-ons: {218 + 219 + 220} ± {three:,.0f}",
                      f"Mon 25 Jul 2016 (weekday), tap-offs: {169 + 170 + 171} ± {three:,.0f}",
                      f"Tue 26 Jul 2016 (weekday), tap-offs: {269 + 270 + 271} ± {three:,.0f}"]
    assert "Service date</text>" in train and "Trips per day</text>" in train


def test_weekends_are_shaded_and_marked(tables, stated, stops):
    weekend = copy.deepcopy(stated)
    weekend["partitions"] = partitions_section([("20160730", "bus"), ("20160801", "bus")])
    bus = {name: frame[frame["mode"] == "bus"].assign(date=frame["date"].astype(str).replace("20160725", "20160730"))
           for name, frame in tables.items()}
    page = render_index(bus, weekend, stops)
    trend = re.search(r'<svg class="chart trend-chart" id="trend-bus".*?</svg>', page)[0]
    assert len(re.findall(r'fill="#e8e8e8"', trend)) == 2  # Saturday 30 and Sunday 31 July are shaded
    assert re.search(r'<rect [^>]*><title>Sat 30 Jul 2016 \(weekend\), tap-ons: 57 ± ', trend)  # a square
    assert "<title>Sat 30 Jul 2016 (weekend), tap-offs: 210 ± " in trend


def test_the_data_dictionary_names_every_column(page, tables, stated, stops):
    dictionary = re.search(r'<section id="dictionary".*?</section>', page, re.S)[0]
    documented = re.findall(r"<tr><td><code>([^<]*)</code></td>", dictionary)
    assert documented == list(next(iter(tables.values())).columns)
    assert "<strong>postcode</strong> of the stop for bus" in dictionary and "<code>-1</code>: unknown" in dictionary
    assert "<code>other</code>" not in dictionary  # no remainder rows in this design
    with_od = copy.deepcopy(stated) | {"od": {"files": ["od.csv", "od-sequences.csv"]}, "design": {"name": "public_domain", "tau": 5,
                                                         "expected_false_cells_per_day": 1.0}}
    dictionary = re.search(r'<section id="dictionary".*?</section>', render_index(tables, with_od, stops), re.S)[0]
    assert "<code>other</code>: a remainder row" in dictionary
    assert {"origin, destination", "rank", "trips", "sequence"} <= set(
        re.findall(r"<tr><td><code>([^<]*)</code></td>", dictionary))
    od_only = copy.deepcopy(stated) | {"od": {"files": ["od.csv"]}}  # the hierarchy's od.csv, no prefix trees
    dictionary = re.search(r'<section id="dictionary".*?</section>', render_index(tables, od_only, stops), re.S)[0]
    documented = re.findall(r"<tr><td><code>([^<]*)</code></td>", dictionary)
    assert "origin_district, destination_district" in documented and not {"rank", "trips", "sequence"} & {*documented}
    assert "od-sequences" not in dictionary and "<code>200x</code>" in dictionary  # districts as od.csv writes them


def test_file_sizes_are_stated_when_given(tables, stated, stops, page):
    assert stated_sizes(page) == {}
    sizes = {"time.csv": 812, "privacy.json": 25_547, "PRIVACY.md": 1_250_000}
    sized = render_index(tables, stated, stops, sizes)
    assert stated_sizes(sized) == sizes
    assert ">812 B</span>" in sized and ">25.5 kB</span>" in sized and ">1.25 MB</span>" in sized


def test_the_synthetic_sample_is_said_plainly(tables, stated, stops, page):
    assert 'id="synthetic-sample"' not in page and "SYNTHETIC SAMPLE" not in render_markdown(stated)
    sample = copy.deepcopy(stated) | {"data": {"synthetic_sample": True}}
    assert 'id="synthetic-sample"' in render_index(tables, sample, stops)
    assert "SYNTHETIC SAMPLE" in render_markdown(sample)
    for odd in ({"synthetic_sample": "yes"}, "sample", None):  # read defensively: only a true flag counts
        assert 'id="synthetic-sample"' not in render_index(tables, copy.deepcopy(stated) | {"data": odd}, stops)


def test_the_plain_guarantee_comes_first(page, stated, tables, stops):
    lead = re.search(r'<p class="lead" id="plain-guarantee">([^<]*)</p>', page)
    assert lead and lead.start() < page.index('<section id="dataset"')
    assert html.unescape(lead[1]) == plain_guarantee(stated)
    # a trip release says first that it has no person-level bound, then what one trip gets
    assert lead[1].startswith("This release protects single trips: it has no person-level bound")
    assert "one trip" in lead[1] and "epsilon = 8" in lead[1]
    card = copy.deepcopy(stated) | {"person": {"sentence": "Over any 365 consecutive days ... adds (1, 2e-07).",
                                               "bounded": True}}
    assert 'id="plain-guarantee">Over any 365 consecutive days ... adds (1, 2e-07).</p>' in render_index(tables, card,
                                                                                                          stops)
    assert render_markdown(card).splitlines()[2] == "**Over any 365 consecutive days ... adds (1, 2e-07).**"
    older = {k: v for k, v in stated.items() if k != "person"}  # a statement from before the person account
    assert plain_guarantee(older).startswith("Whatever else anyone knows") and "one trip" in plain_guarantee(older)
    for odd in ([], {"sentence": " "}):  # malformed: the per-unit sentence
        assert plain_guarantee(copy.deepcopy(older) | {"person": odd}) == plain_guarantee(older)


def test_the_page_from_combined_date_summaries_is_the_page_from_the_tables(tables, stated, stops, page):
    """The weekly page is built from per-date summaries added up (and a corrected date's taken off again), never
    from the tables: it must be the same page, byte for byte. Kills a summary that loses a count, its number of
    counts (the noise bound) or a date."""
    text = as_read(tables)
    dates = sorted(set(text["time"]["date"]))
    parts = [PageSummary.of_tables({name: frame[frame["date"] == d] for name, frame in text.items()}) for d in dates]
    combined = PageSummary().combine(parts)
    assert render_index(combined, stated, stops) == page
    assert render_index(PageSummary.from_json(combined.to_json()), stated, stops) == page
    assert render_index(combined.combine([parts[0]], [parts[0]]), stated, stops) == page
    assert render_index(PageSummary().combine(parts[1:]), stated, stops) != page


def test_the_daily_chart_shows_the_latest_eight_weeks_and_the_weekly_table_every_week(tables, stated, stops):
    """Ten weeks of dates: the chart's points are the latest 56 dates only (the page grows by a table row a week,
    not a chart point a day), and the weekly table has one row per week since the first date, each the sum of its
    seven dates' tap-ons."""
    dates = [date(2016, 7, 25) + timedelta(n) for n in range(70)]
    bus = {name: pd.concat([frame[(frame["mode"] == "bus") & (frame["date"].astype(str) == "20160725")]
                            .assign(date=f"{d:%Y%m%d}") for d in dates], ignore_index=True)
           for name, frame in tables.items()}
    long = copy.deepcopy(stated)
    long["partitions"] = partitions_section((f"{d:%Y%m%d}", "bus") for d in dates)
    page = render_index(bus, long, stops)
    trend = re.search(r'<svg class="chart trend-chart" id="trend-bus".*?</svg>', page)[0]
    points = re.findall(r"<title>(\w{3} \d\d \w{3} \d{4}) \(week(?:day|end)\), tap-ons", trend)
    assert len(points) == 56 and points[0] == "Mon 08 Aug 2016" and points[-1] == "Sun 02 Oct 2016"
    assert "Trips per day, the latest 8 weeks</h2>" in page
    weekly = re.search(r"Bus: trips per day of each week since the first published date.*?</table>", page, re.S)[0]
    rows = re.findall(r'<tr><td>(\d{4}-\d\d-\d\d)</td><td class="num">(\d+)</td><td class="num">([\d,]+) ± ', weekly)
    time = bus["time"]
    one_day = int(time[(time["tap"] == "on") & (time["time"] != UNKNOWN_LABEL)]["count"].sum()) // len(dates)
    assert [r[0] for r in rows] == [f"{dates[0] + timedelta(7 * w):%Y-%m-%d}" for w in range(10)]
    assert {(r[1], int(r[2].replace(",", ""))) for r in rows} == {("7", one_day)}  # per published day


def test_the_page_names_the_withheld_and_pending_dates(tables, stated, stops):
    """A release whose week was released without a date, and with a date not ready, names both on the page (a reader
    comparing weeks must know which dates a week lacks)."""
    held = copy.deepcopy(stated)
    held["data"] = {**held.get("data", {}), "left_out_dates": ["20160727"], "pending_dates": ["20160815"]}
    page = render_index(tables, held, stops)
    withheld = re.search(r'<p class="note" id="withheld-dates">(.*?)</p>', page)[1]
    pending = re.search(r'<p class="note" id="pending-dates">(.*?)</p>', page)[1]
    assert withheld.endswith(": 2016-07-27.") and pending.endswith(": 2016-08-15.")
    assert 'id="withheld-dates"' not in render_index(tables, stated, stops)
