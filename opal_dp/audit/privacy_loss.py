"""Empirical privacy audit of a histogram release mechanism: sampled outputs on neighbouring inputs.

Hypothesis tested. ``M`` is (epsilon, delta)-DP under a relation iff for every pair of neighbours
``D ~ D'``, in both orders, and every event ``S``: ``P[M(D) in S] - e^epsilon P[M(D') in S] <= delta``.

Inputs. Neighbours differ in at most two bins (``Relation.bins_touched``), so each pair is a
histogram over two bins ``x`` (label 0) and ``x'`` (label 1), count 0 meaning absent (not passed to
the mechanism, never released). Further bins have the same counts in ``D`` and ``D'``; a mechanism
that noises bins independently and emits them in a data-independent order releases them the same
way under both, so they can be simulated from the pair's output (post-processing) and cannot raise
``P(S) - e^epsilon Q(S)``. Two bins already expose a data-dependent order. See
``neighbouring_pairs`` for the pairs (interior, at the threshold, a bin vanishing or appearing).

Outputs. One release is the sequence of (bin, released count) pairs in the order the mechanism
emits them, suppressed bins left out: exactly what a published table reveals, order included.

Procedure, per pair and direction (``P = M(D), Q = M(D')`` and swapped):

1. Selection. ``selection_runs`` releases of each input give empirical output distributions
   ``p^, q^``. The candidate events are the level sets ``S_t = {o : p^(o) > 0, p^(o) >= e^t q^(o)}``
   for ``t = LEVELS * epsilon`` and ``t = inf`` (outputs never seen from ``Q``). ``S_epsilon``
   maximises the empirical ``P(S) - e^epsilon Q(S)``; larger ``t`` target the largest privacy loss.
   For the true distributions ``S_t`` maximises ``P(S) - e^t Q(S)`` over all events (Neyman-Pearson),
   so it subsumes hand-picked events such as "x released with count >= c" or "x emitted first".
2. Measurement. ``runs`` fresh releases of each input give the frequencies of every candidate.
   The candidates were fixed before these draws, so exact Clopper-Pearson bounds apply; each of
   the 4 bounds (lower/upper on ``P(S)`` and ``Q(S)``) of each of the at most
   ``pairs * 2 * (len(LEVELS) + 1)`` candidates is taken at level ``alpha / (4 * that number)``
   (Bonferroni), so all hold simultaneously with probability at least ``1 - alpha``.
3. Verdict. ``violation_lower(S) = LCB P(S) - e^epsilon UCB Q(S)``. If ``M`` is (epsilon, delta)-DP,
   ``P(S) - e^epsilon Q(S) <= delta`` for every ``S``, so ``violation_lower > delta`` for some ``S``
   has probability at most ``alpha``: the audit flags a correct mechanism with probability at most
   ``alpha`` (1e-6) whatever the seed, and a flag is statistically significant evidence of a bug.
   Equivalently ``epsilon_lower = max_S ln((LCB P(S) - delta) / UCB Q(S)) > epsilon``;
   ``epsilon_lower`` is a ``1 - alpha`` lower confidence bound on every ``epsilon'`` for which ``M``
   could be (epsilon', delta)-DP.

Relaxed delta. The audit configures the mechanism with (epsilon, delta) = (1, 0.01), not a
release's delta of about 1e-7, whose delta/2 events would occur 0.06 times in 10^6 runs. The
scale and threshold formulas, sampler and ordering are the same code at any (epsilon, delta), so
their bugs show here. Replace-one at (1, 0.01): scale 2, ``min_released_count`` 12,
P(release | count 1) = 0.0025, i.e. about 2500 of 10^6 runs. Exact worst-case
``P(S) - e^epsilon Q(S)`` over these pairs (computed from the closed-form distributions): real
mechanism 0.0025 (replace-one) and 0.0049 (add/remove), both below delta; noise scale 1/epsilon
under replace-one 0.338; threshold ``1 + ln(1/delta)/epsilon`` under replace-one 0.051; bins in
true-count order 1.0. At 10^6 runs the confidence interval on ``P(S) - e^epsilon Q(S)`` has
half-width about 0.0013 near ``P(S) = 0.05`` and 0.007 near 0.5, so each bug exceeds delta by about
30 half-widths or more and is missed with negligible probability.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from opal_dp.audit.bounds import clopper_pearson
from opal_dp.core.bits import SecureBits, SeededBits
from opal_dp.core.mechanism import HistogramMechanism, Relation
from opal_dp.core.noise import DiscreteLaplace
from opal_dp.core.sbh import StabilityHistogram
from opal_dp.core.sensitivity import Sensitivity
from opal_dp.core.units import ContributionBounds, PrivacyUnit, sensitivity
from opal_dp.parallel import map_calls


def trip_sensitivity(relation: Relation) -> Sensitivity:
    """One trip under ``relation``: the neighbours ``neighbouring_pairs`` builds."""
    return sensitivity(PrivacyUnit.TRIP, relation, ContributionBounds())

AUDIT_EPSILON = 1.0
AUDIT_DELTA = 0.01
"""Relaxed delta at which the audit runs the mechanism (module docstring, "Relaxed delta")."""
LEVELS = np.arange(13) / 4
"""Privacy-loss levels of the candidate events, in units of epsilon (0, 0.25, ..., 3); plus inf."""
CHUNK = 2**18
"""Releases per ``mechanism.release`` call (bounds memory; the call is vectorised)."""

MechanismFactory = Callable[[float, float, Sensitivity, DiscreteLaplace], HistogramMechanism]
"""Builds the audited mechanism from ``(epsilon, delta, sensitivity, noise)``; ``StabilityHistogram`` is one."""
Sample = tuple[np.ndarray, np.ndarray]
"""An empirical output distribution: sorted encoded outputs and how often each occurred."""
Order = Callable[[np.ndarray], np.ndarray]
"""The caller's bin order: true counts of the present bins, in label order -> the permutation in
which they are passed to ``release`` and emitted. A private release must not depend on the counts."""

_SLOT = 1 << 31  # one emitted (bin, count) pair encodes as 1 + bin + bins*count < _SLOT
_HASH = 0x9E3779B97F4A7C15  # odd multiplier of the slot hash beyond two bins


def canonical_order(counts: np.ndarray) -> np.ndarray:
    """The release engine's order: by bin label, independent of the data (document §3.3.1)."""
    return np.arange(counts.size)


