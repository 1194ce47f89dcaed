"""Assets: session logs -> the warehouse's Parquet tables -> steps.

Thin on purpose: the work is in warehouse/ (SQL) and stretto/ (the turn rule); these attach
what a person wants to see in the Dagster UI: counts, the identity lines read = ingested +
quarantined + dropped, and each table's columns.
"""

import time
import uuid

import dagster as dg

from assets.resources import StrettoHome
from stretto.logs.pseudonyms import KEEP_SHARED, SALT_ENV, RedactError
from stretto.logs.sessionlog import LogError
from stretto.progress import Progress
from warehouse import discover, ingest, redacted, store
from warehouse.layout import PARTITION_KEYS, PERSONAL_DATA, TABLES

GROUP = "warehouse"


def _schema(table: str) -> dg.TableSchema:
    columns = [*TABLES[table], *PARTITION_KEYS]
    personal = PERSONAL_DATA.get(table, ())
    return dg.TableSchema(
        columns=[
            dg.TableColumn(name, kind, tags={"personal_data": ""} if name in personal else None)
            for name, kind in columns
        ]
    )


def new_ingest_id() -> str:
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + "-" + uuid.uuid4().hex[:8]


def _failure(exc: Exception) -> dg.Failure:
    """An expected failure (another run holds the lock): one line, no traceback."""
    return dg.Failure(description=str(exc), allow_retries=False)


class LogFilesConfig(dg.Config):
    """`stretto ingest --redact`: ingest a pseudonymised copy of the logs (warehouse/redacted.py;
    the salt is read from the environment variable `salt_env`, never given here)."""

    redact: bool = False
    salt_env: str = SALT_ENV
    keep_shared: int = KEEP_SHARED
    hash_fields: list[str] = []


@dg.asset(
    group_name=GROUP,
    description="Session logs under logs/ that are new or changed since they were last "
    "ingested: by size and mtime, then by content hash (a session is its id and content, "
    "not its path).",
)
def log_files(
    context: dg.AssetExecutionContext, config: LogFilesConfig, stretto: StrettoHome
) -> discover.Plan:
    layout = stretto.layout()
    logs = None
    try:
        if config.redact:  # read the pseudonymised copy of the logs instead (the salt: env)
            redaction = redacted.Redaction(
                config.salt_env, config.keep_shared, tuple(config.hash_fields)
            )
            redacted.check(layout, redaction)
            logs = redacted.redact_logs(layout, redaction, context.log.warning)
        else:
            redacted.check(layout, None)
    except (RedactError, LogError) as exc:
        raise _failure(exc) from None
    plan = discover.discover(layout, store.known_state(layout), logs=logs)
    context.add_output_metadata(
        {
            "logs": dg.MetadataValue.path(str(layout.logs)),
            "files to read": len(plan.read),
            "files already in (same content)": len(plan.known),
            "files unchanged": plan.unchanged,
            "bytes to read": sum(f.size for f in plan.read),
        }
    )
    return plan


@dg.asset(
    group_name=GROUP,
    description="The logs as Parquet tables (sessions, messages, "
    "calls, context, tools, quarantine), partitioned by domain and day, with DuckDB views.",
)
def session_tables(
    context: dg.AssetExecutionContext, stretto: StrettoHome, log_files: discover.Plan
) -> dg.MaterializeResult:
    layout = stretto.layout()
    try:
        with store.ingest_lock(layout, stretto.wait_seconds, context.log.info):
            ingest_id = new_ingest_id()
            bar = Progress(
                len(log_files.read), "ingesting", " files", enabled=stretto.progress or None
            )
            plan, stats = store.ingest_run(
                layout,
                log_files,
                ingest_id,
                on_batch=lambda batch: bar.advance(batch.files),
                say=context.log.warning,
            )
            bar.close()
    except store.WarehouseBusy as exc:
        raise _failure(exc) from None
    if not stats.balanced:
        raise dg.Failure(
            f"lines read {stats.lines_read} != ingested {stats.lines_ingested} + "
            f"quarantined {stats.lines_quarantined} + dropped {stats.lines_dropped}"
        )
    metadata: dict = {  # dagster's metadata values, of several types
        "ingest id": ingest_id,
        "files read": stats.files,
        "files already in (same content)": len(plan.known),
        "bytes read": stats.bytes,
        "lines read": stats.lines_read,
        "lines ingested": stats.lines_ingested,
        "lines quarantined": stats.lines_quarantined,
        "lines dropped": stats.lines_dropped,
        "lines read = ingested + quarantined + dropped": stats.balanced,
        "warehouse": dg.MetadataValue.path(str(layout.database)),
    }
    for table, rows in stats.rows.items():
        metadata[f"rows written: {table}"] = rows
    metadata["dagster/column_schema"] = _schema("calls")
    metadata["schemas"] = dg.MetadataValue.md(
        "\n\n".join(
            f"**{t}**: " + ", ".join(f"`{n}` {k}" for n, k in [*TABLES[t], *PARTITION_KEYS])
            for t in ingest.OUTPUT_TABLES
        )
    )
    return dg.MaterializeResult(metadata=metadata)


@dg.asset(
    group_name=GROUP,
    deps=[session_tables],
    description="Each session's abstract "
    "steps (one per tool call, one per assistant reply), the input of learning.",
)
def steps(context: dg.AssetExecutionContext, stretto: StrettoHome) -> dg.MaterializeResult:
    layout = stretto.layout()
    try:
        with store.ingest_lock(layout, stretto.wait_seconds, context.log.info):
            written = store.derive_steps(layout, new_ingest_id())
    except store.WarehouseBusy as exc:
        raise _failure(exc) from None
    return dg.MaterializeResult(
        metadata={
            "rows written": written,
            "dagster/column_schema": _schema("steps"),
        }
    )


INGEST_ASSETS = [log_files, session_tables, steps]
