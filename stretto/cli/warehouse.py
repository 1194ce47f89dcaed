"""The commands over session logs and the warehouse: sessions, ingest, sql.

Tables are printed through polars: an aligned text table, CSV (nested values as JSON) or
JSON (null for NaN and infinities)."""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from stretto.cli.options import Commands, add_home, add_wait, command, interruptible, say
from stretto.logs.pseudonyms import KEEP_SHARED, SALT_ENV

if TYPE_CHECKING:
    import polars as pl
    import pyarrow as pa

MAX_CELL = 60  # a table cell longer than this is cut, with an ellipsis
GAP = "  "  # between the columns of a table


def register(commands: Commands) -> None:
    sessions = command(
        commands,
        "sessions",
        _sessions,
        summary="list the session logs in a folder as the reader sees them",
        description="List the session logs in DIR (not *.flow.jsonl or *.confirm.jsonl): "
        "each one's domain, agent model, the agent's calls, the flow's lookups, LLM turns and "
        "user messages. A malformed log is an error naming its file and line.",
        examples=[
            "stretto sessions ~/.stretto/logs/notes",
            "stretto sessions ~/.stretto/logs/notes | head -3",
        ],
    )
    sessions.add_argument("dir", metavar="DIR")

    ingest = command(
        commands,
        "ingest",
        _ingest,
        summary="ingest new and changed session logs into the warehouse",
        description="Ingest the session logs under HOME/logs/ into Parquet tables under "
        "HOME/warehouse/ (sessions, messages, calls, context, tools, steps, quarantine) with "
        "DuckDB views over them, running the pipeline's Dagster assets in this process. A file "
        "already ingested with the same content is not read again; a changed one replaces its "
        "rows. A malformed line is quarantined with its file, line and error, and the rest of "
        "its file is still ingested. With --otel, the traces of an OpenTelemetry export are "
        "first written as session logs under HOME/logs/<domain>/, one per trace.",
        examples=[
            "stretto ingest --home /srv/stretto --wait 0",
            "stretto ingest --otel traces.json --manifest shop.manifest.json",
        ],
    )
    add_home(ingest)
    add_warehouse(ingest)
    add_wait(ingest, "another ingest run to finish")
    ingest.add_argument(
        "--otel",
        metavar="FILE",
        help="first write the traces of this OpenTelemetry export (OTLP/JSON or protobuf) as "
        "session logs under HOME/logs/<domain>/",
    )
    ingest.add_argument(
        "--manifest",
        metavar="FILE",
        help="with --otel: the tools' kinds (and the domain) for the logs' tool lists",
    )
    ingest.add_argument(
        "--domain",
        metavar="NAME",
        help="with --otel: the sessions' domain (default: the manifest's, else otel)",
    )
    ingest.add_argument(
        "--redact",
        action="store_true",
        help="ingest a pseudonymised copy of the logs (stretto redact's rules, into "
        "HOME/warehouse/redacted/): no original value reaches the warehouse; a home is "
        "redacted or not for good",
    )
    ingest.add_argument(
        "--salt-env",
        metavar="VAR",
        default=SALT_ENV,
        help="with --redact: the environment variable holding the salt (%(default)s)",
    )
    ingest.add_argument(
        "--keep-shared",
        type=int,
        metavar="N",
        default=KEEP_SHARED,
        help="with --redact: keep a value seen in N or more sessions of a folder; 0: none "
        "(%(default)s)",
    )
    ingest.add_argument(
        "--hash-field",
        action="append",
        default=[],
        metavar="NAME",
        help="with --redact: always hash the values of JSON keys NAME (repeatable, or a,b)",
    )
    ingest.add_argument(
        "--retain-days",
        type=int,
        metavar="DAYS",
        help="then drop, in one commit, the warehouse's data of sessions that started more "
        "than DAYS days ago (UTC days), and say what went",
    )

    sql = command(
        commands,
        "sql",
        _sql,
        summary="query the warehouse with SQL",
        description="Run one SQL query (DuckDB) against the warehouse's views: sessions, "
        "messages, calls, context, tools, steps, quarantine, and the registry's registry, "
        "session_current, content_path, path_latest and data_files (docs/formats.md §2). "
        "Read-only and confined to the warehouse: only SELECT and EXPLAIN run, and DuckDB "
        "itself can open no file, to read or to write, whatever the statement. Prints an "
        "aligned table (long cells cut), CSV (lists and structs as JSON) or a JSON array of "
        "objects (null for NaN).",
        examples=[
            'stretto sql "SELECT tool, count(*) AS calls FROM calls GROUP BY tool"',
            'stretto sql "SELECT * FROM sessions" --format json | jq .',
        ],
    )
    sql.add_argument("query", metavar="QUERY")
    add_home(sql)
    add_warehouse(sql)
    sql.add_argument("--format", choices=("table", "csv", "json"), default="table")


def add_warehouse(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--warehouse",
        metavar="URL",
        help="keep the warehouse's committed data (Parquet files and registry) at this "
        "object-store URL, s3://bucket/prefix, instead of under HOME/warehouse/ (default: "
        "$STRETTO_WAREHOUSE); credentials come from the environment (AWS_ACCESS_KEY_ID, ...)",
    )


