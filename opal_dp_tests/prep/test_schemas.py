import pandas as pd
import pandera.pandas as pa
import pytest

from opal_dp.prep import schemas

REFUSED = (pa.errors.SchemaError, pa.errors.SchemaErrors)
MODELS = [schemas.RejectedTrips, schemas.IngestedTrips, schemas.PartitionTrips, schemas.BinnedTrips,
          schemas.CardBinnedTrips, schemas.CardDays]


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_no_trip_schema_coerces_so_validating_in_place_changes_nothing_but_the_copy(model):
    schema = model.to_schema()
    assert not schema.coerce and not any(column.coerce for column in schema.columns.values())


def test_in_place_validation_returns_the_frame_itself_and_refuses_what_a_copy_refuses():
    cards = pd.DataFrame({"card_id": [3, 5]})
    assert schemas.CardDays.validate(cards, inplace=True) is cards
    for bad in (cards.assign(extra=1), pd.DataFrame({"card_id": [3, 0]})):
        with pytest.raises(REFUSED):
            schemas.CardDays.validate(bad)
        with pytest.raises(REFUSED):
            schemas.CardDays.validate(bad, inplace=True)
