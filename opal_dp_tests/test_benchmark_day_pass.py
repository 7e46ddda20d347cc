"""The day-pass benchmark at a tiny scale, so that it never rots: structure only, no timing assertions."""

from __future__ import annotations

import json

import pytest

from benchmarks import dataset
from benchmarks.day_pass import PARTS, main


def test_day_pass_benchmark(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(dataset, "DAYS", 1)
    assert main(["--scale", "0.002", "--day", dataset.START, "--repeat", "1", "--out", str(tmp_path)]) == 0

    result = json.loads((tmp_path / "day_pass.json").read_text())
    assert result["trips"] > 1000 and result["floor_s"] > 0 and result["day_pass_s"] > 0
    assert len(result["primitives_s"]) == 4 and all(s > 0 for s in result["primitives_s"].values())
    assert result["primitives_total_s"] == pytest.approx(sum(result["primitives_s"].values()))
    assert set(result["day_pass_parts_s"]) == set(PARTS)
    assert all(s > 0 for s in result["day_pass_parts_s"].values())  # every part's function is still called so
    assert "x the floor's day" in capsys.readouterr().out


def test_a_day_outside_the_fortnight_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(dataset, "DAYS", 1)
    with pytest.raises(SystemExit):
        main(["--scale", "0.002", "--day", "2016-08-25", "--repeat", "1", "--out", str(tmp_path)])
