"""The privacy settings of a release, Dagster-free: one validated object holds every privacy choice (unit, bounds,
mechanism, release design, nominal budget, OD and synthetic budgets, ledger caps at creation), builds the release
plans from them and opens the ledger. The Dagster resource ``privacy_budget`` (``defs.shared.budget``) only wraps it;
the command line's ledger commands need no Dagster at all."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import pandas as pd
from pydantic import BaseModel, Field, model_validator

from opal_dp.core import ContributionBounds, PrivacyCost, PrivacyLedger, PrivacyUnit, Relation, compose
from opal_dp.core.ledger_records import DEFAULT_HORIZON_DAYS, DEFAULT_PERSON_CAP, LedgerError
from opal_dp.core.prefix_tree import Taxonomy
from opal_dp.core.secrets import derive_key, load_or_create_secret
from opal_dp.locations import DataLocation
from opal_dp.network import stops_version
from opal_dp.prep.day_records import DayCut
from opal_dp.release.marginals.plan import ReleasePlan, build_plan
from opal_dp.release.marginals.tables import MARGINALS
from opal_dp.release.od.engine import OdPlan, tree_budget
from opal_dp.release.od.hierarchy import hierarchy_budgets
from opal_dp.release.options import Design, Mechanism
from opal_dp.release.periods import Periods
from opal_dp.release.products import product_costs
from opal_dp.release.share import scope_delta, scopes_touching, share_epsilon, split
from opal_dp.release.statement.runs import draws_of

DEFAULT_DELTA = 1 / 8_000_000
WEEKLY_OD_EPSILON = 0.05
"""The OD tree's default epsilon a date in the weekly card_period release: 365 of them cost one person about
epsilon 4.6 a year (``benchmarks.person_cap``), leaving most of the person cap to the six marginals."""
WEEKLY_OD_HIERARCHY_RHO = 0.004
"""The hierarchical OD release's default rho a date in the weekly card_period release (it makes ``od.csv``): about
a quarter of the weekly share's rho, which lowers the six marginals' weekly epsilon from 2.44 to 1.99 and puts
every location pair above about 180 trips a day in its own row (docs/privacy.md, "The default release")."""
SHARED_SYNTHETIC_EPSILON = 1.0
"""The synthetic trips' default epsilon per card a week within the person share: the NIST DeID2 taxi-week figure."""
DEFAULT_OD_HIERARCHY_RHO = 0.5
"""Its rho a date elsewhere: the zCDP bound that the prefix tree's default pure epsilon 1 implies."""
WEEKLY_OD_TOTALS_RHO = 0.004
"""The daily totals' default rho a date in the weekly release (``core.totals``, ``totals.csv``, charged with the OD
hierarchy of the date): sigma 44.7, so 95% of the daily totals of a mode and tap are within 88 trips of their
bounded count, under 5% of any mode-day of 1,800 trips or more (docs/privacy.md, "The default release")."""


class CapMismatch(LedgerError):
    """The configuration names a cap that differs from the one the ledger holds (the cap is ledger state)."""


