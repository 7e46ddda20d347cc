"""The accountant: mixed pure-epsilon, (epsilon, delta) and zCDP pieces compose tightly, and never below what
an independent exact computation of ``dp-accounting`` certifies as the loss of mechanisms with those costs."""

from __future__ import annotations

import math

import pytest

from opal_dp.core import accounting
from opal_dp.core.accounting import PrivacyCost, compose, within, zcdp_epsilon

dp_event = pytest.importorskip("dp_accounting.dp_event")
from dp_accounting.pld import privacy_loss_distribution as pld  # noqa: E402
from dp_accounting.rdp import rdp_privacy_accountant as rdp  # noqa: E402

TREE = PrivacyCost.approx_dp(1.0, 0.0)  # one OD prefix tree: pure epsilon
GAUSS = [PrivacyCost.zcdp(0.12390919568099434, 6.25e-08)] * 4 + [PrivacyCost.zcdp(0.2478183913619887, 6.25e-08)] * 2
SBH = [PrivacyCost.approx_dp(e, 1 / 8e6) for e in (1, 1, 1, 1, 2, 2)]
PERIOD = GAUSS + [TREE] * 14  # a 14-day card_period: six Gaussian marginals and 14 OD trees


def lower_bound(pure: list[float], rhos: list[float], delta: float) -> float:
    """The exact epsilon, at ``delta``, of mechanisms that have exactly these costs: binary randomized response
    for each pure epsilon, a Gaussian of sigma 1/sqrt(2 rho) for each rho (rho-zCDP, no better). Optimistic
    PLDs, so this is below the true value: no valid accountant may certify less."""
    pieces = [pld.from_randomized_response(2 / (1 + math.exp(eps)), 2, pessimistic_estimate=False,
                                           value_discretization_interval=1e-3) for eps in pure]
    pieces += [pld.from_gaussian_mechanism(1 / math.sqrt(2 * rho), pessimistic_estimate=False,
                                           value_discretization_interval=1e-3) for rho in rhos]
    composed = pieces[0]
    for piece in pieces[1:]:
        composed = composed.compose(piece)
    return composed.get_epsilon_for_delta(delta)


def test_a_fortnight_of_trees_and_gaussian_marginals_composes_below_plain_addition() -> None:
    old = zcdp_epsilon(sum(c.rho for c in GAUSS) + 14 * 0.5, 7.5e-7 - 6 * 6.25e-8)  # trees as eps**2/2
    spent = compose(PERIOD, 7.5e-7)
    assert old == pytest.approx(28.55, abs=0.01)
    assert spent.epsilon < 22.0 - 1  # below plain addition 8 + 14, not only below 28.55
    assert spent.delta == 7.5e-7 and spent.rho == pytest.approx(0.9913, abs=1e-4)
    assert spent.epsilon >= lower_bound([1.0] * 14, [c.rho for c in GAUSS], 7.5e-7 - 6 * 6.25e-8)


def test_the_rdp_route_matches_dp_accounting_fed_directly() -> None:
    acc = rdp.RdpAccountant(neighboring_relation=rdp.NeighborRel.REPLACE_ONE)
    acc.compose(dp_event.RandomizedResponseDpEvent(2 / (1 + math.e), 2), 14)
    acc.compose(dp_event.ZCDpEvent(sum(c.rho for c in GAUSS)))
    assert compose(PERIOD, 7.5e-7).epsilon == pytest.approx(acc.get_epsilon(7.5e-7 - 6 * 6.25e-8), rel=1e-12)


@pytest.mark.parametrize("costs, delta", [
    ([TREE] * 30, 1e-6),
    (SBH * 3, 1e-5),
    (SBH * 2 + [TREE] * 5 + GAUSS, 1e-5),
    ([PrivacyCost.zcdp(0.05, 0.0)] * 20 + [PrivacyCost.approx_dp(0.5, 0.0)] * 10, 1e-6),
])
def test_never_below_the_exact_loss_and_never_above_basic_composition(costs, delta) -> None:
    spent = compose(costs, delta)
    pure = [c.epsilon for c in costs if c.measure == "approx_dp"]
    rhos = [c.rho for c in costs if c.measure == "zcdp"]
    events = math.fsum(c.delta for c in costs)
    kept = math.prod(1 - c.delta for c in costs)  # outside the pieces' own delta events, exactly
    assert spent.epsilon >= lower_bound(pure, rhos, (delta - (1 - kept)) / kept)
    if rhos:
        basic = math.fsum(pure) + zcdp_epsilon(math.fsum(rhos), delta - events)
    else:
        basic = math.fsum(pure)
    assert spent.epsilon <= basic and spent.delta <= delta


def test_all_approx_without_a_target_is_basic_composition() -> None:
    assert compose(SBH) == accounting.Guarantee(8.0, 6 / 8e6, None, "basic composition")
    with pytest.raises(ValueError, match="delta_target"):
        compose(GAUSS)


def test_within_takes_the_cheap_route_first_and_the_tight_one_when_needed(monkeypatch) -> None:
    """The ledger checks a cap on every charge: plain sums decide it when they fit, and the accountants run only when
    they do not. Kills the mutant that never takes the cheap route (``compose`` called for pure sums that fit)."""
    assert within(PERIOD, 21.0, 7.5e-7) and not within(PERIOD, 20.0, 7.5e-7)
    assert not within(SBH, 7.99, 1.0e-6)
    monkeypatch.setattr(accounting, "compose", lambda *args, **kwargs: pytest.fail("compose called"))
    assert within(SBH, 8.0, 6 / 8e6)


