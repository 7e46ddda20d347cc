"""The product registry as publication sees it: each product's files once, the OD tree and hierarchy one set."""

from __future__ import annotations

import pandas as pd
import pytest

from opal_dp.release.od.product import OD_HIERARCHY, OD_TREE
from opal_dp.release.marginals.open_data import TABLES
from opal_dp.release.published_format import PublishedFormatError
from opal_dp.release.page.summary import PageSummary
from opal_dp.release.products import PRODUCTS, PUBLICATIONS
from opal_dp.release.publish import _SummaryState
from opal_dp.release.published_folder import DATES, FILES, OWN_FILES, validate_published
from opal_dp_tests.release.test_publish import date_files, publish_release


def test_every_product_is_listed_once_and_each_publication_once():
    assert len({p.name for p in PRODUCTS}) == len(PRODUCTS)
    assert OD_TREE.publication is OD_HIERARCHY.publication and len(PUBLICATIONS) == 2
    stems = [t for p in PUBLICATIONS for t in p.tables]
    assert len(stems) == len(set(stems))  # no file is two products'


def test_every_release_has_the_marginal_tables_and_its_own_files():
    assert FILES == (*(f"{t}.csv" for t in TABLES), *OWN_FILES)


def test_a_date_with_a_file_no_product_publishes_is_refused(tmp_path):
    folder = publish_release(tmp_path / "published", "r1")
    (folder / DATES / "20160725" / "extra.csv").write_text("date,count\n20160725,1\n")
    with pytest.raises(PublishedFormatError, match=r"files no product publishes: \['extra.csv'\]"):
        validate_published(folder)


def test_a_summary_rebuilt_from_a_dates_files_is_the_one_staged(tmp_path):
    """A lost private summary is rebuilt from every file the date's manifest lists, ``totals.csv`` included."""
    day = date_files()[0]
    totals = pd.DataFrame({"date": [day.date] * 2, "mode": ["bus"] * 2, "tap": ["on", "off"], "count": [40, 31],
                           "error_95": [3, 3]})
    tables = {**day.tables, "totals": totals}
    folder = tmp_path / "latest"
    (folder / DATES / day.date).mkdir(parents=True)
    for name, frame in tables.items():
        frame.to_csv(folder / DATES / day.date / f"{name}.csv", index=False, lineterminator="\n")
    entry = {"draws": None, "files": {f"{name}.csv": {} for name in tables}}
    rebuilt = _SummaryState(tmp_path / "state", {"release_id": None}).of_date(folder, day.date, entry)
    assert rebuilt.to_json() == PageSummary.of_tables(tables).to_json()
    assert len(rebuilt.measured) == 2
