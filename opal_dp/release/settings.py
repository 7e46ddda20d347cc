"""The privacy settings of a release, Dagster-free: one validated object holds every privacy choice (unit, bounds,
mechanism, release design, nominal budget, OD and synthetic budgets, ledger caps at creation), builds the release
plans from them and opens the ledger. The Dagster resource ``privacy_budget`` (``defs.shared.budget``) only wraps it;
the command line's ledger commands need no Dagster at all."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
from pydantic import BaseModel, Field, model_validator

from opal_dp.core import ContributionBounds, PrivacyCost, PrivacyLedger, PrivacyUnit, Relation, compose
from opal_dp.core.ledger import DEFAULT_HORIZON_DAYS, DEFAULT_PERSON_CAP, LedgerError
from opal_dp.core.prefix_tree import Taxonomy, TreeBudget
from opal_dp.core.secrets import derive_key, load_or_create_secret
from opal_dp.locations import DataLocation
from opal_dp.release.marginals.plan import ReleasePlan, build_plan, parse_period
from opal_dp.release.marginals.tables import MARGINALS
from opal_dp.release.od.engine import OdPlan
from opal_dp.release.options import Design, Mechanism

DEFAULT_DELTA = 1 / 8_000_000


class CapMismatch(LedgerError):
    """The configuration names a cap that differs from the one the ledger holds (the cap is ledger state)."""


class PrivacySettings(BaseModel):
    """Privacy unit, contribution bounds, mechanism, per-marginal nominal (epsilon_j, delta_j).

    ``synthetic_epsilon``/``synthetic_delta``: the synthetic card-day trips' budget per card over the period
    (``defs.synthetic``), charged to the card_period scope of the period.

    Defaults reproduce the 2016 release: unit ``trip``, relation ``replace_one``, epsilon_j = 1,1,1,1,2,2 and
    delta_j = 1/8,000,000, so one full release costs (8, 6/8,000,000) per scope. Card units default to
    add/remove and the bounds below; ``card_period`` to the thresholded discrete Gaussian in zCDP.
    ``release_design``: ``sbh`` (default, the 2016 design) or ``public_domain`` (``opal_dp.release.marginals.plan``); it
    composes with any unit, relation, bounds and mechanism.

    The ledger's cap per scope is ledger state: ``cap_epsilon``/``cap_delta`` only set it when the ledger is
    created (default: one full release, the sums of epsilon_j and delta_j); afterwards a different value is
    refused, and ``python -m opal_dp.cli ledger raise-cap`` is the only way to change it.
    ``fresh_draw`` asks for new noise over an input that was already released: it is charged.

    OD release (``release.od.engine``): ``od_release`` (default on), one noisy prefix tree per date at
    ``od_epsilon`` (pure DP per card-day), height ``od_height``, the ``od_top_sequences`` most frequent sanitized
    sequences published. Its cost is part of every unit's default cap (``od_cost``), so that the tree composes
    with the marginals on the same ledger scopes.
    """

    privacy_unit: str = PrivacyUnit.TRIP.value
    relation: str | None = None  # default: the unit's (replace_one for trip, add_remove for card units)
    mechanism: str | None = None  # laplace | gaussian; default: laplace, gaussian for card_period
    release_design: str = "sbh"  # sbh | public_domain
    epsilon: dict[str, float] = {m.name: m.default_epsilon for m in MARGINALS}
    delta: dict[str, float] = {m.name: DEFAULT_DELTA for m in MARGINALS}
    max_trips_per_card_day: int = ContributionBounds.max_trips_per_card_day
    max_per_bin: int = ContributionBounds.max_per_bin
    max_days_per_card: int | None = None
    period: str | None = None  # card_period: "2016-07-25..2016-07-31,2016-08-08..2016-08-14"
    cap_epsilon: float | None = None
    cap_delta: float | None = None
    fresh_draw: bool = False
    od_release: bool = True
    od_epsilon: float = 1.0
    od_height: int = 4
    od_top_sequences: int = 100
    od_hierarchy_rho: float = Field(0.5, gt=0, allow_inf_nan=False)  # hierarchical OD per date (release.od.hierarchy)
    od_hierarchy_max_per_pair: int = Field(2, ge=1)  # trips of one card-day kept per (mode, origin, destination)
    synthetic_epsilon: float = 8.0  # synthetic card-day trips: (epsilon, delta) per card over the period
    synthetic_delta: float = 6 * DEFAULT_DELTA  # (``release.synthetic.queries``), charged to card_period
    acknowledge_ledger_reset: str | None = None  # a reason; only then may a ledger reset go ahead
    person_horizon_days: int | None = None  # the person account (``core.ledger``; default 365 days, (20, 1e-6)):
    person_cap_epsilon: float | None = None  # used when the ledger is created, then ledger state that only
    person_cap_delta: float | None = None  # ``ledger raise-cap --person`` changes

    @model_validator(mode="after")
    def _validate(self) -> "PrivacySettings":
        names = {m.name for m in MARGINALS}
        for label, values in (("epsilon", self.epsilon), ("delta", self.delta)):
            if set(values) != names:
                raise ValueError(f"{label} must give exactly the marginals {sorted(names)}, got {sorted(values)}")
        for name in sorted(names):
            eps, delta = self.epsilon[name], self.delta[name]
            if not (math.isfinite(eps) and eps > 0):
                raise ValueError(f"epsilon[{name}] must be finite and > 0, got {eps}")
            if not 0 < delta < 1:
                raise ValueError(f"delta[{name}] must satisfy 0 < delta < 1, got {delta}")
        PrivacyUnit(self.privacy_unit)
        if self.relation is not None:
            Relation(self.relation)
        self.noise_mechanism, self.design  # parse both once, here
        self.bounds  # validates the bounds
        if self.period is not None:
            parse_period(self.period)
        if not (math.isfinite(self.synthetic_epsilon) and self.synthetic_epsilon > 0 and 0 < self.synthetic_delta < 1):
            raise ValueError(f"synthetic_epsilon must be > 0 and 0 < synthetic_delta < 1, got "
                             f"({self.synthetic_epsilon}, {self.synthetic_delta})")
        for label, cap in (("cap_epsilon", self.cap_epsilon), ("cap_delta", self.cap_delta)):
            if cap is not None and not cap > 0:
                raise ValueError(f"{label} must be > 0, got {cap}")
        if not (math.isfinite(self.od_epsilon) and self.od_epsilon > 0):
            raise ValueError(f"od_epsilon must be finite and > 0, got {self.od_epsilon}")
        if self.od_height < 1 or self.od_top_sequences < 0:
            raise ValueError("od_height must be >= 1 and od_top_sequences >= 0")
        return self

    @property
    def unit(self) -> PrivacyUnit:
        return PrivacyUnit(self.privacy_unit)

    @property
    def design(self) -> Design:
        return Design.parse(self.release_design)

    @property
    def noise_mechanism(self) -> Mechanism | None:
        """The configured noise family, or None for the unit's default (``Mechanism.default_for``)."""
        return None if self.mechanism is None else Mechanism.parse(self.mechanism)

    @property
    def bounds(self) -> ContributionBounds:
        return ContributionBounds(self.max_trips_per_card_day, self.max_per_bin, self.max_days_per_card)

    @property
    def nominal(self) -> tuple[float, float]:
        """What one full release costs a scope: (sum epsilon_j, sum delta_j)."""
        return math.fsum(self.epsilon.values()), math.fsum(self.delta.values())

    def od_cost(self, unit: PrivacyUnit) -> float:
        """What the OD trees add to one scope of ``unit`` (``release.od.engine``): nothing to a trip scope,
        ``od_epsilon`` to a date, ``od_epsilon`` per date to a period."""
        if not self.od_release or unit is PrivacyUnit.TRIP:
            return 0.0
        days = len(parse_period(self.period)) if unit is PrivacyUnit.CARD_PERIOD and self.period else 1
        return self.od_epsilon * days

    def _default_cap(self) -> tuple[float, float]:
        """One full release of a scope of the configured unit, OD trees included: for a card_period, the larger of
        the plain sum and what the ledger's accountant (``core.accounting.compose``) will compute."""
        eps, delta = self.nominal
        extra = self.od_cost(self.unit)
        if not extra or self.unit is not PrivacyUnit.CARD_PERIOD:
            return eps + extra, delta
        plan = self.plan()
        costs = [m.cost() for m in plan.mechanisms.values()]
        costs += [PrivacyCost.approx_dp(self.od_epsilon, 0.0)] * len(plan.period)
        return max(eps + extra, compose(costs, delta_target=delta).epsilon), delta

    def od_plan(self, symbols_per_group: pd.DataFrame) -> OdPlan:
        """The OD trees' plan; ``symbols_per_group``: the public taxonomy (``TripAlphabet.groups``)."""
        taxonomy = Taxonomy(symbols_per_group["first"].to_numpy(), symbols_per_group["size"].to_numpy())
        period = parse_period(self.period) if self.unit is PrivacyUnit.CARD_PERIOD and self.period else ()
        return OdPlan(self.unit, TreeBudget(self.od_epsilon, self.od_height), taxonomy,
                      f"{period[0]}..{period[-1]}" if period else "")

    def plan(self, stops: pd.DataFrame | None = None, design: Design | None = None) -> ReleasePlan:
        """The release plan; production noise from the OS CSPRNG (there is no seed to set). ``stops``: the
        public stop list of the reference resource (the public-domain design's domains); ``design``: another
        release design than the configured one (the internal design comparison)."""
        return build_plan(
            self.unit, self.epsilon, self.delta, relation=self.relation, mechanism=self.noise_mechanism,
            bounds=self.bounds, period=parse_period(self.period) if self.period else (),
            design=self.design if design is None else design, stops=stops,
        )

    def ledger(self, location: DataLocation) -> PrivacyLedger:
        """The deployment's ledger (``DataLocation.ledger_location``), created with the configured caps if there is
        none; refuses (``CapMismatch``) a configured cap that differs from the ledger's."""
        eps, delta = self.nominal
        caps = {u.value: (eps + self.od_cost(u), delta) for u in PrivacyUnit}
        wanted = (self.cap_epsilon or self._default_cap()[0], self.cap_delta or delta)
        caps[self.unit.value] = wanted
        ledger = PrivacyLedger(location.ledger_location, caps, published=published_ledger_draws(location.published_dir),
                               acknowledge_reset=self.acknowledge_ledger_reset,
                               person_cap=(self.person_cap_epsilon or DEFAULT_PERSON_CAP[0],
                                           self.person_cap_delta or DEFAULT_PERSON_CAP[1]),
                               horizon_days=self.person_horizon_days or DEFAULT_HORIZON_DAYS)
        cap, person = ledger.cap(self.unit), ledger.person_cap()
        for label, configured, held in (("cap_epsilon", self.cap_epsilon, cap.epsilon),
                                        ("cap_delta", self.cap_delta, cap.delta),
                                        ("person_cap_epsilon", self.person_cap_epsilon, person.epsilon),
                                        ("person_cap_delta", self.person_cap_delta, person.delta),
                                        ("person_horizon_days", self.person_horizon_days, person.horizon_days)):
            if configured is not None and configured != held:
                raise CapMismatch(
                    f"privacy_budget.{label} = {configured} but the ledger holds {held} (unit cap for "
                    f"{self.unit.value} set {cap.set_at}, {cap.action}; person cap set {person.set_at}, "
                    f"{person.action}). Caps are ledger state: raise one with `python -m opal_dp.cli ledger "
                    "raise-cap` (--unit U or --person), which records the reason."
                )
        return ledger

    @staticmethod
    def key(location: DataLocation, purpose: str) -> bytes:
        """The deployment secret's key for ``purpose`` (``fingerprint`` or ``bounding``)."""
        return derive_key(load_or_create_secret(location.secret_file), purpose)


def published_ledger_draws(root: Path) -> dict[str, set[int]]:
    """Ledger id -> draw ids, over every release already published under ``root`` (their privacy.json)."""
    found: dict[str, set[int]] = {}
    if not root.exists():
        return found
    for statement in [*root.glob("*/privacy.json"), *root.glob("synthetic/*/privacy.json")]:
        if statement.parent.name.startswith("."):
            continue
        ledger = json.loads(statement.read_text(encoding="utf-8")).get("ledger")
        if not ledger:  # a release from before the ledger was named (schema 1)
            found.setdefault("schema-1 release", set())
            continue
        found.setdefault(ledger["id"], set()).update(ledger["draws"])
        found[ledger["id"]].update(json.loads(statement.read_text(encoding="utf-8")).get("od", {}).get("draws", []))
    return found