@dataclass(frozen=True)
class NeighbouringPair:
    """Histograms ``d`` and ``d_prime`` over the same bins (0 = absent), neighbours under the audited unit."""

    name: str
    d: tuple[int, ...]
    d_prime: tuple[int, ...]


def neighbouring_pairs(relation: Relation, min_released_count: int) -> tuple[NeighbouringPair, ...]:
    """The audited neighbours, with ``m = min_released_count`` and ``h = 3m`` (released almost surely).

    Replace-one (one trip moved from ``x`` to ``x'``): interior ``(h+1, h) -> (h, h+1)`` (the
    count order of the bins flips), at the threshold ``(m, m-1) -> (m-1, m)``, ``x`` vanishes
    ``(1, h) -> (0, h+1)``, ``x'`` appears ``(h, 0) -> (h-1, 1)``, both ``(1, 0) -> (0, 1)``.
    Add/remove (one trip removed from ``x``): interior ``(h, h) -> (h-1, h)``, at the threshold
    ``(m, h) -> (m-1, h)``, ``x`` vanishes ``(1, h) -> (0, h)``, alone ``(1, 0) -> (0, 0)`` (empty input).
    Every pair is audited in both directions, which covers adding the trip back.
    """
    m = max(int(min_released_count), 2)
    h = 3 * m
    if Relation(relation) is Relation.REPLACE_ONE:
        pairs = [
            ("interior", (h + 1, h), (h, h + 1)),
            ("threshold", (m, m - 1), (m - 1, m)),
            ("x vanishes", (1, h), (0, h + 1)),
            ("x' appears", (h, 0), (h - 1, 1)),
            ("both edges", (1, 0), (0, 1)),
        ]
    else:
        pairs = [
            ("interior", (h, h), (h - 1, h)),
            ("threshold", (m, h), (m - 1, h)),
            ("x vanishes", (1, h), (0, h)),
            ("alone", (1, 0), (0, 0)),
        ]
    return tuple(NeighbouringPair(*p) for p in pairs)


