"""The privacy budget resource: the Dagster wrapper of ``release.settings.PrivacySettings`` (same fields, same
validation), so that the launchpad and the deployment configure every privacy setting of a release in one place."""

import dagster as dg

from opal_dp.core import PrivacyLedger
from opal_dp.locations import DataLocation
from opal_dp.release.settings import CapMismatch, PrivacySettings


class PrivacyBudget(dg.ConfigurableResource, PrivacySettings):
    __doc__ = PrivacySettings.__doc__

    def ledger(self, location: DataLocation) -> PrivacyLedger:
        """``PrivacySettings.ledger``; a configured cap that the ledger does not hold fails the step."""
        try:
            return super().ledger(location)
        except CapMismatch as err:
            raise dg.Failure(description=str(err)) from None
