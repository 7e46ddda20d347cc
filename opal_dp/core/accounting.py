"""What a mechanism costs, and what a set of mechanism applications costs one privacy unit together.

Two measures are used:

- ``approx_dp``: (epsilon, delta)-DP. The thresholded Laplace histogram (SBH) is (epsilon, delta); the OD
  prefix tree is pure epsilon-DP (delta 0).
- ``zcdp``: delta-approximate rho-zCDP (Bun & Steinke 2016): with probability at least ``1 - delta``
  over the threshold events the output is rho-zCDP. The thresholded discrete Gaussian is (rho, delta).

Composition (``compose``) of the charges of one ledger scope, or of one person's window: every cost is
a valid description of its piece, so each route below is a valid bound on the whole, and the result is
the smallest of them (the route is named in ``Guarantee.composition``):

- ``basic``: the (epsilon, delta) pieces add up (epsilon_i, delta_i); the zCDP pieces compose in zCDP
  (rho adds up, Lemma 1.7; their threshold deltas add up) and their total rho is converted once by
  OpenDP's ``make_zCDP_to_approxDP`` (Canonne, Kamath & Steinke 2020) at the delta left over;
- ``rdp``: Google's ``dp-accounting`` RDP accountant over every piece. A rho-zCDP piece is an RDP curve
  ``alpha * rho`` (its definition: ``ZCDpEvent``). An (epsilon, delta) piece is, outside an event of
  probability delta, epsilon-DP (Kairouz, Oh & Viswanath 2015: every epsilon-DP pair is a post-processing
  of binary randomized response), so its curve is that of randomized response with flip probability
  ``2 / (1 + e^epsilon)`` (``RandomizedResponseDpEvent``), tighter than the ``alpha * epsilon**2 / 2``
  of Bun & Steinke Prop. 1.4; the deltas of all pieces add up, and ``dp-accounting`` converts the
  composed curve at the delta left over (Canonne, Kamath & Steinke 2020, Prop. 12);
- ``pld``: ``dp-accounting``'s privacy-loss distributions compose the (epsilon, delta) pieces (the
  pessimistic PLD of each pair, ``from_privacy_parameters``: optimal composition up to a discretisation
  rounded up), and the zCDP pieces' total is added by basic composition, the delta split between the
  two chosen on a grid.

With no zCDP piece the result is basic composition at delta = sum delta_i unless a route at
``delta_target`` improves its epsilon by more than ``PREFER_BASIC``. With zCDP pieces only (the default card-level
release), the ``rdp`` route is not computed: its conversion of the composed curve ``alpha * rho`` is the ``basic``
route's (CKS 2020 Prop. 12, the same expression) evaluated at ``dp-accounting``'s finite list of orders, where OpenDP
minimises it over every order, so it never states less (``test_accounting``), and a release of zCDP pieces never
imports ``dp-accounting`` (with scipy, about 1.3 s in every process).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, astuple, dataclass
from functools import lru_cache
from typing import Literal

Measure = Literal["approx_dp", "zcdp"]


@dataclass(frozen=True)
class PrivacyCost:
    """The privacy cost of one mechanism application, in its native measure.

    ``approx_dp``: (epsilon, delta) with ``rho = 0``; ``zcdp``: delta-approximate rho-zCDP with
    ``epsilon = 0``.
    """

    measure: Measure
    epsilon: float
    rho: float
    delta: float

    def __post_init__(self) -> None:
        if self.measure not in ("approx_dp", "zcdp"):
            raise ValueError(f"measure must be approx_dp or zcdp, got {self.measure!r}")
        for name in ("epsilon", "rho", "delta"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        if not self.delta < 1:
            raise ValueError(f"delta must be < 1, got {self.delta!r}")
        if self.measure == "approx_dp" and (self.rho != 0 or self.epsilon <= 0):
            raise ValueError("an approx_dp cost has epsilon > 0 and rho = 0")
        if self.measure == "zcdp" and (self.epsilon != 0 or self.rho <= 0):
            raise ValueError("a zcdp cost has rho > 0 and epsilon = 0")

    @classmethod
    def approx_dp(cls, epsilon: float, delta: float) -> PrivacyCost:
        return cls("approx_dp", float(epsilon), 0.0, float(delta))

    @classmethod
    def zcdp(cls, rho: float, delta: float) -> PrivacyCost:
        return cls("zcdp", 0.0, float(rho), float(delta))

    def describe(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Guarantee:
    """(epsilon, delta)-DP for one privacy unit over everything composed; ``rho`` when zCDP was used."""

    epsilon: float
    delta: float
    rho: float | None
    composition: str

    def describe(self) -> dict:
        return asdict(self)


def compose(costs: Sequence[PrivacyCost], delta_target: float | None = None) -> Guarantee:
    """The (epsilon, delta) of all ``costs`` together: the smallest of the routes of the module docstring.

    ``delta_target`` is the total delta to report at (required when any cost is zCDP); the epsilon is
    infinite when the pieces' own deltas alone use it up.
    """
    if not costs:
        return Guarantee(0.0, 0.0, None, "nothing released")
    if delta_target is not None and not 0 < delta_target < 1:
        raise ValueError(f"delta_target must lie in (0, 1), got {delta_target!r}")
    if delta_target is None and any(c.measure == "zcdp" for c in costs):
        raise ValueError("composing zCDP needs a delta_target in (0, 1), got None")
    counted: dict[PrivacyCost, int] = {}
    for cost in costs:
        counted[cost] = counted.get(cost, 0) + 1
    return _compose(tuple(sorted(counted.items(), key=lambda item: astuple(item[0]))), delta_target)


def within(costs: Sequence[PrivacyCost], epsilon: float, delta: float, rel_tol: float = 0.0) -> bool:
    """Whether ``costs`` together stay within (``epsilon``, ``delta``); basic composition first (cheap), the
    accountants of ``compose`` only when it does not suffice."""
    slack = 1 + rel_tol
    if all(c.measure == "approx_dp" for c in costs):
        if math.fsum(c.epsilon for c in costs) <= epsilon * slack and math.fsum(c.delta for c in costs) <= delta * slack:
            return True
    spent = compose(costs, delta_target=delta)
    return spent.epsilon <= epsilon * slack and spent.delta <= delta * slack


Pieces = tuple[tuple[PrivacyCost, int], ...]
PREFER_BASIC = 1e-3
"""Relative epsilon gain below which basic composition (at delta = sum delta_i) is stated rather than a tight
route at ``delta_target``."""


@lru_cache(maxsize=4096)
def _compose(pieces: Pieces, delta_target: float | None) -> Guarantee:
    approx = [(c, n) for c, n in pieces if c.measure == "approx_dp"]
    zcdp = [(c, n) for c, n in pieces if c.measure == "zcdp"]
    rho = math.fsum(c.rho * n for c, n in zcdp) if zcdp else None
    delta_events = math.fsum(c.delta * n for c, n in pieces)
    approx_epsilon = math.fsum(c.epsilon * n for c, n in approx)
    candidates = []
    if not zcdp:
        candidates.append(Guarantee(approx_epsilon, delta_events, None, "basic composition"))
    if delta_target is None:
        return candidates[0]
    left = delta_target - delta_events
    if zcdp:
        zcdp_part = zcdp_epsilon(rho, left) if left > 0 else math.inf
        candidates.append(Guarantee(approx_epsilon + zcdp_part, delta_target, rho,
                                    "basic: (epsilon, delta) pieces added to the zCDP total converted by OpenDP"))
    if left > 0 and approx:  # zCDP alone: the rdp route is the basic one minimised over fewer orders (docstring)
        routes = [(lambda: _rdp_epsilon(pieces, left), "rdp: dp-accounting RDP accountant"),
                  (lambda: _pld_epsilon(approx, zcdp, delta_target),
                   "pld: dp-accounting PLD of the (epsilon, delta) pieces, plus the zCDP total")]
        for route, name in routes:
            try:
                candidates.append(Guarantee(route(), delta_target, rho, name))
            except (OverflowError, FloatingPointError):  # a huge epsilon: this route states nothing, the others stand
                continue
    best = min(candidates, key=lambda g: g.epsilon)
    if not zcdp and candidates[0].epsilon <= best.epsilon * (1 + PREFER_BASIC):
        return candidates[0]  # basic composition states a smaller delta for a negligibly larger epsilon
    return best


def _rdp_epsilon(pieces: Pieces, delta: float) -> float:
    """The ``rdp`` route (module docstring) at conversion delta ``delta``."""
    from dp_accounting import dp_event
    from dp_accounting.rdp import rdp_privacy_accountant as rdp

    accountant = rdp.RdpAccountant(neighboring_relation=rdp.NeighborRel.REPLACE_ONE)
    for cost, n in pieces:
        if cost.measure == "zcdp":
            accountant.compose(dp_event.ZCDpEvent(cost.rho), n)
        else:
            accountant.compose(dp_event.RandomizedResponseDpEvent(_flip(cost.epsilon), 2), n)
    return float(accountant.get_epsilon(delta))


def _flip(epsilon: float) -> float:
    """Randomized response over two buckets whose privacy loss is exactly ``epsilon``: it outputs a uniform
    bucket with probability ``2 / (1 + e^epsilon)``, so the true one with probability ``e^eps / (1 + e^eps)``."""
    return 2 * math.exp(-epsilon) / (1 + math.exp(-epsilon))  # no overflow for a large epsilon


PLD_INTERVAL = 1e-3
"""Discretisation of the privacy-loss distributions; rounded up (pessimistic), at most this much per piece."""
_SPLITS = tuple(1 - 2.0**-k for k in range(1, 12)) + tuple(2.0**-k for k in range(2, 12))


def _pld_epsilon(approx: Pieces, zcdp: Pieces, delta_target: float) -> float:
    """The ``pld`` route (module docstring)."""
    from dp_accounting.pld import common
    from dp_accounting.pld import privacy_loss_distribution as pld

    composed = None
    for cost, n in approx:
        one = pld.from_privacy_parameters(common.DifferentialPrivacyParameters(cost.epsilon, cost.delta), PLD_INTERVAL)
        one = one.self_compose(n) if n > 1 else one
        composed = one if composed is None else composed.compose(one)
    if not zcdp:
        return float(composed.get_epsilon_for_delta(delta_target))
    rho = math.fsum(c.rho * n for c, n in zcdp)
    room = delta_target - math.fsum(c.delta * n for c, n in zcdp)
    if room <= 0:
        return math.inf
    return min(float(composed.get_epsilon_for_delta(room * share)) + zcdp_epsilon(rho, room * (1 - share))
               for share in _SPLITS)


def zcdp_epsilon(rho: float, delta: float) -> float:
    """Smallest epsilon OpenDP certifies for a rho-zCDP mechanism at ``delta`` (CKS 2020 conversion)."""
    if not (rho > 0 and 0 < delta < 1):
        raise ValueError(f"need rho > 0 and 0 < delta < 1, got rho={rho!r}, delta={delta!r}")
    return _conversion(rho).epsilon(delta)


@lru_cache(maxsize=1024)
def zcdp_rho_for(epsilon: float, delta: float) -> float:
    """Largest rho (to 1e-12 relative) whose OpenDP conversion at ``delta`` stays within ``epsilon``: the bisection of
    [0, epsilon] until its width is 1e-12 of its top, each midpoint asked "does it fit?" (``_Fits``). A regula falsi
    first brackets the boundary with about eight OpenDP conversions (``_bracket``), and the bisection then asks OpenDP
    only about the midpoints near that bracket: the answer is the one of asking at all of its ~40 midpoints, in a
    quarter of the time. The result is checked by OpenDP itself; if it did not fit, the plain bisection answers."""
    fits = _Fits(epsilon, delta)
    low = (math.sqrt(math.log(1 / delta) + epsilon) - math.sqrt(math.log(1 / delta))) ** 2 if 0 < delta < 1 else 0.0
    if 0 < low < epsilon and (f_low := fits.excess(low)) <= 0 < (f_top := fits.excess(epsilon)):
        _bracket(fits.excess, low, f_low, epsilon, f_top)  # the classic bound fits (CKS is tighter)
    lo = _bisect(fits, epsilon)
    if lo > 0 and fits.asked.get(lo, 1.0) > 0 and fits.excess(lo) > 0:  # the premise failed: ask at every step
        lo = _bisect(lambda rho: zcdp_epsilon(rho, delta) <= epsilon, epsilon)
    if lo == 0.0:
        raise ValueError(f"no rho > 0 reaches epsilon {epsilon!r} at delta {delta!r}")
    return lo


def _bracket(excess: Callable[[float], float], lo: float, f_lo: float, hi: float, f_hi: float) -> None:
    """Ask ``excess`` (increasing; ``f_lo`` = excess(lo) <= 0 < ``f_hi`` = excess(hi)) at points closing in on its sign
    change until they are ``MONOTONE_BEYOND`` apart: regula falsi, Illinois variant (an end kept twice in a row has
    its value halved), a bisection step where the secant leaves the bracket; scipy's ``brentq`` did the same at the
    cost of importing ``scipy.optimize`` (0.3 s in every process that plans). Only the points asked matter (``_Fits``
    remembers them): a bracket left wide costs the bisection more questions, never another answer."""
    kept = 0  # -1: the last step moved lo (hi kept), +1: it moved hi
    for _ in range(BRACKET_STEPS):
        width = MONOTONE_BEYOND * hi
        if hi - lo <= width:
            return
        root_lo, root_hi = math.sqrt(lo), math.sqrt(hi)  # the secant on sqrt(rho): epsilon is nearly linear there
        x = (root_hi - f_hi * (root_hi - root_lo) / (f_hi - f_lo)) ** 2 if f_hi > f_lo else math.nan
        if not lo <= x <= hi:  # no secant (the values underflowed to equal), or outside: halve
            x = lo + (hi - lo) / 2
        x = min(max(x, lo + width / 2), hi - width / 2)  # a point on an end (its excess exactly 0) closes nothing
        f = excess(x)
        if f <= 0:
            lo, f_lo = x, f
            f_hi, kept = (f_hi / 2 if kept == -1 else f_hi), -1
        else:
            hi, f_hi = x, f
            f_lo, kept = (f_lo / 2 if kept == 1 else f_lo), 1


BRACKET_STEPS = 60
"""At most this many OpenDP conversions in ``_bracket`` (about ten suffice)."""


def _bisect(fits, epsilon: float) -> float:
    lo, hi = 0.0, epsilon
    while hi - lo > 1e-12 * hi:
        mid = (lo + hi) / 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo


MONOTONE_BEYOND = 1e-13
"""OpenDP's conversion is monotone in rho between points this far apart (relative), not always between adjacent
floats (its search for the optimal order rounds): ``_Fits`` decides by its bracket only beyond this distance
(tested at 1e-14 and every ulp over 4 budgets, ``test_accounting_direct``)."""


class _Fits:
    """"Does rho fit in epsilon at delta?" as OpenDP answers it, remembering the largest rho that fit and the smallest
    that did not: a rho well below the first fits, one well above the second does not (``MONOTONE_BEYOND``)."""

    def __init__(self, epsilon: float, delta: float) -> None:
        self.epsilon, self.delta = epsilon, delta
        self.fit, self.unfit = 0.0, math.inf
        self.asked: dict[float, float] = {}  # rho -> its excess, as OpenDP answered

    def excess(self, rho: float) -> float:
        """OpenDP's epsilon of ``rho`` minus the target (<= 0: fits), remembered."""
        excess = zcdp_epsilon(rho, self.delta) - self.epsilon
        self.asked[rho] = excess
        if excess <= 0:
            self.fit = max(self.fit, rho)
        else:
            self.unfit = min(self.unfit, rho)
        return excess

    def __call__(self, rho: float) -> bool:
        if rho <= self.fit * (1 - MONOTONE_BEYOND):
            return True
        if rho >= self.unfit * (1 + MONOTONE_BEYOND):
            return False
        return self.excess(rho) <= 0


@lru_cache(maxsize=256)
def _conversion(rho: float):
    """OpenDP's privacy profile of a rho-zCDP measurement (the map of a measurement that costs rho)."""
    # OpenDP's own modules, not ``opendp.prelude``: the prelude imports its extras (scikit-learn, Polars, scipy.stats
    # where installed), about 2 s in every process that composes, for nothing used here
    from opendp.combinators import make_zCDP_to_approxDP
    from opendp.domains import atom_domain
    from opendp.measurements import make_user_measurement
    from opendp.measures import zero_concentrated_divergence
    from opendp.metrics import absolute_distance
    from opendp.mod import enable_features

    enable_features("contrib", "honest-but-curious")  # the map below states the ledger's composed rho
    measurement = make_user_measurement(
        atom_domain(T=float, nan=False),
        absolute_distance(T=float),
        zero_concentrated_divergence(),
        lambda value: value,
        lambda d_in: rho,
    )
    return make_zCDP_to_approxDP(measurement).map(1.0)
