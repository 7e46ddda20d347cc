"""Where data lives, decided once.

One setting, ``OPAL_DP_DATA_DIR`` (default: ``data/`` in the working directory), read by
``opal_dp.locations.resolve_data_dir`` when the Dagster definitions or the command line start; from then on every
asset, IO manager, sensor and publisher takes its paths from the ``storage`` resource
(``opal_dp.defs.shared.storage``):

- ``raw/``       daily raw trip files (input, private)
- ``private/``   intermediates, rejected rows, the privacy ledger and its secret, stored draws (never published)
- ``published/`` differentially private outputs only

The privacy ledger is ``private/ledger.sqlite`` unless ``OPAL_DP_LEDGER_URL`` names a PostgreSQL database
(workers on several hosts share one ledger: ``opal_dp.core.ledger_backends``).

``raw/`` and ``private/`` are their owner's only (``opal_dp.permissions``); ``OPAL_DP_STRICT_PERMISSIONS=1``
makes the command line refuse to run when group or others can read them, instead of warning.

Reference data (the public stop list) ships inside the package (``opal_dp/reference/``; ``data/reference`` in
the repository points there), so an installed opal_dp finds it without a checkout.
"""

from __future__ import annotations

import math
import os
from importlib.resources import files
from pathlib import Path

DATA_DIR_ENV = "OPAL_DP_DATA_DIR"
LEDGER_URL_ENV = "OPAL_DP_LEDGER_URL"
STRICT_PERMISSIONS_ENV = "OPAL_DP_STRICT_PERMISSIONS"
_FLAGS = {"1": True, "true": True, "yes": True, "": False, "0": False, "false": False, "no": False}


def ledger_url_from_env() -> str | None:
    """``$OPAL_DP_LEDGER_URL``: a ``postgresql://`` URI for the privacy ledger (default: SQLite under ``private/``)."""
    return os.environ.get(LEDGER_URL_ENV) or None


def _flag(name: str) -> bool:
    value = os.environ.get(name, "").strip().lower()
    if value not in _FLAGS:
        raise ValueError(f"{name} must be 1/true/yes or 0/false/no, got {value!r}")
    return _FLAGS[value]


def strict_permissions_from_env() -> bool:
    """``$OPAL_DP_STRICT_PERMISSIONS``: refuse to run when a private folder is readable by others (default: warn)."""
    return _flag(STRICT_PERMISSIONS_ENV)


def reference_dir() -> Path:
    return Path(str(files("opal_dp") / "reference"))


AUDIT_FALSE_ALARM_ENV = "OPAL_DP_AUDIT_FALSE_ALARM"
AUDIT_FALSE_ALARM_RANGE = (1e-12, 1e-6)


def audit_false_alarm_from_env() -> float:
    """``$OPAL_DP_AUDIT_FALSE_ALARM``: the probability that ``privacy_audit`` fails a correct mechanism (default
    1e-6). Lower it where many audits run (a test suite): n audits fail a correct release with probability at most
    n times it. Refused outside 1e-12..1e-6 (above, false alarms block publications; below, the audit loses power)."""
    text = os.environ.get(AUDIT_FALSE_ALARM_ENV, "").strip()
    low, high = AUDIT_FALSE_ALARM_RANGE
    try:
        value = float(text) if text else high
    except ValueError:
        value = math.nan
    if not low <= value <= high:
        raise ValueError(f"{AUDIT_FALSE_ALARM_ENV} must be a number from {low:g} to {high:g}, got {text!r}")
    return value


AUDIT_RUNS_ENV = "OPAL_DP_AUDIT_RUNS"
AUDIT_RUNS_RANGE = (10**5, 10**7)


def audit_runs_from_env() -> int:
    """``$OPAL_DP_AUDIT_RUNS``: releases per input of the ``privacy_audit`` before a publication (default 10^6).
    Fewer runs lower the audit's power to find a leak (the planted-bug tests run their own numbers); below 10^5 the
    trip unit's membership game cannot show its bound at the false-alarm rate above (at 2 x 10^4 its upper confidence
    bound on a correct mechanism's release rate passes the bound), so it is refused, as is more than 10^7."""
    text = os.environ.get(AUDIT_RUNS_ENV, "").strip()
    low, high = AUDIT_RUNS_RANGE
    value = 10**6 if not text else int(text) if text.isdigit() else -1
    if not low <= value <= high:
        raise ValueError(f"{AUDIT_RUNS_ENV} must be a whole number from {low} to {high}, got {text!r}")
    return value


