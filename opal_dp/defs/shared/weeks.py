"""The weeks a run releases, and what each of them reads (``release.period_input``), for every release asset."""

from __future__ import annotations

from dataclasses import replace

import dagster as dg

from opal_dp.defs.shared.budget import PrivacyBudget
from opal_dp.defs.shared.partitions import period_and_mode, run_partition_keys
from opal_dp.defs.shared.resources import ReferenceNetwork
from opal_dp.defs.shared.storage import OpalStorage
from opal_dp.release.period_input import (WITHOUT_TAG, PeriodInput, PeriodNotReady, period_input,
                                          store_period_input, stored_period_input, without_days)


def run_weeks(context: dg.AssetExecutionContext) -> list[str]:
    """The weeks (their Mondays) of the run's partitions, of a week or a (week, mode) asset."""
    return sorted({period_and_mode(k)[0] if "|" in k else k for k in run_partition_keys(context)})


def period_inputs(context: dg.AssetExecutionContext, privacy_budget: PrivacyBudget, reference: ReferenceNetwork,
                  storage: OpalStorage) -> dict[str, PeriodInput]:
    """Each week of the run as its days' records stand (the run's ``opal_dp/without_days`` tag names the days the
    operator releases it without), recorded with the settings' fingerprint as what the week's release reads (the
    record is rewritten only when that changes: its time is when this release of the week began); a week not
    ready fails the step, naming the days, before anything is charged."""
    cut = privacy_budget.day_cut(reference.stops())
    without = without_days(context.run.tags.get(WITHOUT_TAG))
    try:
        found = {week: period_input(storage.private_dir, week, cut, without) for week in run_weeks(context)}
    except PeriodNotReady as err:
        raise dg.Failure(description=str(err)) from None
    for week, wanted in found.items():
        found[week] = replace(wanted, settings=privacy_budget.fingerprint())
        store_period_input(storage.private_dir, found[week])
    return found


def recorded_inputs(context: dg.AssetExecutionContext, storage: OpalStorage) -> dict[str, PeriodInput]:
    """What ``trip_partitions`` recorded of each week of the run: the release reads exactly those days."""
    try:
        return {week: stored_period_input(storage.private_dir, week) for week in run_weeks(context)}
    except PeriodNotReady as err:
        raise dg.Failure(description=str(err)) from None
