"""Pure differential-privacy core (no Dagster): random bits, exact discrete Laplace noise, the SBH
mechanism behind a small mechanism interface, and the persistent privacy ledger."""

from opal_dp.core.bits import BitSource, SecureBits, SeededBits
from opal_dp.core.ledger import BudgetExceeded, LedgerError, PrivacyLedger
from opal_dp.core.mechanism import HistogramMechanism, Relation
from opal_dp.core.noise import MAX_SCALE, DiscreteLaplace
from opal_dp.core.sbh import StabilityHistogram, error_bound, release_probability

__all__ = [
    "MAX_SCALE",
    "BitSource",
    "BudgetExceeded",
    "DiscreteLaplace",
    "HistogramMechanism",
    "LedgerError",
    "PrivacyLedger",
    "Relation",
    "SecureBits",
    "SeededBits",
    "StabilityHistogram",
    "error_bound",
    "release_probability",
]
