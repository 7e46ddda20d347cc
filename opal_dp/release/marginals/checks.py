"""Consistency checks of a released marginal partition. Pure functions: each returns None when the
check passes, else a message saying what is wrong. The Dagster asset checks and the publish gate
both call ``blocking_problems``, so what is published is exactly what was checked.

The release design (named by the mechanism the ledger charged) chooses the checks (``DESIGN_CHECKS``): SBH
releases only bins present in the data, each at or above its threshold; the public-domain design releases cells
of the public domain, listed ones at or above tau and the rest in remainder rows, and its three tables of a
tap must add up exactly (``PARTITION_CHECKS``, on the whole partition).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pandera.pandas as pa

from opal_dp.core.accounting import Guarantee
from opal_dp.core.ledger_records import Charge, Draw
from opal_dp.prep.schemas import UNKNOWN, WINDOWS_PER_DAY
from opal_dp.release.marginals.tables import COUNT, LOC, MARGINALS, TIME, Marginal
from opal_dp.release.marginals.public_domain import OTHER, OTHER_WINDOW, Domain
from opal_dp.release.marginals.schemas import schema_for
from opal_dp.release.options import Design

# Values of P(|sum of noise| > bound) we tolerate before the plausibility warning fires.
PLAUSIBILITY_FALSE_ALARM = 1e-6


@dataclass(frozen=True)
class ReleaseUnderCheck:
    """Everything a check may look at for one (partition, marginal)."""

    partition: str
    marginal: Marginal
    released: pd.DataFrame
    truth: pd.DataFrame  # true histogram (internal only; checks never publish it)
    mechanism: Mapping  # HistogramMechanism.describe() of the mechanism that drew it
    draw: Draw | None  # the ledger draw that stands for this release
    charge: Charge | None  # and its charge
    scope_spend: Guarantee  # what the draw's ledger scope costs one unit in total
    cap: tuple[float, float]  # the cap in force for the unit, per scope
    public_labels: frozenset[str]
    domain: Domain | None = None  # public-domain design: the public cells of this partition's (mode, tap)

    @property
    def design(self) -> Design:
        return Design.parse(self.mechanism.get("design", Design.SBH))

    @property
    def remainders(self) -> bool:
        """Whether this table may hold remainder rows (the public-domain design's joint)."""
        return self.design.consistent and self.marginal.by_time and self.marginal.by_loc


def no_new_points(r: ReleaseUnderCheck) -> str | None:
    """Every released bin is present in the true data: no bin is invented (sbh design: bins absent from the data
    are never drawn)."""
    labels = r.truth[LOC].cat.categories if r.marginal.by_loc else pd.Index([])
    new = ~np.isin(_bin_keys(r.released, r.marginal, labels), _bin_keys(r.truth, r.marginal, labels))
    if not new.any():
        return None
    example = r.released.loc[new, r.marginal.dimensions].iloc[0].to_dict()
    return f"{int(new.sum())} released bins absent from the data, e.g. {example}"


def _bin_keys(frame: pd.DataFrame, marginal: Marginal, labels: pd.Index) -> np.ndarray:
    """One exact integer per bin: time window and the position of its label in ``labels`` (0: absent)."""
    key = np.zeros(len(frame), dtype=np.int64)
    if marginal.by_time:
        key = frame[TIME].to_numpy(np.int64) - UNKNOWN
    if marginal.by_loc:
        loc = frame[LOC]
        position = labels.get_indexer(loc.cat.categories)[loc.cat.codes.to_numpy()] + 1
        key = key * (len(labels) + 1) + position
    return key


def counts_above_threshold(r: ReleaseUnderCheck) -> str | None:
    """Integer counts, each at least the ceiling of the mechanism's threshold, which is the one it records."""
    counts = r.released[COUNT]
    floor = r.mechanism["min_released_count"]
    if floor != math.ceil(r.mechanism["threshold"]):
        return f"min_released_count {floor} is not ceil(threshold {r.mechanism['threshold']})"
    if not pd.api.types.is_integer_dtype(counts):
        return f"counts have dtype {counts.dtype}, not integer"
    low = counts[counts < floor]
    return None if low.empty else f"{len(low)} counts below ceil(threshold) = {floor}, e.g. {int(low.iloc[0])}"


def canonical_order(r: ReleaseUnderCheck) -> str | None:
    """Rows in the canonical (time, location) order over the sorted public location labels: the order says
    nothing about the data."""
    columns = []
    if r.marginal.by_time:
        columns.append(r.released[TIME].to_numpy("int64"))
    if r.marginal.by_loc:
        loc = r.released[LOC]
        if list(loc.cat.categories) != sorted(loc.cat.categories):
            return "location categories are not the sorted public label universe"
        columns.append(loc.cat.codes.to_numpy("int64"))
    if len(r.released) < 2:
        return None
    keys = np.column_stack(columns)
    step = np.diff(keys, axis=0)
    first_change = np.take_along_axis(step, np.argmax(step != 0, axis=1)[:, None], axis=1)[:, 0]
    bad = np.flatnonzero(first_change <= 0)
    return None if bad.size == 0 else f"rows {bad[0]} and {bad[0] + 1} are out of canonical (time, location) order"


def schema_valid(r: ReleaseUnderCheck) -> str | None:
    """The table satisfies its published Pandera schema (columns, types, ranges)."""
    schema = schema_for(r.marginal, r.design)
    try:
        schema.validate(r.released, lazy=True)
    except (pa.errors.SchemaError, pa.errors.SchemaErrors) as err:
        return f"schema {schema.__name__} violated: {str(err)[:500]}"
    return None


def budget_recorded(r: ReleaseUnderCheck) -> str | None:
    """The release is a completed ledger draw, charged with exactly this mechanism, within the cap."""
    if r.draw is None or r.charge is None:
        return "no ledger draw stands for this release"
    if r.draw.status != "complete":
        return f"ledger draw {r.draw.id} is {r.draw.status}, not complete"
    if json.loads(r.charge.mechanism) != dict(r.mechanism):
        return f"ledger charge {r.charge.id} was made for other mechanism parameters than this release's"
    (cap_eps, cap_delta), spend = r.cap, r.scope_spend
    if spend.epsilon > cap_eps * (1 + 1e-9) or spend.delta > cap_delta * (1 + 1e-9):
        return f"scope {r.charge.scope} costs (ε, δ) = ({spend.epsilon}, {spend.delta}), over the cap ({cap_eps}, {cap_delta})"
    return None


def no_identifiers(r: ReleaseUnderCheck) -> str | None:
    """Only the marginal's own columns, location values from the public label universe and time values that are
    15-minute window indices: no card id or raw value can be in the table."""
    expected = [*r.marginal.dimensions, COUNT]
    if list(r.released.columns) != expected:
        return f"columns {list(r.released.columns)}; a release may only hold {expected}"
    if r.marginal.by_loc:
        unknown = set(r.released[LOC].astype(str)) - r.public_labels - ({OTHER} if r.remainders else set())
        if unknown:
            return f"{len(unknown)} location values outside the public label universe, e.g. {sorted(unknown)[0]!r}"
    if r.marginal.by_time:
        window = r.released[TIME]
        low = OTHER_WINDOW if r.remainders else UNKNOWN
        if not pd.api.types.is_integer_dtype(window) or ((window < low) | (window >= WINDOWS_PER_DAY)).any():
            return "time values are not 15-minute window indices"
    return None


def within_public_domain(r: ReleaseUnderCheck) -> str | None:
    """Every released cell lies in the public domain of its (mode, tap); remainder rows name a domain row or
    column (public-domain design)."""
    if r.domain is None:
        return "no public domain was given for this release"
    rows = r.released
    time = rows[TIME].to_numpy("int64") if r.marginal.by_time else None
    if r.marginal.by_loc:  # compare integer codes: the labels are compared once per category, not per row
        column = rows[LOC] if isinstance(rows[LOC].dtype, pd.CategoricalDtype) else rows[LOC].astype("category")
        codes, names = column.cat.codes.to_numpy(), pd.Index(column.cat.categories.astype(str))
        other = codes == (names.get_loc(OTHER) if OTHER in names else -2)
    inside = np.zeros(len(rows), dtype=bool)
    for block in r.domain.blocks:
        in_time = np.isin(time, block.windows) if time is not None else None
        in_loc = np.isin(codes, np.flatnonzero(names.isin(block.locations))) if r.marginal.by_loc else None
        if time is None:
            inside |= in_loc
        elif in_loc is None:
            inside |= in_time
        else:
            inside |= (in_time & (in_loc | other)) | ((time == OTHER_WINDOW) & in_loc)
    if inside.all():
        return None
    example = rows.loc[~inside, r.marginal.dimensions].iloc[0].to_dict()
    return f"{int((~inside).sum())} released rows outside the public domain of {r.domain.mode} tap-{r.domain.tap}, " \
           f"e.g. {example}"


def listed_counts_reach_tau(r: ReleaseUnderCheck) -> str | None:
    """Integer counts; every individually listed cell of the joint reaches the public threshold tau, anything
    below it is in a remainder row (public-domain design)."""
    counts = r.released[COUNT]
    if not pd.api.types.is_integer_dtype(counts):
        return f"counts have dtype {counts.dtype}, not integer"
    if not r.remainders:
        return None
    tau = r.mechanism["tau"]
    listed = (r.released[TIME] != OTHER_WINDOW) & (r.released[LOC] != OTHER)
    low = counts[listed & (counts < tau)]
    return None if low.empty else f"{len(low)} listed cells below tau = {tau}, e.g. {int(low.iloc[0])}"


def sums_exact(group: list[ReleaseUnderCheck]) -> str | None:
    """The partition's published rows add up exactly with their remainder rows (``release-format.md``):
    each one-way count equals its joint rows, ``other`` included, and both one-way totals agree.

    Summed on the released frames (window indices and location categories), not on the formatted files:
    the check runs in the release step and again at the publish gate, on every partition."""
    by_name = {r.marginal.name: r.released for r in group}
    if sorted(by_name) != sorted(m.name for m in MARGINALS):
        return f"the partition has the marginals {sorted(by_name)}, not all six"
    problems = []
    for tap in ("on", "off"):
        joint, time, loc = (by_name[f"tap_{tap}_{table}"] for table in ("time_loc", "time", "loc"))
        listed_time = joint.loc[joint[TIME] != OTHER_WINDOW].groupby(TIME)[COUNT].sum()
        listed_loc = joint.loc[joint[LOC] != OTHER].groupby(LOC, observed=True)[COUNT].sum()
        listed_loc.index = listed_loc.index.astype(str)
        one_way_loc = loc.groupby(LOC, observed=True)[COUNT].sum()
        one_way_loc.index = one_way_loc.index.astype(str)
        for table, listed, one_way in (("time", listed_time, time.groupby(TIME)[COUNT].sum()),
                                       ("loc", listed_loc, one_way_loc)):
            both = pd.concat([listed.rename("joint"), one_way.rename("one_way")], axis=1).fillna(0)
            for key, row in both[both["joint"] != both["one_way"]].iterrows():
                problems.append(f"tap-{tap} {table} {key}: {int(row['one_way'])}, but its time-loc rows "
                                f"(remainders included) sum to {int(row['joint'])}")
        if int(time[COUNT].sum()) != int(loc[COUNT].sum()):
            problems.append(f"tap-{tap}: the time table totals {int(time[COUNT].sum())}, the loc table "
                            f"{int(loc[COUNT].sum())}")
    return None if not problems else f"{len(problems)} sums differ, e.g. {problems[0]}"


CHECKS: dict[str, Callable[[ReleaseUnderCheck], str | None]] = {
    "no_new_points": no_new_points,
    "counts_above_threshold": counts_above_threshold,
    "within_public_domain": within_public_domain,
    "listed_counts_reach_tau": listed_counts_reach_tau,
    "canonical_order": canonical_order,
    "schema_valid": schema_valid,
    "budget_recorded": budget_recorded,
    "no_identifiers": no_identifiers,
}
PARTITION_CHECKS: dict[str, Callable[[list[ReleaseUnderCheck]], str | None]] = {"sums_exact": sums_exact}
COMMON = ("canonical_order", "schema_valid", "budget_recorded", "no_identifiers")
DESIGN_CHECKS: dict[Design, tuple[str, ...]] = {
    Design.SBH: ("no_new_points", "counts_above_threshold", *COMMON),
    Design.PUBLIC_DOMAIN: ("within_public_domain", "listed_counts_reach_tau", *COMMON, "sums_exact"),
    Design.HIERARCHY: ("within_public_domain", *COMMON, "sums_exact"),  # listed by noisy count, not fitted
}
BLOCKING_CHECKS: dict[str, Callable] = {**CHECKS, **PARTITION_CHECKS}
"""Every blocking check of any design, by name (the Dagster check specs); ``DESIGN_CHECKS`` says which apply."""


def blocking_problems(releases: Iterable[ReleaseUnderCheck]) -> dict[str, list[str]]:
    """check name -> "partition marginal: problem" for every failing (partition, marginal), over the checks of
    the releases' design (one design per call: a release is made under one). A partition check's problem is
    reported on each marginal of the partition.

    The schema is validated once per marginal over all partitions (Pandera's per-call cost is
    high); only if that fails is each partition validated on its own to say which one failed.
    """
    releases = list(releases)
    designs = {r.design for r in releases}
    if len(designs) > 1:
        raise ValueError(f"the releases under check come from several designs {sorted(designs)}")
    names = DESIGN_CHECKS[designs.pop() if designs else Design.SBH]
    problems: dict[str, list[str]] = {name: [] for name in names}
    for name in names:
        if name in PARTITION_CHECKS:
            for group in _by(releases, lambda r: r.partition).values():
                problem = PARTITION_CHECKS[name](group)
                if problem:
                    problems[name] += [f"{r.partition} {r.marginal.name}: {problem}" for r in group]
            continue
        if name == "schema_valid":
            candidates = [r for group in _by(releases, lambda r: r.marginal.name).values() if not _schema_holds(group)
                          for r in group]
        else:
            candidates = releases
        for r in candidates:
            problem = CHECKS[name](r)
            if problem:
                problems[name].append(f"{r.partition} {r.marginal.name}: {problem}")
    return problems


def _by(releases: list[ReleaseUnderCheck], key: Callable[[ReleaseUnderCheck], str]) -> dict[str, list[ReleaseUnderCheck]]:
    groups: dict[str, list[ReleaseUnderCheck]] = {}
    for r in releases:
        groups.setdefault(key(r), []).append(r)
    return groups


def _schema_holds(group: list[ReleaseUnderCheck]) -> bool:
    frames = [r.released for r in group if len(r.released)] or [group[0].released]
    stacked = pd.concat(frames, ignore_index=True)
    try:
        schema_for(group[0].marginal, group[0].design).validate(stacked)
    except (pa.errors.SchemaError, pa.errors.SchemaErrors):
        return False
    return True


def noise_sum_bound(bins: int, mechanism: Mapping, false_alarm: float = PLAUSIBILITY_FALSE_ALARM) -> float:
    """b with P(|Z_1 + ... + Z_bins| > b) <= false_alarm for the iid noise of ``mechanism`` (its describe()).

    Discrete Laplace (scale s): Chernoff; for every 0 < t < 1/s, P(S >= b) <= exp(n ln M(t) - t b) with the
    moment generating function M(t) = (1-q)^2 / ((1 - q e^t)(1 - q e^-t)), q = exp(-1/s). Each t on a grid
    gives a valid b = (n ln M(t) + ln(2/false_alarm)) / t (two-sided); we return the smallest.
    Discrete Gaussian (sigma): sigma²-subgaussian (Canonne, Kamath & Steinke 2020, Cor. 9), so the sum is
    n·sigma²-subgaussian and b = sigma·sqrt(2 n ln(2/false_alarm)).
    """
    if bins == 0:
        return 0.0
    scale = mechanism["scale"]
    if mechanism["noise"] == "discrete_gaussian":
        return scale * math.sqrt(2 * bins * math.log(2 / false_alarm))
    q = math.exp(-1 / scale)
    t = np.linspace(1, 199, 199) / (200 * scale)
    log_mgf = 2 * math.log1p(-q) - np.log1p(-q * np.exp(t)) - np.log1p(-q * np.exp(-t))
    return float(np.min((bins * log_mgf + math.log(2 / false_alarm)) / t))


def plausibility(
    time_release: pd.DataFrame, loc_release: pd.DataFrame, time_truth: pd.DataFrame, loc_truth: pd.DataFrame,
    time_mechanism: Mapping, loc_mechanism: Mapping,
) -> tuple[bool, dict[str, float]]:
    """Released totals of two one-way marginals of the same taps should agree.

    Both true histograms (of the same bounded trips) sum to the partition's trips N. A released total is N
    minus the true mass of the suppressed bins plus the noise on the released bins, so
    |T_time - T_loc| <= S_time + S_loc + |noise_time| + |noise_loc|, each noise sum bounded with
    false-alarm 1e-6 by ``noise_sum_bound``. Internal warning check only: S is not private.
    """
    suppressed = {"time": _suppressed_mass(time_truth, time_release), "loc": _suppressed_mass(loc_truth, loc_release)}
    gap = abs(int(time_release[COUNT].sum()) - int(loc_release[COUNT].sum()))
    bound = (
        suppressed["time"] + suppressed["loc"]
        + noise_sum_bound(len(time_release), time_mechanism) + noise_sum_bound(len(loc_release), loc_mechanism)
    )
    return gap <= bound, {"released_total_gap": float(gap), "allowed_gap": float(bound)}


def _suppressed_mass(truth: pd.DataFrame, released: pd.DataFrame) -> int:
    """The true count of the bins a one-way marginal's release left out (its one bin column, then the count)."""
    (column,) = released.columns[:-1]
    left_out = ~truth[column].isin(released[column]).to_numpy()
    return int(truth[COUNT].to_numpy()[left_out].sum())
