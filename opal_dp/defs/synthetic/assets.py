"""Synthetic card-day trips (issue 14): thin wrappers over ``release.synthetic.queries`` (the only step that
reads private trips, one week at a time, charged to the week's card_period scope), ``release.synthetic.generator``
(post-processing of the stored DP draws of every released week) and ``release.synthetic.publish``. Opt-in: the
``synthetic`` and ``synthetic_publish`` jobs with ``privacy_budget.synthetic`` on, or ``python -m opal_dp.cli release
--synthetic``."""

import base64
import json
import os
from datetime import date, datetime, timezone
from pathlib import Path

import dagster as dg
import numpy as np
import pandas as pd

from opal_dp.core import LedgerError, PrivacyUnit
from opal_dp.defs.shared.budget import PrivacyBudget
from opal_dp.defs.shared.io import PartitionFrames
from opal_dp.defs.shared.metadata import LEDGER_POOL, WEEK_A_RUN, column_schema, labels
from opal_dp.defs.shared.partitions import release_periods
from opal_dp.defs.shared.resources import ReferenceNetwork
from opal_dp.defs.shared.storage import OpalStorage
from opal_dp.defs.shared.weeks import period_inputs
from opal_dp.defs.trips.private_stages import CARD_DAYS
from opal_dp.permissions import make_dirs, reserve_private
from opal_dp.prep.bounding import keep_mask, select_card_days
from opal_dp.prep.raw_columns import MAX_ID, SYNTHETIC_ID_LOW
from opal_dp.release.synthetic import queries as sq
from opal_dp.release.marginals.schemas import SyntheticScores, SyntheticTrips
from opal_dp.reports.synthetic_score import evaluate, period_plot, period_scores, score_plot
from opal_dp.release.synthetic.generator import PARQUET, generate, write_synthetic
from opal_dp.release.synthetic.publish import publish_synthetic, synthetic_statement
from opal_dp.release.periods import week_days

GROUP = "synthetic"
WEEKS = "weeks"  # private: one manifest a released week


def synthetic_dir(storage: OpalStorage) -> Path:
    """Private working folder: the manifest of the DP draws and the staged synthetic files."""
    return make_dirs(storage.private_dir / GROUP)


@dg.asset(
    group_name=GROUP,
    partitions_def=release_periods,
    backfill_policy=WEEK_A_RUN,
    ins={"binned_trips": dg.AssetIn(), CARD_DAYS: dg.AssetIn()},
    pool=LEDGER_POOL,
    **labels("dp", "sqlite"),
)
def synthetic_release(
    context: dg.AssetExecutionContext, binned_trips: PartitionFrames, card_days: PartitionFrames,
    privacy_budget: PrivacyBudget, storage: OpalStorage, reference: ReferenceNetwork,
) -> dg.MaterializeResult:
    """The card-level DP queries of each week's binned days (``release.synthetic.queries``), charged to the week's
    card_period scope; records which draws stand for them. Refused unless ``privacy_budget.synthetic`` is on: only
    then are their charges in the weekly share and the caps."""
    if not privacy_budget.synthetic:
        raise dg.Failure(description="privacy_budget.synthetic is off: turn it on (release --synthetic), so that the "
                                     "weekly share of the person cap and the caps make room for the synthetic trips")
    stops, bounds, key = reference.stops(), privacy_budget.bounds, privacy_budget.key(storage, "bounding")
    ledger = privacy_budget.ledger(storage)
    for week, found in period_inputs(context, privacy_budget, reference, storage).items():
        plan = sq.synthetic_plan(*privacy_budget.synthetic_budget, bounds, week_days(week), stops)
        kept_cards = None
        if bounds.max_days_per_card is not None:
            chosen = select_card_days(pd.concat([card_days[d].assign(date=d) for d in found.days], ignore_index=True),
                                      bounds.max_days_per_card, key)
            kept_cards = {d: np.sort(g["card_id"].to_numpy(np.int64)) for d, g in chosen.groupby("date")}
        truths, travelling = {}, {}
        for day in found.days:
            trips = binned_trips[day]
            cards = None if kept_cards is None else kept_cards.get(day, np.zeros(0, np.int64))
            keep = keep_mask(trips, date.fromisoformat(day), PrivacyUnit.CARD_PERIOD, bounds, key, cards)
            truths[day] = sq.true_histograms(trips.loc[keep], date.fromisoformat(day), plan.domain)
            travelling[day] = trips.loc[keep, "card_id"].unique()
        try:
            released = sq.release_queries(truths, sq.true_travel_days(travelling, plan), plan, ledger,
                                          storage.private_dir, context.run.run_id,
                                          privacy_budget.key(storage, "fingerprint"), fresh=privacy_budget.fresh_draw,
                                          input_versions=found.scope_versions(PrivacyUnit.CARD_PERIOD))
        except LedgerError as err:
            raise dg.Failure(description=str(err)) from None
        spent = ledger.spend(PrivacyUnit.CARD_PERIOD.value, plan.scope)
        manifest = {"draws": [d.id for d in released.draws], "sigma": dict(released.sigma),
                    "district_names": list(released.district_names), "max_trips": released.max_trips,
                    "epsilon": spent.epsilon, "delta": spent.delta, "per": f"card over {plan.scope}"}
        path = reserve_private(make_dirs(synthetic_dir(storage) / WEEKS) / f"{week}.json")
        path.write_text(json.dumps(manifest, indent=2))
        context.add_asset_metadata({
            "privacy_unit": PrivacyUnit.CARD_PERIOD.value,
            "epsilon": spent.epsilon, "delta": spent.delta, "rho": spent.rho or 0.0,
            "synthetic_epsilon": plan.epsilon, "synthetic_delta": plan.delta,
            "sigma": dg.MetadataValue.json(dict(plan.sigma)),
            "dates": len(found.days), "draws": len(released.draws),
            "days_left_out": ", ".join(found.without) or "none",
        }, partition_key=week)
    return dg.MaterializeResult()


