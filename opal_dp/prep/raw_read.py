"""Reading a raw day file as text columns, whatever its format (CSV, gzipped CSV, Parquet), keeping every line
that never became a row (not UTF-8, the wrong number of fields) with its line number and reason: rows read =
accepted + rejected starts here. No message quotes the file's content: a raw value may be a card id.
"""

from __future__ import annotations

import csv
import gzip
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq


class RawInputError(ValueError):
    """A raw file as a whole cannot be used (unreadable, missing column, ambiguous day)."""


@dataclass(frozen=True)
class SetAside:
    """A line that never became a row: it could not be split into the header's fields, or is not UTF-8 text."""

    line: int
    text: str
    reason: str


NOT_UTF8 = "not valid UTF-8 text"
CONTAINER_ERRORS = {gzip.BadGzipFile: "not a gzip file", EOFError: "the compressed stream ends early"}


@dataclass(frozen=True)
class RawText:
    """A raw file as text columns: the rows, their line (CSV) or row (Parquet) numbers, the lines set aside, and
    per row the first column whose bytes were not UTF-8 ("" where all were)."""

    table: pa.Table
    lines: np.ndarray
    set_aside: list[SetAside]
    not_utf8: np.ndarray


def read_raw(path: Path, fmt: str) -> RawText:
    """The file as an Arrow table (CSV columns as text, so every value can be judged). Error messages never
    quote the file's content: a raw value may be a card id."""
    try:
        if fmt == "parquet":
            table = pq.read_table(path)
            table, not_utf8 = _text_from_binary(table)
            return RawText(table, np.arange(1, table.num_rows + 1, dtype=np.int64), [], not_utf8)
        return _read_csv(path, _csv_bytes(path))
    except (pa.ArrowException, OSError, EOFError) as err:
        if fmt == "parquet":  # Parquet's messages are about the container, never a value
            raise RawInputError(f"{path}: cannot be read as {fmt}: {err}") from None
        why = CONTAINER_ERRORS.get(type(err), type(err).__name__)  # Arrow's CSV messages may quote a row
        raise RawInputError(f"{path}: cannot be read as {fmt} ({why})") from None


def _csv_bytes(path: Path) -> bytes:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as handle:
        return handle.read()


def _read_csv(path: Path, data: bytes) -> RawText:
    """Lines that are not UTF-8 are set aside before Arrow parses the rest (Arrow can neither convert nor report
    them); blank lines are skipped, as Arrow does. Every row keeps its line number in the file (header: 1)."""
    clean, numbers, set_aside = _line_map(data) or (data, None, [])
    header = _csv_header(path, clean)
    found: list[tuple[int, str]] = []

    def keep_aside(row: pa_csv.InvalidRow) -> str:
        found.append((row.number, f"{row.actual_columns} fields where the header has {row.expected_columns}"))
        return "skip"

    table = pa_csv.read_csv(
        pa.BufferReader(clean),
        read_options=pa_csv.ReadOptions(use_threads=False),  # line numbers for malformed lines
        parse_options=pa_csv.ParseOptions(invalid_row_handler=keep_aside),
        convert_options=pa_csv.ConvertOptions(column_types={name: pa.string() for name in header},
                                              strings_can_be_null=False),
    )
    lines = line_numbers(table.num_rows, [n for n, _ in found], first=2)
    text = clean.split(b"\n") if found else []
    in_file = (lambda n: n) if numbers is None else (lambda n: numbers[n - 1])  # Arrow's line -> the file's
    set_aside += [SetAside(int(in_file(n)), text[n - 1].rstrip(b"\r").decode("utf-8"), why) for n, why in found]
    return RawText(table, in_file(lines), sorted(set_aside, key=lambda a: a.line), np.full(table.num_rows, "", object))


def _line_map(data: bytes) -> tuple[bytes, np.ndarray, list[SetAside]] | None:
    """None when the file is UTF-8 text without blank lines (then Arrow's line numbers are the file's); else the
    text without blank and non-UTF-8 lines, the file's line number of each line kept, and the lines set aside."""
    try:
        data.decode("utf-8")
        if b"\n\n" not in data and b"\n\r\n" not in data:
            return None
    except UnicodeDecodeError:
        pass
    kept, numbers, set_aside = [], [], []
    for number, line in enumerate(data.split(b"\n"), start=1):
        if not line.rstrip(b"\r"):
            continue
        if number > 1 and not _is_utf8(line):  # a header that is not UTF-8 refuses the file (_csv_header)
            set_aside.append(SetAside(number, line.rstrip(b"\r").decode("utf-8", "backslashreplace"), NOT_UTF8))
            continue
        kept.append(line)
        numbers.append(number)
    return b"".join(line + b"\n" for line in kept), np.array(numbers, dtype=np.int64), set_aside


def _text_from_binary(table: pa.Table) -> tuple[pa.Table, np.ndarray]:
    """Binary columns as text; a value that is not UTF-8 becomes its escaped text (``\\xff``) and marks its row
    (the first such column per row). Casting checks a whole column at once; rows are looked at only if it fails."""
    not_utf8 = np.full(table.num_rows, "", dtype=object)
    for index, f in enumerate(table.schema):
        if not (pa.types.is_binary(f.type) or pa.types.is_large_binary(f.type)):
            continue
        column = table.column(index)
        try:
            text = column.cast(pa.string())
        except pa.ArrowInvalid:
            values = column.to_pylist()
            bad = np.array([v is not None and not _is_utf8(v) for v in values], dtype=bool)
            not_utf8[bad & (not_utf8 == "")] = f.name
            text = pa.array([None if v is None else v.decode("utf-8", "backslashreplace") for v in values], pa.string())
        table = table.set_column(index, pa.field(f.name, pa.string()), text)
    return table, not_utf8


def _is_utf8(value: bytes) -> bool:
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _csv_header(path: Path, data: bytes) -> list[str]:
    first = data.split(b"\n", 1)[0]
    if not first.strip():
        raise RawInputError(f"{path}: file is empty (no header line)")
    try:
        return next(csv.reader([first.decode("utf-8")]))
    except UnicodeDecodeError as err:
        raise RawInputError(f"{path}: {NOT_UTF8} in the header line ({err.reason} at byte {err.start})") from None


def line_numbers(rows: int, skipped: list[int], first: int) -> np.ndarray:
    """Line number of each parsed row: the numbers from ``first`` not taken by skipped lines."""
    numbers = np.arange(first, first + rows + len(skipped), dtype=np.int64)
    parsed = np.ones(len(numbers), dtype=bool)
    parsed[[n - first for n in skipped]] = False
    return numbers[parsed]
