"""Partitions: service dates (added as raw files arrive) and (date x mode), the unit of privacy."""


import dagster as dg

from opal_dp.network import MODES

service_dates = dg.DynamicPartitionsDefinition(name="service_date")
modes = dg.StaticPartitionsDefinition(list(MODES))
date_mode = dg.MultiPartitionsDefinition({"date": service_dates, "mode": modes})


def date_and_mode(key: str | dg.MultiPartitionKey) -> tuple[str, str]:
    """(date, mode) of a date x mode key, whether Dagster hands it over as a key or a plain string."""
    parsed = date_mode.get_partition_key_from_str(str(key))
    return parsed.keys_by_dimension["date"], parsed.keys_by_dimension["mode"]
