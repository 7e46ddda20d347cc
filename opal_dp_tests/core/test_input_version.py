"""Input versions: keyed, byte-exact, one per ledger scope."""

from __future__ import annotations

import pytest

from opal_dp.core.input_version import combined, file_version, input_versions, stand_ins

KEY = b"k" * 32


@pytest.fixture
def raw(tmp_path):
    files = {}
    for day in ("2016-07-25", "2016-07-26", "2016-07-27"):
        files[day] = tmp_path / f"trips_{day}.csv"
        files[day].write_bytes(f"card_id,mode\n1,bus\n{day}\n".encode())
    return files


def test_a_file_version_is_keyed_and_changes_with_any_byte(raw) -> None:
    path = raw["2016-07-25"]
    before = file_version(path, KEY)
    assert before == file_version(path, KEY) != file_version(path, b"x" * 32)
    path.write_bytes(path.read_bytes().replace(b"1,bus", b"2,bus"))
    assert file_version(path, KEY) != before
    assert path.read_bytes().decode() not in before


def test_a_date_scope_has_its_own_version_and_a_period_one_for_all_its_dates(raw) -> None:
    days = ["2016-07-25", "2016-07-26"]
    per_day = input_versions(raw, days, KEY)
    assert per_day["2016-07-25"] != per_day["2016-07-26"]
    period = input_versions(raw, days, KEY, period_of=lambda day: list(raw))
    assert len(set(period.values())) == 1 and set(period) == set(days)
    raw["2016-07-27"].write_bytes(b"replaced")  # a date of the period not in this run: still a new version
    assert input_versions(raw, days, KEY, period_of=lambda day: list(raw)) != period
    assert input_versions(raw, days, KEY) == per_day
    with pytest.raises(ValueError, match="no raw file version"):
        combined({}, ["2016-07-25"])


def test_stand_ins_give_one_version_per_scope_of_a_batch() -> None:
    versions = stand_ins({"d1|bus": "d1", "d1|train": "d1", "d2|bus": "d2"}, {"d1|bus": "a", "d1|train": "b", "d2|bus": "c"})
    assert versions["d1|bus"] == versions["d1|train"] != versions["d2|bus"]


def test_versions_are_the_documented_digests_recomputed_here(raw) -> None:
    """Each version recomputed from its definition: the file's HMAC-SHA256 under the key with the domain string
    first (a file larger than one read chunk included), a scope's ``raw:`` SHA-256 of its sorted ``date=version``
    lines, a batch's ``batch:`` SHA-256 of its sorted ``part=fingerprint`` lines. Kills a version without its domain
    separation, other separators or prefixes, and a period looked up for no date."""
    import hashlib
    import hmac

    big = raw["2016-07-27"]
    big.write_bytes(bytes(range(256)) * 5000)  # 1.28 MB: two chunks of 1 MiB
    for path in raw.values():
        want = hmac.new(KEY, b"opal_dp/raw-file-version/v1\0" + path.read_bytes(), hashlib.sha256).hexdigest()
        assert file_version(path, KEY) == want
    days = sorted(raw)
    text = "\n".join(f"{d}={file_version(raw[d], KEY)}" for d in days)
    scope = "raw:" + hashlib.sha256(text.encode()).hexdigest()
    assert input_versions(raw, days, KEY, period_of={d: days for d in days}.__getitem__) == {d: scope for d in days}
    batch = "batch:" + hashlib.sha256("a=1\nb=2".encode()).hexdigest()
    assert stand_ins({"b": "s", "a": "s"}, {"a": "1", "b": "2"}) == {"a": batch, "b": batch}


def test_a_settled_file_is_hashed_once_per_process(raw, monkeypatch) -> None:
    import opal_dp.core.input_version as iv

    monkeypatch.setattr(iv, "_versions", {})
    monkeypatch.setattr(iv, "RACY_SECONDS", -60.0)  # every file counts as settled
    path = raw["2016-07-25"]
    first = file_version(path, KEY)
    monkeypatch.setattr(iv.hmac, "new", lambda *a: pytest.fail("a settled, unchanged file was hashed again"))
    assert file_version(path, KEY) == first


@pytest.mark.parametrize("how", ["in_place", "replaced"])
def test_a_changed_file_is_hashed_again_even_with_its_size_and_mtime_put_back(raw, monkeypatch, how) -> None:
    """What the process cache keys on: a same-size change whose modification time is forged back still moves the
    change time (in place) or the inode (a new file renamed onto it)."""
    import os

    import opal_dp.core.input_version as iv

    monkeypatch.setattr(iv, "_versions", {})
    monkeypatch.setattr(iv, "RACY_SECONDS", -60.0)
    path = raw["2016-07-25"]
    before, stat = file_version(path, KEY), os.stat(path)
    changed = path.read_bytes().replace(b"1,bus", b"2,bus")
    if how == "in_place":
        path.write_bytes(changed)
    else:
        (path.parent / "new").write_bytes(changed)
        os.replace(path.parent / "new", path)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert os.stat(path).st_size == stat.st_size and os.stat(path).st_mtime_ns == stat.st_mtime_ns
    assert file_version(path, KEY) != before


def test_a_file_written_just_before_it_is_hashed_is_not_kept(raw, monkeypatch) -> None:
    """Within the racy window a second same-size write could keep every time stamp: such a file is hashed anew."""
    import opal_dp.core.input_version as iv

    monkeypatch.setattr(iv, "_versions", {})
    file_version(raw["2016-07-25"], KEY)  # written by the fixture a moment ago
    assert iv._versions == {}


def test_a_file_that_changes_while_it_is_read_is_not_kept(raw, monkeypatch) -> None:
    import opal_dp.core.input_version as iv

    monkeypatch.setattr(iv, "_versions", {})
    monkeypatch.setattr(iv, "RACY_SECONDS", -60.0)
    real, calls = iv.file_identity, []

    def moving(path):  # the second look, after the bytes were read, sees another size
        calls.append(path)
        identity = real(path)
        return identity if len(calls) == 1 else identity[:3] + (identity[3] + 1,) + identity[4:]

    monkeypatch.setattr(iv, "file_identity", moving)
    file_version(raw["2016-07-25"], KEY)
    assert len(calls) == 2 and iv._versions == {}
