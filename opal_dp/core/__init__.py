"""Pure differential-privacy core (no Dagster): random bits, exact discrete noise, the histogram
mechanisms behind one interface, privacy units and their sensitivities, accounting, and the
persistent privacy ledger."""

from opal_dp.core.accounting import Guarantee, PrivacyCost, compose
from opal_dp.core.bits import BitSource, SecureBits, SeededBits
from opal_dp.core.ledger import PrivacyLedger
from opal_dp.core.ledger_records import BudgetExceeded, LedgerError
from opal_dp.core.mechanism import HistogramMechanism, Relation
from opal_dp.core.noise import MAX_SCALE, DiscreteLaplace
from opal_dp.core.sbh import StabilityHistogram, error_bound, release_probability
from opal_dp.core.sensitivity import Sensitivity
from opal_dp.core.units import ContributionBounds, PrivacyUnit, sensitivity

__all__ = [
    "MAX_SCALE",
    "BitSource",
    "BudgetExceeded",
    "ContributionBounds",
    "DiscreteLaplace",
    "Guarantee",
    "HistogramMechanism",
    "LedgerError",
    "PrivacyCost",
    "PrivacyLedger",
    "PrivacyUnit",
    "Relation",
    "SecureBits",
    "SeededBits",
    "Sensitivity",
    "StabilityHistogram",
    "compose",
    "error_bound",
    "release_probability",
    "sensitivity",
]
