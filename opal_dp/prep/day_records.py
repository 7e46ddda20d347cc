"""Each service day's record: whether its raw file was ingested or why not, which bytes were read, and the settings
its private stages were cut with. Written last by the day pass (``prep.day_files.day_pass``), one private file a
day (``private/days/<date>.json``), and read by everything after it:

- the release of a week takes its days' input versions from their records, so a charge is versioned by the bytes
  the histograms were built from, never by the raw file as it is when the release runs (a file replaced in between
  changes nothing the release does: the day is ingested again first, and only then released again);
- a release calibrated on settings the days were not cut with is refused (``stale_days``): a lower ``od_height``
  over sequences stored at a greater one, or tighter bounds over trips bounded with looser ones, would under-noise;
- a failed day names its file and the column or line at fault, never a raw value (``opal_dp.prep.ingest``); its
  week waits, and every other week goes on.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from opal_dp.permissions import make_dirs, reserve_private

FOLDER = "days"
INGESTED, FAILED = "ingested", "failed"


@dataclass(frozen=True)
class DayCut:
    """What a day's stored private stages depend on besides its raw file: the per-card-day bounds (none for the
    trip unit, which keeps every trip), the card-day sequences' height, and the public stop list's version."""

    bounds: tuple[int, int] | None  # (max_trips_per_card_day, max_per_bin), or None: every trip kept
    od_height: int
    stops: str

    def describe(self) -> str:
        bounds = ("every trip kept" if self.bounds is None
                  else f"at most {self.bounds[0]} trips a card-day, {self.bounds[1]} in a bin")
        return f"{bounds}; sequences of height {self.od_height}; stop list {self.stops[:12]}"


@dataclass(frozen=True)
class DayRecord:
    """One day's outcome. ``raw`` is the raw file's (name, size, modification time in ns) when it was read: a file
    with another is new input. ``input_version``: the keyed HMAC of the bytes read (``core.input_version``).
    ``rows``: rows read, accepted and rejected (internal figures, never published)."""

    date: str
    status: str
    raw: tuple[str, int, int] | None
    reason: str = ""
    input_version: str = ""
    cut: DayCut | None = None
    rows: tuple[int, int, int] = (0, 0, 0)

    @property
    def ingested(self) -> bool:
        return self.status == INGESTED

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> DayRecord:
        data = json.loads(text)
        cut = data.get("cut")
        return cls(data["date"], data["status"], tuple(data["raw"]) if data.get("raw") else None, data.get("reason", ""),
                   data.get("input_version", ""),
                   DayCut(tuple(cut["bounds"]) if cut["bounds"] else None, cut["od_height"], cut["stops"])
                   if cut else None, tuple(data.get("rows", (0, 0, 0))))


def raw_stamp(path: Path) -> tuple[str, int, int]:
    """(name, size, modification time in ns) of a raw file: what tells a new or replaced file from the one read."""
    st = os.stat(path)
    return path.name, st.st_size, st.st_mtime_ns


def write_record(private_dir: Path, record: DayRecord) -> None:
    """Replace the day's record atomically (private). The staging file is the writer's own (its process id), so
    two processes recording the same day never rename each other's file away: the last rename wins whole."""
    folder = make_dirs(Path(private_dir) / FOLDER)
    tmp = reserve_private(folder / f".{record.date}.json.{os.getpid()}.tmp")
    tmp.write_text(record.to_json(), encoding="utf-8")
    os.replace(tmp, folder / f"{record.date}.json")


def read_record(private_dir: Path, day: str) -> DayRecord | None:
    path = Path(private_dir) / FOLDER / f"{day}.json"
    return DayRecord.from_json(path.read_text(encoding="utf-8")) if path.exists() else None


def read_records(private_dir: Path) -> dict[str, DayRecord]:
    """Every day's record, by date."""
    folder = Path(private_dir) / FOLDER
    return {p.stem: DayRecord.from_json(p.read_text(encoding="utf-8")) for p in sorted(folder.glob("*.json"))}


def failed_days(private_dir: Path) -> dict[str, str]:
    """Service date -> why its raw file could not be used, for every day whose last ingest failed."""
    return {day: r.reason for day, r in read_records(private_dir).items() if not r.ingested}


def stale_days(records: dict[str, DayRecord | None], cut: DayCut) -> dict[str, str]:
    """Of ``records`` (date -> record, None if never ingested), the days that cannot be released with ``cut``, and
    why: never ingested, failed, or cut with other settings."""
    out = {}
    for day, record in sorted(records.items()):
        if record is None:
            out[day] = "not ingested"
        elif not record.ingested:
            out[day] = f"its raw file could not be used: {record.reason}"
        elif record.cut != cut:
            out[day] = (f"ingested with other settings ({record.cut.describe() if record.cut else 'unrecorded'}) than "
                        f"this release's ({cut.describe()}): ingest it again first")
    return out