@dataclass(frozen=True)
class EventBound:
    """Simultaneous confidence bounds for one candidate event ``S`` of one pair and direction.

    ``reverse`` False: ``P = M(d)``, ``Q = M(d_prime)``; True: swapped. ``S`` holds the ``outputs``
    outputs whose selection-phase privacy loss ``ln(p^/q^)`` is at least ``level`` (inf: never seen
    from ``Q``). ``p``, ``q``: measured frequencies. ``P(S) - e^epsilon Q(S)`` lies in
    ``[violation_lower, violation_upper]``; ``epsilon_lower = ln((LCB P(S) - delta) / UCB Q(S))``
    (0 when ``LCB P(S) <= delta``).
    """

    pair: NeighbouringPair
    reverse: bool
    level: float
    outputs: int
    p: float
    q: float
    violation_lower: float
    violation_upper: float
    epsilon_lower: float


@dataclass(frozen=True)
class AuditReport:
    """Outcome of ``audit_mechanism``. ``events``: the worst event (largest ``violation_lower``) of
    each pair and direction; ``worst``: the worst of all. ``epsilon_lower``: max over all candidate
    events. ``passed``: no significant violation, i.e. ``worst.violation_lower <= delta``, equivalently
    ``epsilon_lower <= epsilon``. ``runs``/``selection_runs`` are per input."""

    mechanism: dict
    relation: Relation
    epsilon: float
    delta: float
    runs: int
    selection_runs: int
    alpha: float
    candidates: int
    events: tuple[EventBound, ...]
    worst: EventBound
    epsilon_lower: float
    passed: bool
    seconds: float


