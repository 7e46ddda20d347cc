"""The publication gate as asset checks on ``published_release``: each property the publish step holds before a file
is written is a check of its own, so the UI names the one that refused a publication.

A refusal is a ``dg.Failure`` made by ``refused`` (it names its check); ``published_release`` records the failed
check, then fails. A publication that goes through records every check as passed, with what it covered.
"""

from __future__ import annotations

import dagster as dg

AUDIT = "privacy_audit"
GATE_CHECKS = {
    "dates_are_the_ledgers_draws": "Each date published in this run is made from the draws the ledger holds as "
                                   "complete for it (the release asset is the ledger's stored draw), its blocking "
                                   "checks pass again on them, and no date published before is dropped.",
    "statement_from_the_ledger": "privacy.json, PRIVACY.md and the page state what the ledger records of the draws "
                                 "of every published file, and the person account from the ledger, never the "
                                 "publishing run's configuration.",
    "audit_passed": "The privacy audit of the release's plan passed: its latest materialisation (a failed audit "
                    "stores none) is not older than the latest release_draws (the audit depends on the plan only, "
                    "so the command line may start it beside the week's steps; its report is stored after them).",
    "folder_valid": "The new release folder is well formed: each date written, the combined files, the statement and "
                    "the page validated before the folder is made the latest.",
}
DATES, STATEMENT, AUDIT_PASSED, FOLDER = GATE_CHECKS
GATE_CHECK_SPECS = [dg.AssetCheckSpec(name, asset="published_release", blocking=True, description=text)
                    for name, text in GATE_CHECKS.items()]
GATE_CHECK = "gate_check"


def refused(check: str, description: str, metadata: dict | None = None) -> dg.Failure:
    """The failure that refuses a publication, naming the gate check it failed."""
    if check not in GATE_CHECKS:
        raise ValueError(f"not a gate check: {check}")
    return dg.Failure(description=description, metadata={**(metadata or {}), GATE_CHECK: check})


def failed_check(failure: dg.Failure) -> dg.AssetCheckResult | None:
    """The failed check a refusal names (None for a failure that is not a refusal, e.g. nothing to publish)."""
    named = failure.metadata.get(GATE_CHECK)
    if named is None:
        return None
    return dg.AssetCheckResult(check_name=named.value, passed=False, severity=dg.AssetCheckSeverity.ERROR,
                               metadata={"refused": dg.MetadataValue.md(failure.description or "")})


def passed_checks(figures: dict[str, dict]) -> list[dg.AssetCheckResult]:
    """Every gate check passed, each with the figures of what it covered."""
    return [dg.AssetCheckResult(check_name=name, passed=True, metadata=figures.get(name, {})) for name in GATE_CHECKS]


def audit_stands(instance: dg.DagsterInstance) -> dict:
    """Refuses (``audit_passed``) unless a privacy audit was stored after the latest release draws; else its
    figures."""
    audit = instance.fetch_materializations(dg.AssetKey(AUDIT), limit=1).records
    draws = instance.fetch_materializations(dg.AssetKey("release_draws"), limit=1).records
    if not audit or (draws and audit[0].timestamp < draws[0].timestamp):
        raise refused(AUDIT_PASSED, "publishing refused: no privacy audit passed since the latest release was "
                                      "drawn; materialise privacy_audit (the rollup job runs it before publishing)")
    meta = audit[0].asset_materialization.metadata
    return {"audit_run": audit[0].run_id, **{k: meta[k] for k in ("privacy_unit", "runs_per_input") if k in meta}}
