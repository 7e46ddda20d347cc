"""The products a release makes, each declared once in its own package: a name; ``costs(settings, unit)``, what it
charges one ledger scope of ``unit`` under the release's ``PrivacySettings`` on top of the marginals, computed by
the function its own plan charges with; ``publication``, what it puts in the shared dated publication (or None); and
``dated``, how the publish asset reads, gates and states its part of each date beside the marginals (or None); and
``audit(settings)``, the empirical audit of its ledger charges the audit asset runs beside the marginals' (or None). The
marginals' budget is what the weekly share solves for (``release.share``); everything else a scope is charged comes
from here, so the share, the default caps and the ledger's caps (``release.settings``) loop over ``PRODUCTS`` and
never name a product. The publication (``release.publish``, ``release.published_folder``,
``release.statement.markdown``) loops over ``PUBLICATIONS``, the publish asset (``defs.marginals.publish``) over
``DATED_PARTS`` and the audit asset (``defs.marginals.audit``) over ``PRODUCTS``, likewise. A new product adds one line."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol

import pandas as pd

from opal_dp.core import PrivacyCost, PrivacyLedger, PrivacyUnit
from opal_dp.release.marginals.product import MARGINALS_PRODUCT
from opal_dp.release.od.product import OD_HIERARCHY, OD_TREE
from opal_dp.release.synthetic.product import SYNTHETIC


class Publication(Protocol):
    """A product's files in the shared publication: ``tables``, the stems it may publish in a date's folder (each
    also combined over the dates, in this order); ``files``, those a statement says the release has;
    ``date_problems``, what is wrong with its files among the ``present`` ones of one date's folder (the
    statement, when known, says what was published); ``markdown``, its section of PRIVACY.md; ``notes``, what a row
    of each file counts, and ``columns(statement)``, (column, stems, meaning) of its files, for the page's file list
    and data dictionary. They read published (DP) files, the statement and public reference data only:
    post-processing, no privacy cost."""

    tables: tuple[str, ...]
    notes: Mapping[str, str]

    def files(self, statement: Mapping) -> tuple[str, ...]: ...

    def date_problems(self, folder: Path, day: str, present: set[str], modes: set[str], remainders: bool,
                      statement: Mapping | None) -> list[str]: ...

    def markdown(self, statement: Mapping) -> list[str]: ...

    def columns(self, statement: Mapping) -> tuple[tuple[str, tuple[str, ...], str], ...]: ...


class DatedPart(Protocol):
    """A product's part of each published date beside the marginals, for the publish asset: ``assets``, the stored
    assets (a file per service date) it is published from, its inputs; ``on(settings)``, those whose release is
    on; ``stored_draws(asset, path)``, the ledger draws one date's file holds (each a dict with a ``draw_id``);
    ``gate(...)(day, frames)``, the problems of a date's frames against the ledger and the tables made from exactly
    them; ``section(stored, ledger)``, its statement section (under ``name``) of the published dates' draws, or
    None. Post-processing of draws the ledger charged: no noise, no charge."""

    name: str
    assets: tuple[str, ...]

    def on(self, settings) -> tuple[str, ...]: ...

    def stored_draws(self, asset: str, path: Path) -> list[dict]: ...

    def gate(self, settings, stops: pd.DataFrame, ledger: PrivacyLedger, private_dir: Path
             ) -> Callable[[str, Mapping[str, pd.DataFrame]], tuple[list[str], dict[str, pd.DataFrame]]]: ...

    def section(self, stored: Mapping[str, Mapping[str, list[dict]]], ledger: PrivacyLedger) -> dict | None: ...


class Product(Protocol):
    name: str
    publication: Publication | None
    dated: DatedPart | None

    def costs(self, settings, unit: PrivacyUnit) -> list[PrivacyCost]: ...

    def audit(self, settings) -> Callable[[PrivacyLedger, pd.DataFrame, float], tuple[bool, dict]] | None:
        """``audit(ledger, stops, alpha)``: whether its charges in the ledger pass its empirical audit at false-alarm
        probability ``alpha``, and the figures (JSON values by name); None when it has none under ``settings``."""


PRODUCTS: tuple[Product, ...] = (MARGINALS_PRODUCT, OD_TREE, OD_HIERARCHY, SYNTHETIC)
PUBLICATIONS: tuple[Publication, ...] = tuple(dict.fromkeys(p.publication for p in PRODUCTS if p.publication is not None))
"""What the shared publication holds, in registry order, each once (the OD tree and hierarchy share the OD files)."""
DATED_PARTS: tuple[DatedPart, ...] = tuple(dict.fromkeys(p.dated for p in PRODUCTS if p.dated is not None))
"""The parts of each published date beside the marginals, in registry order, each once (the OD products share one)."""


def product_costs(settings, unit: PrivacyUnit) -> list[PrivacyCost]:
    """What the enabled products charge one scope of ``unit`` besides the marginals, in registry order."""
    return [cost for product in PRODUCTS for cost in product.costs(settings, unit)]