class PrivacySettings(BaseModel):
    """Privacy unit, contribution bounds, mechanism, per-marginal nominal (epsilon_j, delta_j).

    ``synthetic``: synthetic card-day trips are released too (``defs.synthetic``), at ``synthetic_epsilon``/
    ``synthetic_delta`` per card over each week (default: epsilon 1 a week within the person share, as the NIST DeID2
    taxi-week synthesizer; 8 elsewhere), charged to the week's card_period scope; their cost is in the weekly share
    and the default caps, so turning them on lowers the marginals' share.

    The default protects people: unit ``card_period`` over calendar weeks (``release.periods``), add/remove, the
    bounds below, the thresholded discrete Gaussian in zCDP, and the weekly share of the person cap
    (``release.share``): the largest per-week budget that a release every week of the horizon keeps within the
    person cap (the OD trees off unless asked for, then at ``od_epsilon`` 0.05 a date within the share).
    ``card_day`` takes its share per date the same way. Explicit ``epsilon``/``delta`` override the share.
    ``privacy_unit = "trip"`` reproduces the 2016 release (relation ``replace_one``, epsilon_j = 1,1,1,1,2,2,
    delta_j = 1/8,000,000: (8, 6/8,000,000) per scope), with no person-level bound.
    ``release_design``: ``sbh`` (default, the 2016 design), ``public_domain`` (``opal_dp.release.marginals.plan``; it
    composes with any unit, relation, bounds and mechanism) or ``hierarchy`` (card units, the Gaussian:
    ``opal_dp.release.marginals.hierarchy_design``).

    The ledger's cap per scope is ledger state: ``cap_epsilon``/``cap_delta`` only set it when the ledger is
    created (default: one full release, the sums of epsilon_j and delta_j); afterwards a different value is
    refused, and ``python -m opal_dp.cli ledger raise-cap`` is the only way to change it.
    ``fresh_draw`` asks for new noise over an input that was already released: it is charged.

    OD release (``release.od.engine``): ``od_release`` (``releases_od``), one noisy prefix tree per date at
    ``od_epsilon`` (pure DP per card-day), height ``od_height``, the ``od_top_sequences`` most frequent sanitized
    sequences published.

    Hierarchical OD release (``release.od.hierarchy``, it makes ``od.csv``): ``od_hierarchy_release``
    (``releases_od_hierarchy``; default on in the card-level releases only), ``od_hierarchy_rho`` a date
    (``od_hierarchy_budget``: 0.004 in the weekly release, within its share, else 0.5), at most
    ``od_hierarchy_max_per_pair`` trips of a card-day per location pair. The same charge measures the daily totals
    of ``totals.csv`` (``core.totals``) at ``od_totals_rho`` a date (``od_totals_budget``: 0.004 in the weekly
    release, else 0.5).

    Every product's charges to a scope (``release.products``) are in the share and in every unit's default cap, so
    that the products compose with the marginals on the same ledger scopes.
    """

    privacy_unit: str = PrivacyUnit.CARD_PERIOD.value
    relation: str | None = None  # default: the unit's (replace_one for trip, add_remove for card units)
    mechanism: str | None = None  # laplace | gaussian; default: laplace, gaussian for card_period
    release_design: str = "sbh"  # sbh | public_domain | hierarchy
    epsilon: dict[str, float] | None = None  # per marginal; default: the person share (card units), or the 2016 values
    delta: dict[str, float] | None = None
    max_trips_per_card_day: int = ContributionBounds.max_trips_per_card_day
    max_per_bin: int = ContributionBounds.max_per_bin
    max_days_per_card: int | None = None
    cap_epsilon: float | None = None
    cap_delta: float | None = None
    fresh_draw: bool = False
    od_release: bool | None = None  # default: on, off in the card-level releases (``releases_od``)
    od_epsilon: float | None = None  # a date; default: 0.05 in the card-level releases, else 1
    od_height: int = 4
    od_top_sequences: int = 100
    od_hierarchy_release: bool | None = None  # od.csv from the hierarchy; default: on in the card-level releases only
    od_hierarchy_rho: float | None = Field(None, gt=0, allow_inf_nan=False)  # a date; default ``od_hierarchy_budget``
    od_hierarchy_max_per_pair: int = Field(2, ge=1)  # trips of one card-day kept per (mode, origin, destination)
    od_totals_rho: float | None = Field(None, gt=0, allow_inf_nan=False)  # a date; default ``od_totals_budget``
    synthetic: bool = False  # synthetic card-day trips released too (``release --synthetic``)
    synthetic_epsilon: float | None = Field(None, gt=0, allow_inf_nan=False)  # per card a week; default 1 / 8
    synthetic_delta: float | None = Field(None, gt=0, lt=1)  # default 6/8,000,000 (``release.synthetic.queries``)
    acknowledge_ledger_reset: str | None = None  # a reason; only then may a ledger reset go ahead
    person_horizon_days: int | None = None  # the person account (``core.ledger``; default 365 days, (20, 1e-6)):
    person_cap_epsilon: float | None = None  # used when the ledger is created, then ledger state that only
    person_cap_delta: float | None = None  # ``ledger raise-cap --person`` changes

    @model_validator(mode="after")
    def _validate(self) -> "PrivacySettings":
        names = {m.name for m in MARGINALS}
        for label, values in (("epsilon", self.epsilon), ("delta", self.delta)):
            if values is not None and set(values) != names:
                raise ValueError(f"{label} must give exactly the marginals {sorted(names)}, got {sorted(values)}")
        epsilon, delta = (self.epsilon or {}), (self.delta or {})
        for name in sorted(names):
            eps, dlt = epsilon.get(name, 1.0), delta.get(name, DEFAULT_DELTA)
            if not (math.isfinite(eps) and eps > 0):
                raise ValueError(f"epsilon[{name}] must be finite and > 0, got {eps}")
            if not 0 < dlt < 1:
                raise ValueError(f"delta[{name}] must satisfy 0 < delta < 1, got {dlt}")
        self.unit  # parses the unit, here
        if self.relation is not None:
            Relation(self.relation)
        self.noise_mechanism, self.design  # parse both once, here
        self.bounds  # validates the bounds
        for label, cap in (("cap_epsilon", self.cap_epsilon), ("cap_delta", self.cap_delta)):
            if cap is not None and not cap > 0:
                raise ValueError(f"{label} must be > 0, got {cap}")
        if self.od_epsilon is not None and not (math.isfinite(self.od_epsilon) and self.od_epsilon > 0):
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
    def periods(self) -> Periods:
        """Which dates form one card_period scope: calendar weeks, the pipeline's release periods."""
        return Periods()

    @property
    def person_share(self) -> bool:
        """Whether the budgets default to a card-level unit's share of the person cap (module ``release.share``):
        per week for ``card_period``, per date for ``card_day``."""
        return self.unit is not PrivacyUnit.TRIP

    @property
    def releases_od(self) -> bool:
        """Whether the OD prefix trees are released: as configured, else on, except in the card-level
        release, where the weekly share they would get (``WEEKLY_OD_EPSILON`` a date) lists no OD pair on the
        bundled sample (docs/privacy.md, "The default release"): its budget goes to the marginals."""
        return self.od_release if self.od_release is not None else not self.person_share

    @property
    def releases_od_hierarchy(self) -> bool:
        """Whether the hierarchical OD release (``release.od.hierarchy``) makes ``od.csv``: as configured, else on
        in the card-level releases (the default) and off elsewhere, where ``od.csv`` stays the prefix tree's
        (the trip-level reproduction of 2016) unless asked for (its charge is then in the default caps)."""
        return self.od_hierarchy_release if self.od_hierarchy_release is not None else self.person_share

    @property
    def od_hierarchy_budget(self) -> float:
        """The hierarchy's rho a date."""
        if self.od_hierarchy_rho is not None:
            return self.od_hierarchy_rho
        return WEEKLY_OD_HIERARCHY_RHO if self.person_share else DEFAULT_OD_HIERARCHY_RHO

    @property
    def od_totals_budget(self) -> float:
        """The daily totals' rho a date (charged with the hierarchy's)."""
        if self.od_totals_rho is not None:
            return self.od_totals_rho
        return WEEKLY_OD_TOTALS_RHO if self.person_share else DEFAULT_OD_HIERARCHY_RHO

    @property
    def synthetic_budget(self) -> tuple[float, float]:
        """The synthetic card-day trips' (epsilon, delta) per card a week."""
        epsilon = self.synthetic_epsilon or (SHARED_SYNTHETIC_EPSILON if self.person_share else 8.0)
        return epsilon, self.synthetic_delta or 6 * DEFAULT_DELTA

    @property
    def od_budget(self) -> float:
        """The OD tree's epsilon a date."""
        if self.od_epsilon is not None:
            return self.od_epsilon
        return WEEKLY_OD_EPSILON if self.person_share else 1.0

    def budget(self) -> tuple[dict[str, float], dict[str, float]]:
        """The nominal (epsilon_j, delta_j) per marginal: as configured, else the share of the person cap
        (``release.share.share_epsilon``, from the configured or default person cap and horizon), else the 2016
        values."""
        if self.epsilon is not None and self.delta is not None:
            return dict(self.epsilon), dict(self.delta)
        if self.person_share:
            cap = (self.person_cap_epsilon or DEFAULT_PERSON_CAP[0], self.person_cap_delta or DEFAULT_PERSON_CAP[1])
            scopes = scopes_touching(self.person_horizon_days or DEFAULT_HORIZON_DAYS, self.unit)
            mechanism = self.noise_mechanism or Mechanism.default_for(self.unit)
            others = tuple(product_costs(self, self.unit))
            epsilon, delta = split(share_epsilon(*cap, scopes, mechanism, self.design, self.unit, others),
                                   scope_delta(cap[1], scopes))
        else:
            epsilon, delta = {m.name: m.default_epsilon for m in MARGINALS}, {m.name: DEFAULT_DELTA for m in MARGINALS}
        return dict(self.epsilon or epsilon), dict(self.delta or delta)

    @property
    def bounds(self) -> ContributionBounds:
        return ContributionBounds(self.max_trips_per_card_day, self.max_per_bin, self.max_days_per_card)

    def fingerprint(self) -> str:
        """What a week's release depends on besides its input: every setting but the one-off switches (a fresh draw,
        a ledger reset's reason). Two releases with equal fingerprints over equal input are the same release."""
        settings = self.model_dump(mode="json", exclude={"fresh_draw", "acknowledge_ledger_reset"})
        return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()

    def day_cut(self, stops: pd.DataFrame) -> DayCut:
        """What each day's private stages are cut with under these settings (``prep.day_records``): a release
        calibrated on them reads only days cut so."""
        bounds = (self.max_trips_per_card_day, self.max_per_bin) if self.unit.bounds_cards else None
        return DayCut(bounds, self.od_height, stops_version(stops))

    @property
    def nominal(self) -> tuple[float, float]:
        """What one full release costs a scope: (sum epsilon_j, sum delta_j)."""
        epsilon, delta = self.budget()
        return math.fsum(epsilon.values()), math.fsum(delta.values())

    def _default_cap(self) -> tuple[float, float]:
        """One full release of a scope of the configured unit, every product included: for a card_period, the larger
        of the plain sum and what the ledger's accountant (``core.accounting.compose``) will compute."""
        eps, delta = self.nominal
        others = product_costs(self, self.unit)
        if not others or self.unit is not PrivacyUnit.CARD_PERIOD:
            room = _room(others)
            return eps + room[0], delta + room[1]
        costs = [m.cost() for m in self.plan().mechanisms.values()] + others
        return max(eps + _room([c for c in others if c.measure == "approx_dp"])[0],
                   compose(costs, delta_target=delta).epsilon), delta

    def od_plan(self, symbols_per_group: pd.DataFrame) -> OdPlan:
        """The OD trees' plan; ``symbols_per_group``: the public taxonomy (``TripAlphabet.groups``)."""
        taxonomy = Taxonomy(symbols_per_group["first"].to_numpy(), symbols_per_group["size"].to_numpy())
        return OdPlan(self.unit, tree_budget(self), taxonomy, self.periods)

    def plan(self, stops: pd.DataFrame | None = None, design: Design | None = None) -> ReleasePlan:
        """The release plan; production noise from the OS CSPRNG (there is no seed to set). ``stops``: the
        public stop list of the reference resource (the public-domain design's domains); ``design``: another
        release design than the configured one (the internal design comparison)."""
        epsilon, delta = self.budget()
        return build_plan(
            self.unit, epsilon, delta, relation=self.relation, mechanism=self.noise_mechanism,
            bounds=self.bounds, periods=self.periods,
            design=self.design if design is None else design, stops=stops, root_sd=self.totals_sd,
        )

    @property
    def totals_sd(self) -> float | None:
        """The noise of the published daily totals (``totals.csv``, with the OD hierarchy), to which the hierarchy
        design pins its trees; None without them."""
        return hierarchy_budgets(self)[1].sigma if self.releases_od_hierarchy else None

    def ledger(self, location: DataLocation) -> PrivacyLedger:
        """The deployment's ledger (``DataLocation.ledger_location``), created with the configured caps if there is
        none; refuses (``CapMismatch``) a configured cap that differs from the ledger's."""
        eps, delta = self.nominal
        rooms = {u: _room(product_costs(self, u)) for u in PrivacyUnit}
        caps = {u: (eps + rooms[u][0], delta + rooms[u][1]) for u in PrivacyUnit}
        wanted = (self.cap_epsilon or self._default_cap()[0], self.cap_delta or self._default_cap()[1])
        caps[self.unit] = wanted
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


