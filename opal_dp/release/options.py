"""The release options a configuration chooses between, parsed once at the edge (command line, resource config)
and carried as these members everywhere else: the release design and the noise family of the marginals.
Behaviour that depends on a choice is a property here, not a string comparison across the pipeline."""

from __future__ import annotations

from enum import StrEnum

from opal_dp.core.units import PrivacyUnit


class Design(StrEnum):
    """How the marginals are released.

    - ``sbh``: the 2016 design, the Stability-Based Histogram: noise on the bins present in the data, a
      threshold on the noisy counts, (epsilon, delta)-DP per marginal.
    - ``public_domain``: noise on every cell of a public domain (zeros included), the three tables of a tap
      measured together and made consistent, cells below a public threshold in remainder rows.
    - ``hierarchy``: each tap one time x location hierarchy (mode-day, station-day, station-hour, 15-minute cells)
      measured on its public domain and fitted, the three tables derived from the fit with the public-domain
      design's remainder rows (``release.marginals.hierarchy_design``).
    """

    SBH = "sbh"
    PUBLIC_DOMAIN = "public_domain"
    HIERARCHY = "hierarchy"

    @property
    def consistent(self) -> bool:
        """Whether the released tables add up exactly, with remainder rows (``time``/``loc`` = ``other``) for the
        cells below the publication threshold, and list cells absent from the data."""
        return self is not Design.SBH

    @classmethod
    def parse(cls, value: str | Design) -> Design:
        return _parse(cls, value, "release design")


class Mechanism(StrEnum):
    """The noise family of the marginals: the discrete Laplace (pure or approximate DP) or the discrete Gaussian
    (zero-concentrated DP)."""

    LAPLACE = "laplace"
    GAUSSIAN = "gaussian"

    @property
    def pure(self) -> bool:
        """Whether its cost is in epsilon (Laplace) rather than rho (Gaussian, zCDP)."""
        return self is Mechanism.LAPLACE

    @classmethod
    def default_for(cls, unit: PrivacyUnit) -> Mechanism:
        """SBH's Laplace for one trip (the 2016 release); the Gaussian for the card units, whose releases add up in one
        person's account over a horizon (53 weeks, or 365 dates, of charges compose tightly and fast in zCDP; SBH's
        Laplace pieces would need privacy-loss distributions, and allow about half the budget)."""
        return cls.LAPLACE if unit is PrivacyUnit.TRIP else cls.GAUSSIAN

    @classmethod
    def parse(cls, value: str | Mechanism) -> Mechanism:
        return _parse(cls, value, "mechanism")


def _parse(cls, value, label: str):
    try:
        return cls(value)
    except ValueError:
        raise ValueError(f"{label} must be one of {[m.value for m in cls]}, got {value!r}") from None
