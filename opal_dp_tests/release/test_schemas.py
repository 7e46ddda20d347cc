import pandas as pd
import pandera.pandas as pa
import pytest

from opal_dp.release.marginals.schemas import ReleaseDraws, ReleaseDrawsByPartition

ROWS = [("2016-07-25|train", "tap_on_time", 3, 2), ("2016-07-25|bus", "tap_on_time", 1, 1),
        ("2016-07-25|bus", "tap_on_loc", 2, 1)]


def rows(data=ROWS) -> pd.DataFrame:
    return pd.DataFrame(data, columns=["partition", "marginal", "draw_id", "charge_id"])


def test_split_gives_each_partition_the_frame_its_own_validation_gives():
    split = ReleaseDrawsByPartition.split(rows())
    assert list(split) == ["2016-07-25|train", "2016-07-25|bus"]  # in the order they come
    for key, frame in split.items():
        own = ReleaseDraws.validate(rows().loc[lambda r: r["partition"] == key].drop(columns="partition")
                                    .reset_index(drop=True))
        pd.testing.assert_frame_equal(frame, own)


@pytest.mark.parametrize("bad", [
    [*ROWS, ("2016-07-25|bus", "tap_on_time", 4, 1)],  # one marginal twice in a partition
    [("2016-07-25|bus", "tap_on_time", 0, 1)],  # no ledger draw 0
    [("2016-07-25|bus", "tap_on_time", 1, -1)],
])
def test_split_refuses_what_a_partition_alone_would_refuse(bad):
    with pytest.raises(pa.errors.SchemaError):
        ReleaseDrawsByPartition.split(rows(bad))


def test_split_refuses_a_column_no_draw_has():
    with pytest.raises((pa.errors.SchemaError, pa.errors.SchemaErrors)):
        ReleaseDrawsByPartition.split(rows().assign(card_id=1))


def test_split_of_no_rows_is_no_partition():
    assert ReleaseDrawsByPartition.split(rows([])) == {}