def _room(costs: list[PrivacyCost]) -> tuple[float, float]:
    """What ``costs`` add to a cap made by summing (epsilon, delta): the pure and approximate ones their sums; the zCDP
    ones a delta of ``DEFAULT_DELTA`` of their own and their rho converted at that delta (the ledger's accountant
    gives the zCDP part of a scope the delta its (epsilon, delta) charges leave)."""
    plain = [c for c in costs if c.measure == "approx_dp"]
    zcdp = [c for c in costs if c.measure == "zcdp"]
    room = (math.fsum(c.epsilon for c in plain), math.fsum(c.delta for c in plain))
    if zcdp:
        room = (room[0] + compose(zcdp, delta_target=DEFAULT_DELTA).epsilon, room[1] + DEFAULT_DELTA)
    return room


def published_ledger_draws(root: Path) -> dict[str, set[int]]:
    """Ledger id -> draw ids, over every release already published under ``root`` (their privacy.json)."""
    found: dict[str, set[int]] = {}
    if not root.exists():
        return found
    for statement in [*root.glob("*/privacy.json"), *root.glob("synthetic/*/privacy.json")]:
        if statement.parent.name.startswith("."):
            continue
        stated = json.loads(statement.read_text(encoding="utf-8"))
        ledger = stated["ledger"]
        found.setdefault(ledger["id"], set()).update(draws_of(ledger["draws"]))
        found[ledger["id"]].update(draws_of(stated.get("od", {}).get("draws", [])))
    return found
