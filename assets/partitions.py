"""The pipeline's partitions: domains (dynamic: a domain is added when its logs are ingested)
and days (the UTC date a session started, also added as they come). Counts are per domain and
day; flows and their reports per domain."""

import dagster as dg

from warehouse import learn, store
from warehouse.layout import Layout

domains = dg.DynamicPartitionsDefinition(name="domain")
days = dg.DynamicPartitionsDefinition(name="day")
domain_days = dg.MultiPartitionsDefinition({"domain": domains, "day": days})
# a flow reads every day of its domain's counts
ALL_DAYS_OF_DOMAIN = dg.MultiToSingleDimensionPartitionMapping(partition_dimension_name="domain")


def domain_day_key(domain: str, day: str) -> dg.MultiPartitionKey:
    return dg.MultiPartitionKey({"domain": domain, "day": day})


def split_key(key: str | dg.MultiPartitionKey) -> tuple[str, str]:
    """(domain, day) of a domain_days partition key."""
    if not isinstance(key, dg.MultiPartitionKey):
        key = domain_days.get_partition_key_from_str(key)
    return key.keys_by_dimension["domain"], key.keys_by_dimension["day"]


def known_parts(layout: Layout) -> list[tuple[str, str]]:
    """(domain, day) of every part the warehouse holds sessions to learn from."""
    try:
        return learn.domain_days(layout)
    except store.NoWarehouse:
        return []


def register(instance: dg.DagsterInstance, parts: list[tuple[str, str]]) -> list[str]:
    """Add the domains and days of `parts` the instance does not know yet; what was added."""
    added = []
    for name, wanted in (("domain", {d for d, _ in parts}), ("day", {day for _, day in parts})):
        new = sorted(wanted - set(instance.get_dynamic_partitions(name)))
        if new:
            instance.add_dynamic_partitions(name, new)
            added += [f"{name} {key}" for key in new]
    return added