def manifests(storage: OpalStorage) -> list[dict]:
    """The manifests of every released week, in week order."""
    return [json.loads(p.read_text()) for p in sorted((synthetic_dir(storage) / WEEKS).glob("*.json"))]


def load_release(storage: OpalStorage, privacy_budget: PrivacyBudget) -> sq.SyntheticRelease:
    """The DP outputs alone, as ``synthetic_release`` stored them: its weeks' manifests and the ledger's draws."""
    weeks = manifests(storage)
    if not weeks:
        raise dg.Failure(description="no week's synthetic queries are released yet: run the synthetic job first")
    ledger = privacy_budget.ledger(storage)
    draws = ledger.draws([d for m in weeks for d in m["draws"]])
    charges = {c.id: c for c in ledger.charges(PrivacyUnit.CARD_PERIOD.value)}
    noisy: dict = {}
    weekly = {}
    for d in draws:
        query = charges[d.charge_id].marginal.removeprefix(sq.MARGINAL_PREFIX)
        table = pd.read_parquet(storage.private_dir / d.release_ref)
        if query == sq.WEEK_QUERY:
            weekly[d.part] = table
        else:
            noisy.setdefault(d.part, {})[query] = table
    first = weeks[0]
    return sq.SyntheticRelease(noisy, first["max_trips"], first["sigma"], tuple(first["district_names"]),
                               tuple(draws), travel_days=weekly)


@dg.asset(group_name=GROUP, deps=[synthetic_release], **labels("dp", "parquet", "csv"),
          metadata=column_schema(SyntheticTrips))
def synthetic_trips(privacy_budget: PrivacyBudget, storage: OpalStorage, reference: ReferenceNetwork
                    ) -> dg.MaterializeResult:
    """Synthetic card-day trips generated from the stored DP draws only (post-processing), staged privately
    until the card-id check passes."""
    release = load_release(storage, privacy_budget)
    stops = reference.stops()
    days = ((day, SyntheticTrips.validate(frame)) for day, frame in generate(release, stops))
    rows = write_synthetic(days, synthetic_dir(storage) / "staged")
    return dg.MaterializeResult(metadata={"dagster/row_count": sum(rows.values()),
                                          "rows_per_date": dg.MetadataValue.json(rows),
                                          "weeks": len(manifests(storage))})


