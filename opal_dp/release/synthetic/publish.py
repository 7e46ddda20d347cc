"""The synthetic data's privacy statement (from the ledger) and its atomic publication.

Published under ``published/synthetic/<release_id>/`` (``synthetic_trips.parquet``, ``synthetic_trips.csv``,
``privacy.json``, ``PRIVACY.md``), written in a staging folder, fsynced, renamed, then ``synthetic/latest``
repointed, under the marginal publisher's lock (``release.publish``). Every figure of the statement is what the
ledger recorded for the draws the rows were generated from; the guarantee is the ledger's composition of
everything charged to a week for ``card_period`` (the worst week's, each week's listed), so it includes any
card_period marginal release, and its
``person`` section (``release.statement.person``), which PRIVACY.md opens with, is one person's total over the horizon
across every card-level file of every product (marginals, OD trees, these queries).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

from opal_dp.core import PrivacyUnit
from opal_dp.core.ledger import PrivacyLedger
from opal_dp.permissions import PUBLIC_DIR, make_dirs
from opal_dp.release.synthetic.archetypes import ARCHETYPES
from opal_dp.private_files import fsync_folder
from opal_dp.release.published_folder import LATEST, LINK_PREFIX, RELEASE_ID, STAGING_PREFIX
from opal_dp.release.publish import publish_lock, write_durably
from opal_dp.release.statement.build import STATEMENT_JSON, STATEMENT_MD, StatementError
from opal_dp.release.statement.person import person_section
from opal_dp.release.statement.plain import plain_guarantee
from opal_dp.release.synthetic.generator import CSV, PARQUET
from opal_dp.release.synthetic.queries import MARGINAL_PREFIX
from opal_dp.release.statement.runs import draws_section

SYNTHETIC = "synthetic"
SCHEMA = "opal_dp synthetic statement 1"


def synthetic_statement(ledger: PrivacyLedger, draw_ids: Sequence[int], release_id: str) -> dict:
    """The statement of synthetic rows generated from the ledger draws ``draw_ids`` (module docstring)."""
    draws = ledger.draws(draw_ids)
    if len(draws) != len(set(draw_ids)) or any(d.status != "complete" for d in draws):
        raise StatementError("every draw of a synthetic release must be in the ledger and complete")
    charges = {c.id: c for c in ledger.charges(PrivacyUnit.CARD_PERIOD.value)}
    used = [charges.get(d.charge_id) for d in draws]
    if any(c is None or not c.marginal.startswith(MARGINAL_PREFIX) for c in used):
        raise StatementError("a synthetic release may only cite card_period draws of the synthetic queries")
    bounds = {c.bounds for c in used}
    if len(bounds) != 1:
        raise StatementError(f"a synthetic release must come from one set of bounds, got {len(bounds)}")
    spent = {scope: ledger.spend(PrivacyUnit.CARD_PERIOD.value, scope) for scope in sorted({c.scope for c in used})}
    worst = max(spent, key=lambda scope: (spent[scope].epsilon, spent[scope].delta))
    cap = ledger.cap(PrivacyUnit.CARD_PERIOD.value)
    queries: dict[str, dict] = {}
    for charge in sorted({c.id: c for c in used}.values(), key=lambda c: (c.marginal, c.scope)):
        name, mechanism = charge.marginal.removeprefix(MARGINAL_PREFIX), json.loads(charge.mechanism)
        stated = queries.setdefault(name, {**mechanism, "charges": []})
        if {k: v for k, v in stated.items() if k != "charges"} != mechanism:
            raise StatementError(f"the synthetic query {name} was drawn with other parameters in another week: "
                                 "publish the weeks of each setting separately")
        stated["charges"].append(charge.id)
    dates = sorted({d.date for d in draws})
    return {
        "schema": SCHEMA,
        "person": person_section(ledger, dates, list({c.id: c for c in used}.values())),
        "release": {"id": release_id, "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                    "dates": dates, "files": [PARQUET, CSV]},
        "ledger": {"id": ledger.ledger_id, "draws": draws_section(d.id for d in draws)},
        "privacy_unit": {"unit": PrivacyUnit.CARD_PERIOD.value, "protects": PrivacyUnit.CARD_PERIOD.protects,
                         "relation": used[0].relation, "bounds": json.loads(bounds.pop())},
        "guarantee": {"epsilon": spent[worst].epsilon, "delta": spent[worst].delta, "rho": spent[worst].rho,
                      "per": f"card over {worst}" if len(spent) == 1 else "card over each calendar week",
                      "composition": spent[worst].composition,
                      "scopes": [{"scope": scope, "epsilon": g.epsilon, "delta": g.delta, "rho": g.rho}
                                 for scope, g in spent.items()],
                      "includes": "everything charged to the week for card_period, marginal releases included"},
        "cap": {"epsilon": cap.epsilon, "delta": cap.delta, "set_at": cap.set_at, "action": cap.action},
        "queries": queries,
        "archetypes": list(ARCHETYPES),
        "generator": "post-processing of the noisy counts above and the public reference network only; every "
                     "card id is fresh (random) and lives one calendar week, travelling on the days its week's travel_days "
                     "cell says, and no row is a real trip",
        "not_protected": [
            "trips beyond the contribution bounds are not represented (at most max_trips_per_card_day per card-day)",
            "the archetype rules, districts and reference network are public and stated, not protected",
        ],
    }


def render_markdown(statement: dict) -> str:
    g, unit, q = statement["guarantee"], statement["privacy_unit"], statement["queries"]
    lines = [
        f"# Synthetic card-day trips {statement['release']['id']}: privacy statement", "",
        f"**{plain_guarantee(statement)}**", "",
        f"**Protected:** {unit['protects']} ({unit['relation']}), at (epsilon = {g['epsilon']:.4g}, "
        f"delta = {g['delta']:.3g}) per {g['per']}: {g['includes']}.", "",
        "The rows are synthetic: every card id is new and lives for one calendar week (its travel days drawn from the "
        "noisy travel_days counts), and no row is a real trip. They "
        "were generated, by post-processing alone, from the noisy counts below and the public reference network.", "",
        f"Contribution bounds: {json.dumps(unit['bounds'], sort_keys=True)}.", "",
        "| query | cells per date (per week for travel_days) | sigma | rho | l2 sensitivity squared |",
        "|---|---|---|---|---|",
        *(f"| {name} | {p.get('cells_per_date', p.get('cells_per_week'))} | {p['sigma']:.4g} | {p['rho']:.4g} | {p['sensitivity']['l2_squared']} |"
          for name, p in q.items()),
        "", f"Archetypes (public rules): {', '.join(statement['archetypes'])}.", "",
        "Not protected: " + "; ".join(statement["not_protected"]) + ".", "",
        f"Ledger {statement['ledger']['id']}, draws {', '.join(a if a == b else f'{a}-{b}' for a, b in statement['ledger']['draws']['runs'])}.", "",
    ]
    return "\n".join(lines)


def publish_synthetic(published_dir: Path, staged: Path, statement: dict) -> Path:
    """Publish the staged files with their statement as ``synthetic/<release id>`` (module docstring)."""
    release_id = statement["release"]["id"]
    if not RELEASE_ID.fullmatch(release_id) or release_id == LATEST:
        raise ValueError(f"release id must match {RELEASE_ID.pattern} and not be {LATEST!r}, got {release_id!r}")
    make_dirs(published_dir, PUBLIC_DIR)
    root = make_dirs(published_dir / SYNTHETIC, PUBLIC_DIR)
    with publish_lock(published_dir):
        target = root / release_id
        if target.exists():
            raise FileExistsError(f"synthetic release {release_id} already exists at {target}")
        staging = root / f"{STAGING_PREFIX}{release_id}"
        if staging.exists():
            shutil.rmtree(staging)
        make_dirs(staging, PUBLIC_DIR)
        for name in (PARQUET, CSV):
            shutil.copyfile(staged / name, staging / name)
            os.chmod(staging / name, 0o644)
        write_durably(staging / STATEMENT_JSON, json.dumps(statement, indent=2, ensure_ascii=False) + "\n")
        write_durably(staging / STATEMENT_MD, render_markdown(statement))
        fsync_folder(staging)
        os.rename(staging, target)
        link = root / f"{LINK_PREFIX}{release_id}"
        os.symlink(release_id, link)
        os.replace(link, root / LATEST)
        fsync_folder(root)
    return target
