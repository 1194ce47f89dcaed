"""Assets: session logs -> the warehouse's Parquet tables -> steps.

Thin on purpose: the work is in warehouse/ (SQL) and stretto/ (the turn rule); these attach
what a person wants to see in the Dagster UI: counts, the identity lines read = ingested +
quarantined + dropped, and each table's columns.
"""

import time
import uuid

import dagster as dg

from assets.resources import StrettoHome
from stretto.progress import Progress
from warehouse import ingest, store
from warehouse.layout import PARTITION_KEYS, TABLES

GROUP = "warehouse"


def _schema(table: str) -> dg.TableSchema:
    columns = [*TABLES[table], *PARTITION_KEYS]
    return dg.TableSchema(columns=[dg.TableColumn(name, kind) for name, kind in columns])


def new_ingest_id() -> str:
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + "-" + uuid.uuid4().hex[:8]


@dg.asset(
    group_name=GROUP,
    description="Session logs under logs/ that are new or changed "
    "since they were last ingested (by path, size, time and content hash).",
)
def log_files(context: dg.AssetExecutionContext, stretto: StrettoHome) -> list[ingest.LogFile]:
    layout = stretto.layout()
    found, unchanged = ingest.discover(layout, store.known_files(layout))
    context.add_output_metadata(
        {
            "logs": dg.MetadataValue.path(str(layout.logs)),
            "files to ingest": len(found),
            "files unchanged": unchanged,
            "bytes to ingest": sum(f.size for f in found),
        }
    )
    return found


@dg.asset(
    group_name=GROUP,
    description="The logs as Parquet tables (sessions, messages, "
    "calls, context, tools, quarantine), partitioned by domain and day, with DuckDB views.",
)
def session_tables(
    context: dg.AssetExecutionContext, stretto: StrettoHome, log_files: list[ingest.LogFile]
) -> dg.MaterializeResult:
    layout = stretto.layout()
    with store.ingest_lock(layout, stretto.wait_seconds, context.log.info):
        # Another run may have ingested some of these since they were found.
        known = store.known_files(layout)
        files = [f for f in log_files if known.get(f.path, ())[:2] != (f.size, f.mtime_ns)]
        ingest_id = new_ingest_id()
        bar = Progress(len(files), "ingesting", " files", enabled=stretto.progress or None)
        stats = ingest.ingest_files(
            files, ingest_id, layout, on_batch=lambda batch: bar.advance(batch.files)
        )
        bar.close()
        store.record_ingest(layout, stats.registry)
    if not stats.balanced:
        raise dg.Failure(
            f"lines read {stats.lines_read} != ingested {stats.lines_ingested} + "
            f"quarantined {stats.lines_quarantined} + dropped {stats.lines_dropped}"
        )
    metadata = {
        "ingest id": ingest_id,
        "files read": stats.files,
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
    with store.ingest_lock(layout, stretto.wait_seconds, context.log.info):
        written = store.derive_steps(layout, new_ingest_id())
    return dg.MaterializeResult(
        metadata={
            "rows written": written,
            "dagster/column_schema": _schema("steps"),
        }
    )


INGEST_ASSETS = [log_files, session_tables, steps]
