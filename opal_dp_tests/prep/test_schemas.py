import pandas as pd
import pandera.pandas as pa
import pytest

from opal_dp.prep import schemas

REFUSED = (pa.errors.SchemaError, pa.errors.SchemaErrors)
MODELS = [schemas.RejectedTrips, schemas.IngestedTrips, schemas.PartitionTrips, schemas.BinnedTrips,
          schemas.CardBinnedTrips, schemas.CardDays]


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_no_trip_schema_changes_a_frame_so_validating_in_place_skips_only_the_copy(model):
    """Pandera writes into the frame it validates only to coerce, fill defaults, parse, add missing columns, drop
    invalid rows or filter columns: none of which a trip schema does."""
    schema = model.to_schema()
    assert not schema.coerce and schema.strict is True and schema.index is None
    assert not schema.add_missing_columns and not schema.drop_invalid_rows and not schema.parsers
    for column in schema.columns.values():
        assert not column.coerce and column.default is None and not column.parsers


def test_in_place_validation_returns_the_frame_itself_and_refuses_what_a_copy_refuses():
    cards = pd.DataFrame({"card_id": [3, 5]})
    assert schemas.CardDays.validate(cards, inplace=True) is cards
    for bad in (cards.assign(extra=1), pd.DataFrame({"card_id": [3, 0]})):
        with pytest.raises(REFUSED):
            schemas.CardDays.validate(bad)
        with pytest.raises(REFUSED):
            schemas.CardDays.validate(bad, inplace=True)