def _sessions(args: argparse.Namespace) -> int:
    """Summarize each session log in a folder: what the reader makes of it."""
    from stretto.logs.episode import User, episode_from_log
    from stretto.logs.sessionlog import list_session_logs, read_session_log

    rows = []
    for path in list_session_logs(args.dir):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            log = read_session_log(path)
        for warning in caught:
            say(f"warning: {warning.message}")
        episode = episode_from_log(log)
        calls = episode.calls()
        counts = (
            sum(not c.by_proxy for c in calls),
            sum(c.by_proxy for c in calls),
            episode.llm_turns(),
            sum(isinstance(e, User) for e in episode.events),
        )
        rows.append([episode.id, episode.domain, episode.agent_model, *map(str, counts)])
    header = ["session", "domain", "agent model", "calls", "lookups", "turns", "user msgs"]
    sys.stdout.write("\n".join(aligned(header, rows)) + "\n")
    say(f"{len(rows)} session(s) in {args.dir}")
    return 0


def _ingest(args: argparse.Namespace) -> int:
    """Run the ingest assets in this process (the same code the Dagster UI runs)."""
    from assets.ingest import INGEST_ASSETS
    from pipeline.run import failure_message, materialize, output_metadata
    from warehouse.layout import Layout

    layout = Layout.at(args.home, args.warehouse)
    redaction_options = args.keep_shared != KEEP_SHARED or args.hash_field
    if not args.redact and (redaction_options or args.salt_env != SALT_ENV):
        say("--salt-env, --keep-shared and --hash-field go with --redact")
        return 2
    if args.keep_shared < 0 or (args.retain_days is not None and args.retain_days < 1):
        say("--keep-shared wants 0 or more, --retain-days 1 or more")
        return 2
    if args.otel:
        if not _write_otel(args, layout.logs):
            return 1
    elif args.manifest or args.domain:
        say("--manifest and --domain go with --otel")
        return 2
    config = {
        "redact": args.redact,
        "salt_env": args.salt_env,
        "keep_shared": args.keep_shared,
        "hash_fields": [f.strip() for spec in args.hash_field for f in spec.split(",")],
    }
    result = interruptible(
        lambda: materialize(
            INGEST_ASSETS,
            str(layout.home),
            args.wait,
            asset_config={"session_tables": config},
            warehouse=layout.url,
        ),
        "interrupted; the next ingest removes the partial run",
    )
    if not result.success:
        say(f"ingest failed: {failure_message(result)}")
        return 1
    found = done = output_metadata(result, "sessions")
    steps = output_metadata(result, "steps")
    print(
        f"stretto: ingested {done['files read']} file(s) ({found['files unchanged']} unchanged): "
        f"{done['lines read']} lines read, {done['lines ingested']} ingested, "
        f"{done['lines quarantined']} quarantined, {done['lines dropped']} dropped; "
        f"{done['rows written: sessions']} sessions, {done['rows written: calls']} calls, "
        f"{steps['rows written']} steps; warehouse {layout.url or layout.database}"
    )
    if done["lines quarantined"]:
        say('see them with: stretto sql "SELECT file, line, error FROM quarantine"')
    if args.retain_days is not None:
        return _retain(layout, args.retain_days, args.wait)
    return 0


def _retain(layout, days: int, wait: float) -> int:
    """Drop the warehouse's data older than `days`, with the ingest lock held."""
    from warehouse import retention, store
    from warehouse.ingestrun import new_ingest_id
    from warehouse.storage import StorageError

    try:
        with store.ingest_lock(layout, wait, say):
            dropped = retention.drop_older(layout, days, new_ingest_id())
    except (store.WarehouseBusy, StorageError) as exc:
        say(str(exc))
        return 1
    say(dropped.said(days))
    return 0


def _write_otel(args: argparse.Namespace, logs) -> bool:
    """`ingest --otel`: the export's traces as session logs under HOME/logs/<domain>/."""
    from stretto.cli.learnfolder import otel_logs
    from stretto.logs.domain import DomainError, check_domain
    from stretto.model.flow import load_manifest

    manifest = load_manifest(args.manifest) if args.manifest else None
    try:
        domain = check_domain(args.domain or (manifest or {}).get("domain") or "otel")
    except DomainError as exc:
        say(str(exc))
        return False
    if not otel_logs(args.otel, manifest, domain, logs / domain):
        say(f"{args.otel}: no trace with a tool call or an LLM turn to ingest")
        return False
    return True


def _sql(args: argparse.Namespace) -> int:
    import duckdb

    from warehouse import store
    from warehouse.layout import Layout
    from warehouse.storage import StorageError

    try:
        table = store.query(Layout.at(args.home, args.warehouse), args.query)
    except (store.NoWarehouse, StorageError) as exc:
        say(str(exc))
        return 1
    except duckdb.Error as exc:
        say(f"query failed: {str(exc).strip()}")
        return 1
    sys.stdout.write(render(table, args.format))
    return 0