@pytest.mark.parametrize("bug", ["drops a piece", "under-converts the trees"])
def test_a_planted_accountant_bug_is_caught_by_the_lower_bound(monkeypatch, bug) -> None:
    """The planted bugs make the accountant certify less than mechanisms with these costs can lose."""
    costs = [TREE] * 14 + [PrivacyCost.zcdp(1.0, 0.0)]
    real = accounting._compose
    real.cache_clear()
    if bug == "drops a piece":
        monkeypatch.setattr(accounting, "_compose", lambda pieces, delta: real(pieces[:-1], delta))
    else:
        monkeypatch.setattr(accounting, "_flip", lambda eps: 2 / (1 + math.exp(eps / 2)))
    try:
        assert compose(costs, 1e-6).epsilon < lower_bound([1.0] * 14, [1.0], 1e-6)
    finally:
        real.cache_clear()


def test_a_huge_epsilon_drops_the_routes_that_overflow_and_keeps_basic_composition() -> None:
    spent = compose([PrivacyCost.approx_dp(800.0, 0.0), PrivacyCost.zcdp(0.1, 0.0)], 1e-6)
    assert spent.epsilon == 800.0 + zcdp_epsilon(0.1, 1e-6) and spent.composition.startswith("basic")


def test_the_pld_route_matches_dp_accounting_fed_directly() -> None:
    """The pld route, recomputed from the libraries: each (epsilon, delta) piece's PLD with its delta, composed, at
    a share of the delta left after the zCDP pieces' own deltas, plus the zCDP total converted at the rest. Kills a
    route that drops a piece's delta, miscounts the zCDP pieces' deltas, gives up on every mixed composition or
    discretises at the library's default instead of ``PLD_INTERVAL`` (mutants of ``_pld_epsilon`` that the tests of
    ``compose`` could not see: it only wins when tightest)."""
    from dp_accounting.pld import common

    approx = ((PrivacyCost.approx_dp(1.0, 1 / 8e6), 8), (PrivacyCost.approx_dp(2.0, 1 / 8e6), 4),
              (PrivacyCost.approx_dp(0.3337, 0.0), 1))  # off every discretisation grid: PLD_INTERVAL matters
    zcdp = ((PrivacyCost.zcdp(0.12390919568099434, 6.25e-08), 4), (PrivacyCost.zcdp(0.2478183913619887, 6.25e-08), 2))
    composed = None
    for cost, n in approx:
        one = pld.from_privacy_parameters(common.DifferentialPrivacyParameters(cost.epsilon, cost.delta),
                                          value_discretization_interval=1e-3)
        one = one.self_compose(n) if n > 1 else one
        composed = one if composed is None else composed.compose(one)
    room, rho = 1e-5 - 6 * 6.25e-08, 4 * 0.12390919568099434 + 2 * 0.2478183913619887
    mixed = min(composed.get_epsilon_for_delta(room * s) + zcdp_epsilon(rho, room * (1 - s)) for s in accounting._SPLITS)
    assert math.isfinite(mixed)
    assert accounting._pld_epsilon(approx, zcdp, 1e-5) == pytest.approx(mixed, rel=1e-12)
    assert accounting._pld_epsilon(approx, (), 1e-5) == pytest.approx(composed.get_epsilon_for_delta(1e-5), rel=1e-12)


@pytest.mark.parametrize("delta", [1e-12, 9.43e-9, 1e-6, 1e-3])
def test_on_zcdp_alone_the_rdp_route_never_states_less_than_openDP(delta) -> None:
    """Why ``compose`` skips the rdp route when every piece is zCDP: dp-accounting's conversion of the curve
    ``alpha * rho`` at its list of orders is never below OpenDP's over all orders (rho from 1e-4 to 50)."""
    for rho in [1e-4 * 1.5**k for k in range(30)]:
        alone = ((PrivacyCost.zcdp(rho, 0.0), 1),)
        assert accounting._rdp_epsilon(alone, delta) >= zcdp_epsilon(rho, delta)


def test_a_release_of_zcdp_pieces_composes_without_dp_accounting_and_a_mixed_one_with_it() -> None:
    """The default card-level release (zCDP pieces only) never imports dp-accounting and scipy (about 1.3 s a
    process), neither to compose nor to calibrate (``zcdp_rho_for``); a composition with an (epsilon, delta) piece still takes its tighter routes."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", """
import sys
from opal_dp.core.accounting import PrivacyCost, compose, zcdp_rho_for
zcdp = compose([PrivacyCost.zcdp(zcdp_rho_for(1.0, 6.25e-8), 6.25e-8)] * 6, 1e-6)  # a plan's calibration too
alone = sorted({m.split(".")[0] for m in sys.modules} & {"dp_accounting", "scipy"})
mixed = compose([PrivacyCost.approx_dp(1.0, 0.0)] * 14 + [PrivacyCost.zcdp(0.12, 6.25e-8)] * 6, 7.5e-7)
print(zcdp.composition.split(":")[0], alone, mixed.composition.split(":")[0], "dp_accounting" in sys.modules)
"""], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["basic", "[]", "rdp", "True"], done.stdout