@dg.asset_check(asset=synthetic_trips, blocking=True)
def synthetic_card_ids_are_fresh(storage: OpalStorage, privacy_budget: PrivacyBudget) -> dg.AssetCheckResult:
    """No synthetic card id can equal a private one: every synthetic id lies in [SYNTHETIC_ID_LOW, MAX_ID), a range
    ingest refuses (``prep.raw_columns``). Reads no private card id; a failure blocks publication."""
    ids = pd.read_parquet(synthetic_dir(storage) / "staged" / PARQUET, columns=["card_id"])["card_id"].to_numpy()
    outside = int(((ids < SYNTHETIC_ID_LOW) | (ids >= MAX_ID)).sum())
    return dg.AssetCheckResult(passed=outside == 0, metadata={"synthetic_cards": int(len(np.unique(ids))),
                                                                "ids_outside_the_synthetic_range": outside})


@dg.asset(group_name=GROUP, deps=[synthetic_trips], **labels("public", "parquet", "csv", "json"))
def synthetic_published(privacy_budget: PrivacyBudget, storage: OpalStorage) -> dg.MaterializeResult:
    """Publish the staged synthetic trips with their privacy statement, built from the ledger."""
    release_id = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    draws = [d for manifest in manifests(storage) for d in manifest["draws"]]
    statement = synthetic_statement(privacy_budget.ledger(storage), draws, release_id)
    folder = publish_synthetic(storage.published_dir, synthetic_dir(storage) / "staged", statement)
    g = statement["guarantee"]
    return dg.MaterializeResult(metadata={"folder": str(folder), "epsilon": g["epsilon"], "delta": g["delta"],
                                          "per": g["per"]})


@dg.asset(
    group_name=GROUP,
    io_manager_key="private_parquet",
    ins={"ingested_trips": dg.AssetIn(partition_mapping=dg.AllPartitionMapping())},
    deps=[synthetic_trips],
    metadata=column_schema(SyntheticScores),
    description="Internal, NOT differentially private: the staged synthetic trips scored against the true trips "
                "(SDNist 3-way and 2-way k-marginal, OD agreement on the top 100 pairs, trips per card-day), with two "
                "baselines on the same budget drawn in memory (nothing charged), and the multi-day structure (travel "
                "days per card-week, return journeys) true vs synthetic. Never published.",
    **labels("internal", "parquet"),
)
def synthetic_report(
    ingested_trips: PartitionFrames, privacy_budget: PrivacyBudget, storage: OpalStorage, reference: ReferenceNetwork,
) -> dg.Output[pd.DataFrame]:
    """Score the synthetic trips of the dates they cover (``reports.synthetic_score.evaluate``)."""
    synthetic = pd.read_parquet(synthetic_dir(storage) / "staged" / PARQUET)
    dates = sorted(set(synthetic["tap_on_time"].dt.date.astype(str)) & set(ingested_trips))
    rng = np.random.default_rng(int.from_bytes(os.urandom(8), "little"))
    scores, distribution = evaluate(dates, ingested_trips.__getitem__, synthetic,
                                    *privacy_budget.synthetic_budget,
                                    privacy_budget.bounds, privacy_budget.key(storage, "bounding"),
                                    reference.stops(), rng)
    scores = SyntheticScores.validate(scores)
    plot = score_plot(scores, distribution)
    path = make_dirs(storage.reports_dir) / "synthetic_score.png"
    reserve_private(path).write_bytes(plot)
    period, period_l1 = period_scores(dates, ingested_trips.__getitem__, synthetic, reference.stops())
    period_png = period_plot(period, period_l1)
    reserve_private(storage.reports_dir / "synthetic_period.png").write_bytes(period_png)
    return dg.Output(scores, metadata={
        "scores (internal, not DP)": dg.MetadataValue.md(scores.to_markdown(index=False, floatfmt=".4g")),
        "trips per card-day": dg.MetadataValue.md(distribution.to_markdown(index=False, floatfmt=".4f")),
        "plot": dg.MetadataValue.md(f"![scores](data:image/png;base64,{base64.b64encode(plot).decode()})"),
        "plot_path": dg.MetadataValue.path(str(path)),
        "travel days and returns": dg.MetadataValue.md(period.to_markdown(index=False, floatfmt=".4f")),
        **{k: dg.MetadataValue.float(v) for k, v in period_l1.items()},
        "period_plot": dg.MetadataValue.md(
            f"![period](data:image/png;base64,{base64.b64encode(period_png).decode()})"),
        "dates": len(dates),
    })