# --- printing a query's result ------------------------------------------------------------


def render(table: pa.Table, fmt: str = "table") -> str:
    """A query's result (a pyarrow Table) as `table`, `csv` or `json` text."""
    frame = _frame(table)
    if fmt == "json":
        # one object a line: valid JSON that still reads well; polars writes NaN as null
        rows = frame.with_columns(_json_ready(frame)).write_ndjson().splitlines()
        return "[\n" + ",\n".join(rows) + "\n]\n" if rows else "[]\n"
    if fmt == "csv":
        return frame.with_columns(_text(frame, nested_only=True)).write_csv()
    cells = _cells(frame)
    lines = aligned(cells.columns, cells.rows(), rule=True)
    lines.append(f"({frame.height} row{'s' if frame.height != 1 else ''})")
    return "\n".join(lines) + "\n"


def aligned(header: Sequence[str], rows: Iterable[Sequence[str]], rule: bool = False) -> list[str]:
    """The lines of a text table: the header (with `rule`, a line of dashes under it), then the
    rows; each column padded to its widest cell."""
    rows = list(rows)
    widths = [max(map(len, column)) for column in zip(header, *rows, strict=True)]
    lines = [
        GAP.join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]
    if rule:
        lines.insert(1, GAP.join("-" * w for w in widths))
    return lines


def _cells(frame: pl.DataFrame) -> pl.DataFrame:
    """A table's cells: every value as text (nested ones as JSON), nulls empty, newlines shown
    as \\n, cells longer than MAX_CELL cut with an ellipsis."""
    import polars as pl

    text = frame.select(_text(frame)).with_columns(
        pl.all().fill_null("").str.replace_all("\n", "\\n", literal=True)
    )
    return text.select(
        pl.when(pl.col(n).str.len_chars() > MAX_CELL)
        .then(pl.col(n).str.slice(0, MAX_CELL - 1) + "…")
        .otherwise(pl.col(n))
        .alias(n)
        for n in text.columns
    )


def _frame(table: pa.Table) -> pl.DataFrame:
    """The Arrow table as a DataFrame: repeated column names numbered (`a`, `a_1`); a map as
    its JSON text (polars cannot write maps with other keys than strings), and a column of a
    type polars cannot take (an interval, a union) as its values' text."""
    import polars as pl
    import pyarrow as pa

    columns, seen = [], set()
    for name, column in zip(table.column_names, table.columns, strict=True):
        unique, n = name, 0
        while unique in seen:
            n += 1
            unique = f"{name}_{n}"
        seen.add(unique)
        if pa.types.is_map(column.type):
            texts = [
                None if v is None else _json({str(k): x for k, x in v}) for v in column.to_pylist()
            ]
            columns.append(pl.Series(unique, texts, pl.String))
            continue
        try:
            series = pl.Series(unique, column)
        except pl.exceptions.PolarsError:
            texts = [None if v is None else str(v) for v in column.to_pylist()]
            series = pl.Series(unique, texts, pl.String)
        columns.append(series)
    return pl.DataFrame(columns)


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _json_ready(frame: pl.DataFrame) -> list[pl.Expr]:
    """Decimals as numbers (DuckDB's sums are decimals) and bytes as text, which polars'
    JSON writer would otherwise print as strings or refuse."""
    import polars as pl

    return [
        pl.col(name).cast(_plain_type(dtype))
        if dtype != pl.Binary
        else pl.col(name).map_elements(_bytes_text, return_dtype=pl.String)
        for name, dtype in frame.schema.items()
    ]


def _plain_type(dtype: Any) -> pl.DataType:
    import polars as pl

    if isinstance(dtype, pl.Decimal):
        return pl.Int64() if dtype.scale == 0 else pl.Float64()
    if isinstance(dtype, pl.List):
        return pl.List(_plain_type(dtype.inner))
    if isinstance(dtype, pl.Struct):
        return pl.Struct({f.name: _plain_type(f.dtype) for f in dtype.fields})
    return dtype


def _bytes_text(value: bytes) -> str:
    return value.decode("utf-8", "replace")


def _text(frame: pl.DataFrame, nested_only: bool = False) -> list[pl.Expr]:
    """Each column as text: lists, structs and maps as JSON (null stays null), the others as
    polars writes them; with `nested_only`, the other columns as they are."""
    import polars as pl

    exprs = []
    for name, dtype in frame.schema.items():
        column = pl.col(name).cast(_plain_type(dtype))
        if dtype.is_nested():
            # polars encodes structs as JSON; a list is encoded as the one field of a struct
            encoded = pl.struct(column.alias("v")).struct.json_encode()
            exprs.append(
                pl.when(column.is_null())
                .then(None)
                .otherwise(encoded.str.slice(len('{"v":')).str.strip_suffix("}"))
                .alias(name)
            )
        elif dtype == pl.Binary:
            exprs.append(column.map_elements(_bytes_text, return_dtype=pl.String))
        elif not nested_only:
            exprs.append(column.cast(pl.String))
    return exprs
