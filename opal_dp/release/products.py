"""The products a release makes besides the six marginals, each declared once in its own package: a name and
``costs(settings, unit)``, what it charges one ledger scope of ``unit`` under the release's ``PrivacySettings``,
computed by the function its own plan charges with. The marginals' budget is what the weekly share solves for
(``release.share``); everything else a scope is charged comes from here, so the share, the default caps and the
ledger's caps (``release.settings``) loop over ``PRODUCTS`` and never name a product. A new product adds one line."""

from __future__ import annotations

from typing import Protocol

from opal_dp.core import PrivacyCost, PrivacyUnit
from opal_dp.release.od.product import OD_HIERARCHY, OD_TREE
from opal_dp.release.synthetic.product import SYNTHETIC


class Product(Protocol):
    name: str

    def costs(self, settings, unit: PrivacyUnit) -> list[PrivacyCost]: ...


PRODUCTS: tuple[Product, ...] = (OD_TREE, OD_HIERARCHY, SYNTHETIC)


def product_costs(settings, unit: PrivacyUnit) -> list[PrivacyCost]:
    """What the enabled products charge one scope of ``unit``, in registry order."""
    return [cost for product in PRODUCTS for cost in product.costs(settings, unit)]
