"""The statement's runs (``release.statement.runs``) state exactly the lists they stand for."""

from datetime import date, timedelta

from hypothesis import given
from hypothesis import strategies as st

from opal_dp.network import MODES
from opal_dp.release.statement.runs import (
    date_runs, dates_of, draws_of, draws_section, int_runs, ints_of, partition_keys, partitions_section,
)

DAYS = st.dates(min_value=date(2015, 12, 1), max_value=date(2017, 3, 1)).map(lambda d: d.strftime("%Y%m%d"))


@given(st.lists(st.integers(min_value=0, max_value=200), max_size=80))
def test_draw_runs_give_back_exactly_the_distinct_ids(ids):
    section = draws_section(ids)
    assert draws_of(section) == ints_of(section["runs"]) == sorted(set(ids)) and section["count"] == len(set(ids))
    assert all(b + 1 < c for (_, b), (c, _) in zip(section["runs"], section["runs"][1:]))  # maximal runs


@given(st.lists(DAYS, max_size=60))
def test_date_runs_cross_month_and_year_ends(days):
    runs = date_runs(days)
    assert dates_of(runs) == sorted(set(days))
    ends = [date(int(d[:4]), int(d[4:6]), int(d[6:])) for run in runs for d in run]
    assert all(b + timedelta(days=1) < c for b, c in zip(ends[1::2], ends[2::2]))  # runs never touch


@given(st.sets(st.tuples(DAYS, st.sampled_from(MODES)), max_size=60))
def test_partitions_stated_by_mode_give_back_every_key(keys):
    section = partitions_section(keys)
    assert partition_keys({"partitions": section}) == [{"date": d, "mode": m} for d, m in sorted(keys)]
    assert section["count"] == len(keys) and section["dates"] == len({d for d, _ in keys})


def test_a_year_of_dates_is_one_run_and_a_plain_list_of_draws_is_read_as_it_was():
    year = [(date(2016, 7, 25) + timedelta(days=i)).strftime("%Y%m%d") for i in range(364)]
    assert date_runs(year) == [["20160725", "20170723"]]
    assert draws_of([5, 3, 4]) == [3, 4, 5]  # the statements of schema 3 and older