def _encode(labels: np.ndarray, noisy: np.ndarray, bins: int) -> np.ndarray:
    """One int64 per release (row of ``noisy``, bins in emission order ``labels``, out of ``bins``): its
    released (bin, count) pairs in emission order, suppressed bins dropped; a pair is the slot
    ``1 + bin + bins*count``. Up to two bins the code is exact (two base-``_SLOT`` digits); beyond, a
    polynomial hash of the slots modulo 2**64. A collision merges two outputs into one event: that is
    post-processing, so it can only weaken the audit's power, never raise a false alarm."""
    if np.any(noisy < 0) or np.any(noisy >= (_SLOT - 1 - bins) // bins):
        raise ValueError("released counts must be small enough for the audit's output encoding")
    slots = np.zeros((noisy.shape[0], max(bins, 2)), dtype=np.int64)
    slots[:, : labels.size] = np.where(noisy > 0, 1 + labels + bins * noisy, 0)
    order = np.argsort(slots == 0, axis=1, kind="stable")  # released slots to the front, in emission order
    packed = np.take_along_axis(slots, order, axis=1)
    if bins <= 2:  # the encoding depends on the pair's bins only, so both neighbours' outputs share it
        first, second = packed[:, 0], packed[:, 1]
        return first * _SLOT + second
    code = np.zeros(noisy.shape[0], dtype=np.uint64)
    for column in packed.T:
        code = code * np.uint64(_HASH) + column.astype(np.uint64)
    return code.view(np.int64)


def _sample(mech: HistogramMechanism, counts: tuple[int, ...], order: Order, runs: int) -> Sample:
    """Empirical output distribution of ``runs`` independent releases of ``counts`` (one per bin, 0 = absent)."""
    counts = np.asarray(counts, dtype=np.int64)
    labels = np.flatnonzero(counts)
    labels = labels[order(counts[labels])]
    present = counts[labels]
    out = np.empty(runs, dtype=np.int64)
    for start in range(0, runs, CHUNK):
        n = min(CHUNK, runs - start)
        out[start : start + n] = _encode(labels, mech.release(np.tile(present, n)).reshape(n, labels.size), counts.size)
    return np.unique(out, return_counts=True)


def _frequencies(outputs: np.ndarray, sample: Sample) -> np.ndarray:
    """How often each of the sorted ``outputs`` occurs in ``sample`` (its other outputs ignored)."""
    values, counts = sample
    found = np.isin(values, outputs)
    weighted = np.bincount(np.searchsorted(outputs, values[found]), counts[found], minlength=outputs.size)
    return weighted.astype(np.int64)  # bincount weights are float64; the sums are exact integers


def _direction(
    pair: NeighbouringPair, reverse: bool, p_sel: Sample, q_sel: Sample, p_run: Sample, q_run: Sample,
    runs: int, epsilon: float, delta: float, alpha: float,
) -> list[EventBound]:
    """Level-set events of ``P`` vs ``Q`` chosen on the ``_sel`` samples, bounded on the ``_run`` ones."""
    outputs = p_sel[0]  # S only ever holds outputs seen from P
    with np.errstate(divide="ignore"):  # equal sample sizes: counts stand for frequencies
        loss = np.log(_frequencies(outputs, p_sel)) - np.log(_frequencies(outputs, q_sel))
    levels = np.append(np.inf, LEVELS[::-1] * epsilon)  # descending: a repeated set keeps its top level
    members, first = np.unique(loss[None, :] >= levels[:, None], axis=0, return_index=True)
    keep = members.any(axis=1)
    members, levels = members[keep].astype(np.int64), levels[first[keep]]
    k_p, k_q = members @ _frequencies(outputs, p_run), members @ _frequencies(outputs, q_run)
    lcb_p, ucb_p = clopper_pearson(k_p, runs, alpha)
    lcb_q, ucb_q = clopper_pearson(k_q, runs, alpha)
    e = math.exp(epsilon)
    with np.errstate(divide="ignore", invalid="ignore"):
        eps_lower = np.where(lcb_p > delta, np.log((lcb_p - delta) / ucb_q), 0.0)
    return [
        EventBound(pair, reverse, float(levels[i]), int(members[i].sum()), k_p[i] / runs, k_q[i] / runs,
                   float(lcb_p[i] - e * ucb_q[i]), float(ucb_p[i] - e * lcb_q[i]), float(eps_lower[i]))
        for i in range(levels.size)
    ]


def _pair_bounds(sample: Sampler, pair: NeighbouringPair, runs: int, selection_runs: int, epsilon: float,
                 delta: float, level: float) -> tuple[list[EventBound], list[EventBound]]:
    """The candidate events' bounds of one pair, ``D`` vs ``D'`` then ``D'`` vs ``D`` (fresh samples)."""
    d_sel, d_prime_sel = (sample(c, selection_runs) for c in (pair.d, pair.d_prime))
    d_run, d_prime_run = (sample(c, runs) for c in (pair.d, pair.d_prime))
    return (_direction(pair, False, d_sel, d_prime_sel, d_run, d_prime_run, runs, epsilon, delta, level),
            _direction(pair, True, d_prime_sel, d_sel, d_prime_run, d_run, runs, epsilon, delta, level))


def audit_mechanism(
    factory: MechanismFactory = StabilityHistogram,
    relation: Relation = Relation.REPLACE_ONE,
    *,
    epsilon: float = AUDIT_EPSILON,
    delta: float = AUDIT_DELTA,
    runs: int = 10**6,
    selection_runs: int | None = None,
    alpha: float = 1e-6,
    seed: int | None = None,
    order: Order = canonical_order,
    workers: int | None = None,
) -> AuditReport:
    """Audit ``factory(epsilon, delta, trip sensitivity, noise)`` for one trip under ``relation`` on the
    ``neighbouring_pairs``, emitting bins in ``order`` (module docstring).

    ``seed``: ``SeededBits(seed)`` for a reproducible audit (the false-alarm bound ``alpha`` holds for every
    seed), ``None``: ``SecureBits``.
    """
    relation = Relation(relation)
    mech = factory(epsilon, delta, trip_sensitivity(relation), DiscreteLaplace(_bits(seed)))
    pairs = neighbouring_pairs(relation, mech.describe()["min_released_count"])
    return audit_pairs(mech, pairs, epsilon=epsilon, delta=delta, runs=runs, selection_runs=selection_runs,
                       alpha=alpha, order=order, relation=relation, workers=workers)


def _bits(seed: int | None):
    return SecureBits() if seed is None else SeededBits(seed)


def audit_pairs(
    mech: HistogramMechanism,
    pairs: Sequence[NeighbouringPair],
    *,
    epsilon: float,
    delta: float,
    runs: int = 10**6,
    selection_runs: int | None = None,
    alpha: float = 1e-6,
    order: Order = canonical_order,
    relation: Relation = Relation.ADD_REMOVE,
    workers: int | None = None,
) -> AuditReport:
    """Audit ``mech`` against the claim (epsilon, delta) on explicit neighbouring histograms (module docstring).

    ``runs`` fresh releases per input for the bounds (default 10^6), after ``selection_runs`` (default
    ``runs // 10``) to choose the events; a pair per worker process (``workers``, ``audit_samples``) unless the
    mechanism's noise is seeded.
    """
    description = mech.describe()
    return audit_samples(MechanismSampler(mech, order), pairs, description, epsilon=epsilon, delta=delta, runs=runs,
                         selection_runs=selection_runs, alpha=alpha, relation=relation,
                         workers=1 if description.get("seeded", True) else workers)


@dataclass(frozen=True)
class MechanismSampler:
    """``_sample`` of ``mech`` as a picklable sampler (``audit_samples`` may draw pairs in worker processes)."""

    mech: HistogramMechanism
    order: Order

    def __call__(self, counts: tuple[int, ...], n: int) -> Sample:
        return _sample(self.mech, counts, self.order, n)


Sampler = Callable[[tuple[int, ...], int], Sample]
"""(true counts of a neighbouring input, n) -> the empirical distribution of n independent encoded outputs."""


def audit_samples(
    sample: Sampler,
    pairs: Sequence[NeighbouringPair],
    mechanism: dict,
    *,
    epsilon: float,
    delta: float,
    runs: int = 10**6,
    selection_runs: int | None = None,
    alpha: float = 1e-6,
    relation: Relation = Relation.ADD_REMOVE,
    workers: int | None = 1,
) -> AuditReport:
    """``audit_pairs`` for any mechanism whose outputs ``sample`` draws and encodes (steps 1-3 of the module
    docstring); ``mechanism`` describes it in the report.

    ``workers``: the pairs are audited a pair per worker process (``opal_dp.parallel``; ``None``: the configured
    number). Only for a picklable ``sample`` that draws from the OS CSPRNG, so that every process draws its own
    independent noise; a seeded sampler copied into several processes would repeat one stream, so it stays in
    this process (the default, 1)."""
    started = time.perf_counter()
    selection_runs = runs // 10 if selection_runs is None else selection_runs
    if runs < 1 or selection_runs < 1:
        raise ValueError("runs and selection_runs must be >= 1")
    candidates = len(pairs) * 2 * (LEVELS.size + 1)
    level = alpha / (4 * candidates)
    events, epsilon_lower = [], 0.0
    calls = [(sample, pair, runs, selection_runs, epsilon, delta, level) for pair in pairs]
    for directions in map_calls(_pair_bounds, calls, workers):
        for bounds in directions:
            events.append(max(bounds, key=lambda b: b.violation_lower))
            epsilon_lower = max(epsilon_lower, *(b.epsilon_lower for b in bounds))
    worst = max(events, key=lambda b: b.violation_lower)
    return AuditReport(
        mechanism=mechanism,
        relation=Relation(relation),
        epsilon=float(epsilon),
        delta=float(delta),
        runs=runs,
        selection_runs=selection_runs,
        alpha=alpha,
        candidates=candidates,
        events=tuple(events),
        worst=worst,
        epsilon_lower=epsilon_lower,
        passed=worst.violation_lower <= delta,
        seconds=time.perf_counter() - started,
    )
