"""The pipeline's partitions: domains (dynamic: a domain is added when its logs are ingested,
or as soon as a log under logs/ names it) and days (the UTC date a session started, also added
as they come). Counts are per domain and day; flows and their reports per domain."""

import os
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg

from stretto.logs.domain import is_valid_domain
from stretto.logs.sessionlog import is_session_log
from warehouse import store
from warehouse.counts import learn
from warehouse.counts.partcount import SUCCESS_REWARD
from warehouse.ingest.discover import read_header
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


# Read of a log's first bytes, where its header is: enough for any header a log holds.
HEADER_BYTES = 65_536
# Headers the `partitions` sensor reads in one tick (a few seconds' work; Dagster gives a
# sensor's tick a minute): a fresh home of a million logs is registered over several ticks.
HEADERS_PER_TICK = 20_000


def log_part(path: str) -> tuple[str, str] | None:
    """(domain, day) of a session log by its header, as the ingest will file it (the header's
    domain, else `mcp`; the UTC day it started); None for a log that is not one to learn from
    (no readable header, an invalid domain, a reward under 1)."""
    try:
        with open(path, "rb") as log:
            header = read_header(log.read(HEADER_BYTES))  # as the ingest reads it
        if header is None:
            return None
        domain = header.get("domain") or "mcp"
        started = header.get("started_unix_ms", 0)
        reward = header.get("reward")
        day = datetime.fromtimestamp(started / 1000, UTC).date().isoformat()
    except (OSError, ValueError, AttributeError, TypeError, OverflowError):
        return None
    if not is_valid_domain(domain) or (isinstance(reward, int | float) and reward < SUCCESS_REWARD):
        return None
    return domain, day


def parts_in_logs(
    layout: Layout, since_ns: int = 0, limit: int | None = None
) -> tuple[list[tuple[str, str]], int]:
    """(domain, day) of the session logs under logs/ changed (by ctime: a copy, even `cp -p`,
    or a rewrite) after `since_ns`, read from their headers before any ingest, oldest change
    first and about `limit` of them at most (all the logs changed at the same instant as the
    last one read are read too); and the newest ctime read (the next call's `since_ns`)."""
    changed: list[tuple[int, str]] = []
    for folder, _, names in os.walk(layout.logs):
        for name in names:
            if not is_session_log(Path(name)):
                continue
            path = os.path.join(folder, name)
            try:
                when = os.stat(path).st_ctime_ns
            except OSError:  # gone since the listing
                continue
            if when > since_ns:
                changed.append((when, path))
    changed.sort()
    if limit is not None and len(changed) > limit:
        last = changed[limit - 1][0]
        changed = [(when, path) for when, path in changed if when <= last]
    parts = {part for _, path in changed if (part := log_part(path))}
    return sorted(parts), changed[-1][0] if changed else since_ns


def unknown(instance: dg.DagsterInstance, parts: list[tuple[str, str]]) -> dict[str, list[str]]:
    """The domains and days of `parts` the instance does not know yet, by partition name."""
    wanted_by = {"domain": {d for d, _ in parts}, "day": {day for _, day in parts}}
    return {
        name: sorted(wanted - set(instance.get_dynamic_partitions(name)))
        for name, wanted in wanted_by.items()
    }


def add_requests(
    instance: dg.DagsterInstance, parts: list[tuple[str, str]]
) -> list[dg.AddDynamicPartitionsRequest]:
    """What a sensor asks Dagster to add for `parts`: their domains and days not known yet."""
    definitions = {"domain": domains, "day": days}
    return [
        definitions[name].build_add_request(new)
        for name, new in unknown(instance, parts).items()
        if new
    ]


def register(instance: dg.DagsterInstance, parts: list[tuple[str, str]]) -> list[str]:
    """Add the domains and days of `parts` the instance does not know yet; what was added."""
    added = []
    for name, new in unknown(instance, parts).items():
        if new:
            instance.add_dynamic_partitions(name, new)
            added += [f"{name} {key}" for key in new]
    return added
