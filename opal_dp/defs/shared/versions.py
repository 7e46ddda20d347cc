"""The input versions of a run's dates, from the raw files in storage (``core.input_version``)."""

from collections.abc import Collection

from opal_dp.core import PrivacyUnit
from opal_dp.core.input_version import input_versions
from opal_dp.defs.shared.budget import PrivacyBudget
from opal_dp.defs.shared.storage import OpalStorage
from opal_dp.prep.ingest import raw_files


def raw_input_versions(storage: OpalStorage, privacy_budget: PrivacyBudget, dates: Collection[str],
                       unit: PrivacyUnit, period: Collection[str] = ()) -> dict[str, str]:
    """Date -> the input version of the ledger scope it is released in under ``unit`` (a card_period: every date
    of ``period``)."""
    scope_period = period if unit is PrivacyUnit.CARD_PERIOD else ()
    return input_versions(raw_files(storage.raw_dir), dates, privacy_budget.key(storage, "fingerprint"), scope_period)
