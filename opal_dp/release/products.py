"""The products a release makes, each declared once in its own package: a name; ``costs(settings, unit)``, what it
charges one ledger scope of ``unit`` under the release's ``PrivacySettings`` on top of the marginals, computed by
the function its own plan charges with; and ``publication``, what it puts in the shared dated publication (or
None). The marginals' budget is what the weekly share solves for (``release.share``); everything else a scope is
charged comes from here, so the share, the default caps and the ledger's caps (``release.settings``) loop over
``PRODUCTS`` and never name a product. The publication (``release.publish``, ``release.published_folder``,
``release.statement.markdown``) loops over ``PUBLICATIONS`` likewise. A new product adds one line."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from opal_dp.core import PrivacyCost, PrivacyUnit
from opal_dp.release.marginals.product import MARGINALS_PRODUCT
from opal_dp.release.od.product import OD_HIERARCHY, OD_TREE
from opal_dp.release.synthetic.product import SYNTHETIC


class Publication(Protocol):
    """A product's files in the shared publication: ``tables``, the stems it may publish in a date's folder (each
    also combined over the dates, in this order); ``files``, those a statement says the release has;
    ``date_problems``, what is wrong with its files among the ``present`` ones of one date's folder (the
    statement, when known, says what was published); ``markdown``, its section of PRIVACY.md. They read published
(DP) files, the statement and public reference data only: post-processing, no privacy cost."""

    tables: tuple[str, ...]

    def files(self, statement: Mapping) -> tuple[str, ...]: ...

    def date_problems(self, folder: Path, day: str, present: set[str], modes: set[str], remainders: bool,
                      statement: Mapping | None) -> list[str]: ...

    def markdown(self, statement: Mapping) -> list[str]: ...


class Product(Protocol):
    name: str
    publication: Publication | None

    def costs(self, settings, unit: PrivacyUnit) -> list[PrivacyCost]: ...


PRODUCTS: tuple[Product, ...] = (MARGINALS_PRODUCT, OD_TREE, OD_HIERARCHY, SYNTHETIC)
PUBLICATIONS: tuple[Publication, ...] = tuple(dict.fromkeys(p.publication for p in PRODUCTS if p.publication is not None))
"""What the shared publication holds, in registry order, each once (the OD tree and hierarchy share the OD files)."""


def product_costs(settings, unit: PrivacyUnit) -> list[PrivacyCost]:
    """What the enabled products charge one scope of ``unit`` besides the marginals, in registry order."""
    return [cost for product in PRODUCTS for cost in product.costs(settings, unit)]