WORKERS_ENV = "OPAL_DP_WORKERS"


def workers_from_env() -> int:
    """``$OPAL_DP_WORKERS``: processes for per-day work (``opal_dp.parallel``); default: the CPUs this process may
    use. 1 runs everything in the calling process."""
    value = os.environ.get(WORKERS_ENV, "").strip()
    if not value:
        return len(os.sched_getaffinity(0))
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"{WORKERS_ENV} must be a positive integer, got {value!r}")
    return int(value)


# The public page's catalogue entry (``opal_dp.release.page.catalogue.PageSettings``): who publishes, whom to
# contact, under which licence (SPDX id; default CC-BY-4.0), how often a release comes out (default weekly).
PUBLISHER_ENV = "OPAL_DP_PUBLISHER"
CONTACT_ENV = "OPAL_DP_CONTACT"
LICENCE_ENV = "OPAL_DP_LICENCE"
UPDATE_FREQUENCY_ENV = "OPAL_DP_UPDATE_FREQUENCY"

AUTOMATION_ENV = "OPAL_DP_AUTOMATION"
SENSOR_INTERVAL_ENV = "OPAL_DP_SENSOR_INTERVAL"
PUBLISH_CRON_ENV = "OPAL_DP_PUBLISH_CRON"
DEFAULT_PUBLISH_CRON = "0 6 * * 1"  # Mondays 06:00: last week's days, published once
TIMEZONE_ENV, DEFAULT_TIMEZONE = "OPAL_DP_TIMEZONE", "Australia/Sydney"
FIRST_DATE_ENV, DEFAULT_FIRST_DATE = "OPAL_DP_FIRST_DATE", "2016-07-25"  # the Opal release's first day, a Monday


def automation_from_env() -> bool:
    """``$OPAL_DP_AUTOMATION``: the three sensors of the weekly operation start switched on (default: off, until
    switched on in the UI). A sensor switched on or off in the UI stays so: the instance remembers it."""
    return _flag(AUTOMATION_ENV)


def sensor_interval_from_env() -> int:
    """``$OPAL_DP_SENSOR_INTERVAL``: seconds between two looks for new raw files and two automation evaluations
    (default 60)."""
    value = os.environ.get(SENSOR_INTERVAL_ENV, "").strip() or "60"
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"{SENSOR_INTERVAL_ENV} must be a positive number of seconds, got {value!r}")
    return int(value)


def timezone_from_env() -> str:
    """``$OPAL_DP_TIMEZONE``: the agency's time zone (an IANA name, default Australia/Sydney). A service day
    becomes a partition once it has ended there, and the weekly publication ticks on its clock."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    timezone = os.environ.get(TIMEZONE_ENV, "").strip() or DEFAULT_TIMEZONE
    try:
        ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"{TIMEZONE_ENV} must be an IANA time zone such as 'Australia/Sydney', "
                         f"got {timezone!r}") from None
    return timezone


def publish_schedule_from_env() -> tuple[str, str]:
    """(cron, timezone) of the weekly roll-up: ``$OPAL_DP_PUBLISH_CRON`` (default Mondays 06:00) in the agency's
    time zone (``timezone_from_env``). The cron is checked where Dagster reads it."""
    return os.environ.get(PUBLISH_CRON_ENV, "").strip() or DEFAULT_PUBLISH_CRON, timezone_from_env()


def first_date_from_env() -> str:
    """``$OPAL_DP_FIRST_DATE``: the first service date the deployment can release (ISO, a Monday: the first day of
    the first release week; default 2016-07-25, the first day of the 2016 Opal release). Raw files of earlier
    dates are refused by name. Service dates and release weeks are Dagster's time partitions from here on."""
    from datetime import date

    text = os.environ.get(FIRST_DATE_ENV, "").strip() or DEFAULT_FIRST_DATE
    try:
        first = date.fromisoformat(text)
    except ValueError:
        first = None
    if first is None or first.weekday() != 0:
        raise ValueError(f"{FIRST_DATE_ENV} must be an ISO date that is a Monday (the first day of the first release "
                         f"week), got {text!r}")
    return first.isoformat()
