"""The project as a newcomer and an operator meet it: make release on a fresh clone (at most 40 lines, ending with
the summary), the UI bound to this machine, make bench's peers declared, a non-editable install.

The fresh clone shares this checkout's virtual environment (installing is not what is measured), and make is told
that the install is up to date; everything else is what a newcomer runs: the bundled sample, a new Dagster
home, the CLI's plan, the published release.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from opal_dp_tests.fuzz.raw import tiny_day, write_day

REPO = Path(__file__).resolve().parent.parent
MAX_LINES = 40


@pytest.mark.slow(95)
def test_make_release_on_a_fresh_clone_is_short_and_ends_with_the_summary(tmp_path):
    if not (REPO / ".git").exists() or shutil.which("git") is None or shutil.which("make") is None:
        pytest.fail("this test needs the project's git checkout, git and make")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True)
    venv = Path(sys.prefix)
    (clone / ".venv").symlink_to(venv, target_is_directory=True)
    # A newcomer's shell: no settings of ours, and not inside `make test` (a sub-make would print directories).
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPAL_DP_", "DAGSTER_", "MAKE", "MFLAGS"))}
    done = subprocess.run(["make", "-o", ".venv/.installed-stamp", "release"], cwd=clone, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=900)
    output = done.stdout.decode()  # bytes: text mode would turn the progress bars' \r into new lines
    assert done.returncode == 0, output[-3000:]
    lines = output.rstrip("\n").split("\n")  # as a terminal shows them: a progress bar redraws its line with \r
    assert len(lines) <= MAX_LINES, output
    assert not re.search(r"DEBUG|telemetry", output, re.IGNORECASE), output
    summary = lines[next(i for i, line in enumerate(lines) if line.startswith("published ")):]
    assert re.fullmatch(r"published 56 \(date, mode\) partitions \(14 days\), [\d,]+ trips read, [\d,]+ cells listed in "
                        r"time-loc.csv", summary[0]), summary
    assert summary[1].startswith("data: the bundled SYNTHETIC sample") and "for 14 of 14 days" in summary[1], summary
    assert summary[-3].startswith("protected: all trips of one card over one period (a calendar week by default) at "
                                  "(epsilon = "), summary[-3]
    assert "per release period; one person over any 365 days: epsilon = " in summary[-3], summary[-3]
    assert not re.search(r"delta[^;]*(spent|used)", summary[-3]), summary[-3]  # delta is no budget that is spent
    assert summary[-2].startswith(f"release: {clone / 'data' / 'published' / 'latest'} -> ")
    assert len(summary) <= 7 and all(line.startswith(("rejected rows: ", "warning: OPAL_DP_PUBLISHER and OPAL_DP_CONTACT "
                                                      "not set")) for line in summary[2:-3]), summary
    assert (clone / ".dagster_home" / "dagster.yaml").read_text().count("enabled: false") >= 1
    log = re.fullmatch(r"Dagster's event log of these runs: (\S+)", summary[-1]).group(1)
    assert Path(log).stat().st_size > 0 and Path(log).is_relative_to(clone / "data" / "private")
    again = subprocess.run(["make", "-o", ".venv/.installed-stamp", "release"], cwd=clone, env=env,
                           capture_output=True, text=True, timeout=300)  # nothing new: one line, no run
    said = [line for line in again.stdout.splitlines() if not line.startswith(".venv/bin/python")]
    assert again.returncode == 0 and len(said) == 1 and said[0].startswith("nothing new to release: 14 days stand "
                                                                           "published as "), again.stdout
    assert again.stderr == "", again.stderr  # nor a traceback of the workers started for nothing
    latest = clone / "data" / "published" / "latest"
    page = (latest / "index.html").read_text(encoding="utf-8")
    drawn = page_daily_totals(page)
    assert "a card counts with its first 4 trips of a day, at most 2 of them in one mode" in page  # what it leaves out
    truth, dropped = true_daily_totals(clone / "data" / "raw")
    assert set(drawn) == set(truth)  # every mode, date and tap of the sample has its point on the page
    # The page's daily totals against the truth: noise of the stated sigma (44.7), each within 5.8 sigma (a false
    # alarm over all 112 has probability under 1e-6), less at most what the public bounds drop (a card-day's trips
    # beyond 4, or beyond 2 of a mode: 0.1-0.2% of bus and train, none of ferry and light rail). That is within 5%
    # on every mode-day of 5,200 trips or more; the smaller ones (light rail and ferry weekends, 2,479 trips and up)
    # are within 5% with probability 95% from 1,760 trips, measured 4.1% at worst (docs/privacy.md, "The default
    # release"). A sum of time.csv's bins (the page before totals.csv) is 57-95% low for those modes: far outside.
    sigma = json.loads((latest / "privacy.json").read_text())["od"]["hierarchy"]["totals"]["sigma"]
    bound = math.ceil(5.8 * sigma)
    assert {key: (drawn[key], n, dropped[key]) for key, n in truth.items()
            if not -bound - dropped[key] <= drawn[key] - n <= bound} == {}


def page_daily_totals(page: str) -> dict[tuple[str, str, str], int]:
    """The daily totals the page draws, from the table under each mode's chart: (YYYY-MM-DD, mode name, tap) ->
    trips."""
    out = {}
    for mode, table in re.findall(r"<summary>([\w ]+): the figures as a table</summary>(.*?)</table>", page, re.S):
        for day, on, off in re.findall(r'<tr><td>\w{3} (\d{4}-\d\d-\d\d)</td><td class="num">([\d,]+) ± [\d,]+</td>'
                                       r'<td class="num">([\d,]+) ± [\d,]+</td></tr>', table):
            out |= {(day, mode, "on"): int(on.replace(",", "")), (day, mode, "off"): int(off.replace(",", ""))}
    return out


def true_daily_totals(raw: Path) -> tuple[dict[tuple[str, str, str], int], dict[tuple[str, str, str], int]]:
    """The raw files' trips per (date, mode name, tap), tap-offs those with a recorded tap-off; and per key an upper
    bound on the trips the totals' public bounds can drop (``core.totals``: a card-day's trips beyond its 4th, and
    beyond its 2nd of a mode), whatever order the ties of tap-on time take."""
    import pandas as pd

    names = {"bus": "Bus", "ferry": "Ferry", "light_rail": "Light rail", "train": "Train"}
    trips = pd.concat([pd.read_parquet(f, columns=["card_id", "mode", "tap_on_time", "tap_off_stop"])
                       for f in sorted(raw.glob("trips_*.parquet"))], ignore_index=True)
    trips = trips.assign(date=trips["tap_on_time"].dt.strftime("%Y-%m-%d"), mode=trips["mode"].astype(str),
                         off=trips["tap_off_stop"].notna() & (trips["tap_off_stop"].astype(str) != "-1"))
    counts = trips.groupby(["date", "mode"]).agg(on=("off", "size"), off=("off", "sum"))
    truth = {(d, names[m], tap): int(row[tap]) for (d, m), row in counts.iterrows() for tap in ("on", "off")}
    per = trips.groupby(["date", "card_id", "mode"]).size().rename("n").reset_index()
    per["day"] = per.groupby(["date", "card_id"])["n"].transform("sum")
    per["dropped"] = ((per["n"] - 2).clip(lower=0) + (per["day"] - 4).clip(lower=0)).clip(upper=per["n"])
    dropped = per.groupby(["date", "mode"])["dropped"].sum()
    return truth, {key: int(dropped[key[0], m]) for key in truth for m in names if names[m] == key[1]}


def dry_run(target: str, *settings: str) -> str:
    done = subprocess.run(["make", "-n", "-o", ".venv/.installed-stamp", target, *settings], cwd=REPO,
                          capture_output=True, text=True, check=True)
    return done.stdout


def test_the_ui_binds_to_this_machine_only_and_has_a_read_only_mode():
    assert "dg dev --host 127.0.0.1 --port 3000" in dry_run("ui")
    assert re.search(r"dagster-webserver -w workspace.yaml -h 127.0.0.1 -p 3000 --read-only", dry_run("ui-readonly"))
    assert "--host 127.0.0.1 --port 3100" in dry_run("ui", "UI_PORT=3100")


def test_the_lock_installs_the_peers_make_bench_runs():
    """The `bench` extra is in the hashed lock (so `make test`, i.e. CI, installs the peers its test runs) and
    `make bench` installs nothing else."""
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["bench"]
    names = {re.split(r"[=<>\[]", req)[0]: req for req in extras}
    peers = (REPO / "benchmarks" / "peers.py").read_text()
    assert "import polars" in peers and "opendp[polars]" in names["opendp"]
    assert "import pipeline_dp" in peers and "pipeline-dp" in names
    lock = (REPO / "requirements" / "lock.txt").read_text()
    for requirement in extras:
        assert re.search(rf"^{re.escape(requirement)} \\$", lock, re.M), requirement
    assert "--extra bench" in dry_run("lock")
    assert "pip install" not in dry_run("bench")


def test_the_synthetic_peers_install_from_their_own_hashed_lock():
    """MST and AIM (smartnoise-synth) need opendp<0.15, the project opendp 0.16: their environment has its own
    hashed lock, which `make synth-peers` installs (smartnoise itself without its GAN-only dependencies)."""
    steps = subprocess.run(["make", "-n", "-B", "synth-peers"], cwd=REPO, capture_output=True, text=True,
                           check=True).stdout
    assert "pip install --quiet --require-hashes -r requirements/synth-peers.txt" in steps
    assert "pip install --quiet --no-deps --require-hashes -r requirements/synth-peers-nodeps.txt" in steps
    lock = (REPO / "requirements" / "synth-peers.txt").read_text()
    assert re.search(r"^opendp==0\.14\.\d+ \\$", lock, re.M) and "torch" not in lock
    assert re.search(r"^smartnoise-synth==1\.0\.8 \\$", (REPO / "requirements" / "synth-peers-nodeps.txt").read_text(),
                     re.M)
    assert re.search(r"^opendp\[polars\]==0\.16\.0 \\$", (REPO / "requirements" / "lock.txt").read_text(), re.M)


@pytest.mark.slow
def test_a_non_editable_install_releases_with_an_explicit_data_directory(tmp_path):
    """``pip install .`` (no source tree on the path): the packaged reference data is found and the data
    directory is only what ``--data-dir`` says."""
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--target", str(site), str(REPO)], check=True, capture_output=True)
    data = tmp_path / "data"
    for day in ("2016-07-25", "2016-07-26"):
        write_day(data / "raw", day, tiny_day(day, trips=1_500))
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPAL_DP_", "DAGSTER_"))}
    env["PYTHONPATH"] = str(site)
    where = subprocess.run([sys.executable, "-c", "import opal_dp; print(opal_dp.__file__)"], cwd=elsewhere,
                           env=env, capture_output=True, text=True, check=True).stdout
    assert Path(where.strip()).is_relative_to(site)
    done = subprocess.run([sys.executable, "-m", "opal_dp.cli", "release", "--data-dir", str(data),
                           "--workers", "2", "--privacy-unit", "trip", *(f"--without=2016-07-{d}" for d in range(27, 32))],
                          cwd=elsewhere, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert (data / "published" / "latest" / "privacy.json").exists()
    assert sorted(p.name for p in elsewhere.iterdir()) == []  # nothing written where it ran


def test_the_suite_records_no_run_in_the_projects_dagster_home(throwaway_dagster_home):
    """``make test`` exports the project's Dagster home (the UI's and ``make release``'s) to every test: a release in
    a test must go to the test process's own."""
    assert os.environ["DAGSTER_HOME"] == str(throwaway_dagster_home)
    assert not throwaway_dagster_home.resolve().is_relative_to(REPO.resolve())
    assert "enabled: false" in (throwaway_dagster_home / "dagster.yaml").read_text()


def test_release_refuses_fewer_than_one_worker(tmp_path):
    from opal_dp.cli import main

    with pytest.raises(SystemExit, match="--workers must be at least 1, got 0"):
        main(["release", "--data-dir", str(tmp_path), "--workers", "0"])
    assert "--workers N" in subprocess.run([sys.executable, "-m", "opal_dp.cli", "release", "--help"],
                                           capture_output=True, text=True, check=True).stdout


def test_the_worker_count_reaches_the_runs_as_their_configuration(tmp_path):
    """``--workers`` is given to every run as the ``workers`` resource's count (so it reaches each step, whatever the
    executor), never through the environment; without it the resource keeps its default, ``$OPAL_DP_WORKERS``."""
    from opal_dp.locations import DataLocation
    from opal_dp.runs import _run_config

    location = DataLocation.resolved(tmp_path)
    assert _run_config(location, {}, None, False, 3)["resources"]["workers"] == {"config": {"count": 3}}
    assert "workers" not in _run_config(location, {}, None, False, None)["resources"]
