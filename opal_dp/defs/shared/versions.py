"""The input versions of a run's dates, from the raw files in storage (``core.input_version``)."""

from collections.abc import Callable, Collection

import dagster as dg

from opal_dp.core import PrivacyUnit
from opal_dp.core.input_version import input_versions
from opal_dp.defs.shared.budget import PrivacyBudget
from opal_dp.defs.shared.storage import OpalStorage
from opal_dp.prep.ingest import raw_files


def raw_input_versions(storage: OpalStorage, privacy_budget: PrivacyBudget, dates: Collection[str],
                       unit: PrivacyUnit, period_of: Callable[[str], Collection[str]] | None = None) -> dict[str, str]:
    """Date -> the input version of the ledger scope it is released in under ``unit``: a card_period scope covers
    every date of its period (``period_of``, default the configured periods), so a period is released only once
    all its raw files are there (``dg.Failure`` naming the missing dates otherwise)."""
    if unit is PrivacyUnit.CARD_PERIOD:
        period_of = period_of or privacy_budget.periods.of
    try:
        return input_versions(raw_files(storage.raw_dir), dates, privacy_budget.key(storage, "fingerprint"),
                              period_of if unit is PrivacyUnit.CARD_PERIOD else None)
    except ValueError as err:
        raise dg.Failure(description=f"a card_period release covers its whole period ({privacy_budget.periods.describe()}), "
                                     f"and {err}: release the period once every day of it has its raw file, or name "
                                     "the period's dates (privacy_budget.period, --period)") from err
