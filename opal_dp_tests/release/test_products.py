"""The product registry as publication sees it: each product's files once, the OD tree and hierarchy one set, and
one part of each date; the publish and audit assets loop over it and import no other product."""

from __future__ import annotations

import ast
from pathlib import Path

import pandas as pd
import pytest

import opal_dp
from opal_dp.release.od.dated import HIERARCHY, OD_DATED, TREE
from opal_dp.release.od.product import OD_HIERARCHY, OD_TREE
from opal_dp.release.marginals.open_data import TABLES
from opal_dp.release.published_format import PublishedFormatError
from opal_dp.release.page.summary import PageSummary
from opal_dp.release.products import DATED_PARTS, PRODUCTS, PUBLICATIONS
from opal_dp.release.publish import _SummaryState
from opal_dp.release.published_folder import DATES, FILES, OWN_FILES, validate_published
from opal_dp.release.settings import PrivacySettings
from opal_dp_tests.release.test_publish import date_files, publish_release


def test_every_product_is_listed_once_and_each_publication_once():
    assert len({p.name for p in PRODUCTS}) == len(PRODUCTS)
    assert OD_TREE.publication is OD_HIERARCHY.publication and len(PUBLICATIONS) == 2
    stems = [t for p in PUBLICATIONS for t in p.tables]
    assert len(stems) == len(set(stems))  # no file is two products'


def test_the_od_products_are_one_part_of_each_date_and_each_audits_only_when_on():
    assert DATED_PARTS == (OD_DATED,) and OD_TREE.dated is OD_HIERARCHY.dated is OD_DATED
    assert OD_DATED.on(PrivacySettings()) == (HIERARCHY,)  # the default: the hierarchy, no trees
    assert OD_DATED.on(PrivacySettings(od_release=True, od_hierarchy_release=False)) == (TREE,)
    assert OD_DATED.on(PrivacySettings(privacy_unit="trip")) == (TREE,)
    audits = {p.name: p.audit(PrivacySettings()) is not None for p in PRODUCTS}
    assert audits == {"marginals": False, "od_tree": False, "od_hierarchy": True, "synthetic": False}
    assert OD_HIERARCHY.audit(PrivacySettings(od_hierarchy_release=False)) is None


def test_the_publish_and_audit_assets_read_every_part_and_import_no_other_product():
    """Adding a product touches its folder and the registry: the marginals' publish and audit assets, the shared
    publication, the page's catalogue and the statement import no module of another product."""
    from opal_dp.definitions import defs

    asset = defs().resolve_assets_def("published_release")
    inputs = {key.to_user_string() for key in asset.keys_by_input_name.values()}
    assert {a for part in DATED_PARTS for a in part.assets} <= inputs
    package = Path(opal_dp.__file__).parent
    shared = [package / "defs/marginals/publish.py", package / "defs/marginals/audit.py",
              package / "release/publish.py", package / "release/published_folder.py",
              package / "release/page/catalogue.py", package / "release/page/render.py",
              *sorted((package / "release/statement").glob("*.py"))]
    others = ("opal_dp.release.od", "opal_dp.release.synthetic", "opal_dp.defs.od", "opal_dp.defs.synthetic")
    for path in shared:
        imported = [node.module for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.ImportFrom)]
        assert not [m for m in imported if m and m.startswith(others)], path


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
