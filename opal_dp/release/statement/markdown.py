"""PRIVACY.md: the privacy statement rendered for people."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import date

from opal_dp.release.options import Design
from opal_dp.release.products import PUBLICATIONS
from opal_dp.release.statement.coverage import coverage_markdown
from opal_dp.release.statement.plain import SYNTHETIC_SAMPLE, plain_guarantee, synthetic_sample
from opal_dp.release.statement.runs import dates_of, grouped_scopes, int_runs


def render_markdown(statement: Mapping) -> str:
    """PRIVACY.md: the same statement for people, with a loud warning if the noise was seeded."""
    s = statement
    unit, g, ledger = s["privacy_unit"], s["guarantee"], s["ledger"]
    cap = ledger["cap_in_force"]
    lines = [f"# Privacy statement: release {s['release']['id']}", ""]
    if s["noise_seeded"]:
        lines += [
            "> **WARNING: THE NOISE OF THIS RELEASE WAS SEEDED. IT IS NOT DIFFERENTIALLY PRIVATE:",
            "> ANYONE WHO KNOWS THE SEED CAN REMOVE THE NOISE. FOR TESTS ONLY - NEVER PUBLISH IT.**",
            "",
        ]
    lines += [f"**{plain_guarantee(s)}**", ""]
    if synthetic_sample(s):
        lines += [f"> **{SYNTHETIC_SAMPLE}**", ""]
    lines += _data_lines(s)
    design = s["design"]
    lines += [
        f"Created {s['release']['created_at']}. The full detail of every scope, partition and draw is in "
        "privacy.json.",
        "",
        f"## Release design: {design['name']}",
        "",
        design["description"],
        "",
    ]
    if Design.parse(design["name"]).consistent:
        lines += [
            f"Pure differential privacy (delta = 0): **{'yes' if design['pure_dp'] else 'no (zCDP, converted)'}**. "
            f"Publication threshold tau = **{design['tau']}**; expected cells listed although their true count is "
            f"0: **{design['expected_false_cells_per_day']:.3g} per day**.",
            "",
            design["post_processing"],
            "",
            design["false_cells"],
            "",
            "### Remainder rows",
            "",
            design["remainder_rows"],
            "",
            "| date | mode | tap | trips (from time.csv) |",
            "|---|---|---|---|",
            *(f"| {t['date']} | {t['mode']} | {t['tap']} | {t['trips']} |" for t in design["totals"]),
            "",
        ]
    lines += [
        "## Who is protected, and how much",
        "",
        f"Protected: **{unit['protects']}**, at **(epsilon = {g['epsilon']:.4g}, delta = {g['delta']:.3g})** per "
        f"{g['per']} (relation `{unit['relation']}`: {unit['meaning']})",
        "",
        g["composition"],
        "",
        "### Worked examples",
        "",
        *(f"- {e['who']}: (epsilon = {e['epsilon']:.4g}, delta = {e['delta']:.3g}), {e['how']}."
          for e in s["worked_examples"]),
        "",
    ]
    if unit["contribution_bounds"]:
        lines += [
            "### Contribution bounds",
            "",
            "Applied before the card id was dropped, and public:",
            "",
            *(f"- {k}: {'all days of the period' if v is None else v}" for k, v in unit["contribution_bounds"].items()),
            "",
        ]
    lines += [
        "### Per scope",
        "",
        "| scope | epsilon | delta | rho | charges | composition |",
        "|---|---|---|---|---|---|",
        *_scope_rows(g["scopes"]),
        "",
        "## Presence probability",
        "",
        "Probability that one unit alone in an otherwise empty bin (with its largest allowed count there) becomes "
        "visible:",
        "",
        *(f"- {m['name']}: **{m['presence_probability']:.3g}**" for m in s["marginals"]),
        "",
        "## Mechanisms",
        "",
    ]
    for name, mech in s["mechanisms"].items():
        lines += [f"### {name}", "", mech["reference"], "", mech["algorithm"], "",
                  f"Noise: {mech['noise']} Randomness: {mech['randomness']}.", ""]
    lines += [
        "## Parameters per marginal",
        "",
        "| marginal | file | tap | noise | epsilon | rho | delta | scale | threshold | min released count | L0 | L1 | L2² | Linf | 95% error bound |",
        "|---" * 15 + "|",
        *(
            f"| {m['name']} | {m['file']} | {m['tap']} | {m['noise']} | {_num(m['epsilon'])} | {_num(m['rho'])} "
            f"| {m['delta']:.6g} | {m['scale']:.4g} | {m['threshold']:.2f} | {m['min_released_count']} "
            f"| {m['sensitivity']['l0']} | {m['sensitivity']['l1']} | {m['sensitivity']['l2_squared']} "
            f"| {m['sensitivity']['linf']} | {m['error_bound_95']} |"
            for m in s["marginals"]
        ),
        "",
        *_fit_error_lines(s["marginals"]),
        "## Partitions",
        "",
        *_partition_lines(s["partitions"]),
        "",
        "## Ledger",
        "",
        f"Ledger {ledger['id']}; {ledger['draws']['count']} draws: {_shown(ledger['draws']['runs'])} (each date's in its "
        "manifest.json).",
        "",
        f"Cap in force per {g['per']}: epsilon = {cap['epsilon']:g}, delta = {cap['delta']:.6g} "
        f"({cap['action']} {cap['set_at']}: {cap['reason']}). {ledger['meaning']}",
        "",
        "Cap history:",
        "",
        *(f"- {c['set_at']} {c['action']}: epsilon = {c['epsilon']:g}, delta = {c['delta']:.6g} ({c['reason']})"
          for c in ledger["cap_history"]),
        "",
    ]
    if ledger["acknowledged_resets"]:
        lines += ["Acknowledged ledger resets:", "",
                  *(f"- {r['acknowledged_at']}: {r['reason']} (ledgers {', '.join(r['ledger_ids'])})"
                    for r in ledger["acknowledged_resets"]), ""]
    if s["also_released_under_other_units"]:
        lines += ["## Also released under other units", "",
                  *(f"- {u}: {_date_runs([date.fromisoformat(x) for x in d])}"
                    for u, d in s["also_released_under_other_units"].items()), ""]
    for publication in PUBLICATIONS:  # each product's own section (``release.products``)
        lines += publication.markdown(s)
    if "coverage" in s:
        lines += coverage_markdown(s["coverage"])
    lines += [
        "## What is not protected",
        "",
        *(f"- {item}" for item in s["not_protected"]),
        "",
        "## Accuracy",
        "",
        s["accuracy_note"],
        "",
        *_accuracy_table(s["marginals"]),
        "",
        "## Software",
        "",
        *(f"- {package} {v}" for package, v in s["software"].items()),
        "",
    ]
    return "\n".join(lines)


def _accuracy_table(marginals: Sequence[Mapping]) -> list[str]:
    """Release probabilities per true count, the counts of every marginal as columns; a count a marginal does not
    list is past its ``published_surely_from`` (probability at least 0.99)."""
    counts = sorted({int(n) for m in marginals for n in m["release_probability"]})
    cells = [[_probability(m["release_probability"][str(n)]) if str(n) in m["release_probability"] else ">= 0.99"
              for n in counts] for m in marginals]
    return ["| marginal | published with probability 0.99 from | " + " | ".join(f"n={n}" for n in counts) + " |",
            "|---" * (2 + len(counts)) + "|",
            *(f"| {m['name']} | {m.get('published_surely_from', '-')} | " + " | ".join(row) + " |"
              for m, row in zip(marginals, cells))]


def _scope_rows(scopes: Sequence[Mapping]) -> list[str]:
    """Rows of the per-scope table, scopes with identical figures on one row."""
    return grouped_scopes(scopes, lambda sc: (f"{sc['epsilon']:.4g}", f"{sc['delta']:.3g}", _num(sc["rho"]),
                                              str(sc["charges"]), sc["composition"]))


def _partition_lines(section: Mapping) -> list[str]:
    """One line per mode: its published dates as runs of consecutive days."""
    return [f"- {mode}: {_date_runs([date.fromisoformat(_iso(d)) for d in dates_of(runs)])}"
            for mode, runs in section["date_runs_by_mode"].items()]


def _date_runs(days: Sequence[date]) -> str:
    """``8 dates, 2016-07-25 to 2016-08-01``: how many, then runs of consecutive days."""
    runs = int_runs(d.toordinal() for d in days)
    return f"{len(days)} date{'s' * (len(days) > 1)}, {_shown(runs, lambda n: date.fromordinal(n).isoformat(), ' to ')}"


def _shown(runs: Sequence[Sequence], show=str, dash: str = "-") -> str:
    """Inclusive runs as text: ``1-4, 7, 9-10``."""
    return ", ".join(show(a) if a == b else f"{show(a)}{dash}{show(b)}" for a, b in runs)


def _iso(compact: str) -> str:
    return f"{compact[:4]}-{compact[4:6]}-{compact[6:]}"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def _probability(p: float) -> str:
    """Three significant figures, without rounding a probability below 1 up to "1"."""
    if p < 0.999:
        return f"{p:.3g}"
    return f"1 - {1 - p:.2g}" if p < 1 else "1 - <1e-16"


def _data_lines(statement: Mapping) -> list[str]:
    """Which dates are synthetic when only some are, and which dates are not released (read defensively, like
    ``synthetic_sample``: a statement may come without ``data``)."""
    data = statement.get("data") if isinstance(statement.get("data"), Mapping) else {}
    synthetic, pending = data.get("synthetic_sample_dates") or [], data.get("pending_dates") or []
    left_out = data.get("left_out_dates") or []
    lines = []
    if synthetic_sample(statement) and 0 < len(synthetic) < statement["partitions"]["dates"]:
        lines += [f"Synthetic (the bundled sample): dates {', '.join(synthetic)}; the other dates are real data.", ""]
    if pending:
        lines += [f"Not in this release (data not ready or not usable): {', '.join(pending)}.", ""]
    if left_out:
        lines += [f"Left out of their released weeks (no data for them was released; each week's guarantee still "
                  f"covers the whole week): {', '.join(left_out)}.", ""]
    for c in statement.get("corrections") or []:
        lines += [f"Corrected: {c['date']} {c['mode']} was released again (input version {c['input_version']}, "
                  f"draws {', '.join(map(str, c['draws']))}), replacing draws "
                  f"{', '.join(map(str, c['replaced_draws']))}; the ledger charges both.", ""]
    return lines


def _fit_error_lines(marginals: list[dict]) -> list[str]:
    """Under the hierarchy design: each tap's fit error per mode (``time_loc_errors``), what the page's ± use."""
    fitted = [m for m in marginals if "fit_error_sd" in m and m["file"] == "loc.csv"]
    if not fitted:
        return []
    return [
        "Error of the fit (standard deviation; exact for the fit before rounding, approximate where estimates near 0 "
        "were raised to 0): a station's day (a row of loc.csv) and the mode's hour (the four windows of an hour in "
        "time.csv summed).",
        "",
        "| tap | mode | station's day | mode's hour |",
        "|---|---|---|---|",
        *(f"| {m['tap']} | {mode} | {sd['station_day']:.4g} | {sd['hour']:.4g} |"
          for m in fitted for mode, sd in m["fit_error_sd"].items()),
        "",
    ]
