"""Where the warehouse keeps things under STRETTO_HOME (found by stretto.home), and the
tables' columns.

    logs/<domain>/<session>.jsonl                      input, written by stretto-proxy
    warehouse/parquet/<table>/domain=../day=../*.parquet  ingested, append-only
    warehouse/registry/<commit>.parquet                what each run added: the source of truth
    warehouse/staging/<ingest id>/                     a run's files until they are moved in
    warehouse/stretto.duckdb                           views for DuckDB clients, rebuilt by each run
    warehouse/ingest.lock                              held by the one ingest run at a time

Every path the warehouse stores is relative to the home, so a home can be moved or copied.

The committed data (parquet/ and registry/) may live at an object-store URL instead
(`s3://bucket/prefix`: `--warehouse URL`, else $STRETTO_WAREHOUSE; warehouse/datastore.py); its
paths are then relative to that URL, and the rest (staging, the lock, stretto.duckdb, the
counts) stays under HOME/warehouse/.

Every column is documented in docs/formats.md §2.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from stretto.home import Paths

# Where the committed data lives, when not under HOME/warehouse: an object-store URL.
WAREHOUSE_ENV = "STRETTO_WAREHOUSE"
# The `warehouse` to give for HOME/warehouse whatever $STRETTO_WAREHOUSE says (the private
# warehouses `stretto learn` and `stretto stage` keep for a folder of logs).
UNDER_HOME = ""

# Each table's columns and DuckDB types, in order. `domain` and `day` are the Hive partition
# keys (directory names, not stored in the files); every table has them.
TABLES: dict[str, list[tuple[str, str]]] = {
    "sessions": [
        ("session", "VARCHAR"),
        ("agent_model", "VARCHAR"),
        ("header_agent_model", "VARCHAR"),
        ("client_name", "VARCHAR"),
        ("server_command", "VARCHAR[]"),
        ("log_version", "INTEGER"),
        ("started_unix_ms", "BIGINT"),
        ("started_at", "TIMESTAMP"),
        ("file", "VARCHAR"),
        ("content_hash", "VARCHAR"),
        ("size_bytes", "BIGINT"),
        ("lines_read", "BIGINT"),
        ("lines_ingested", "BIGINT"),
        ("lines_quarantined", "BIGINT"),
        ("lines_dropped", "BIGINT"),
        ("torn_last_line", "BOOLEAN"),
        ("tools_snapshot", "VARCHAR"),
        ("header_extra", "JSON"),
        ("reward", "DOUBLE"),
        ("host_session", "VARCHAR"),
        ("server_name", "VARCHAR"),
        ("ingest_id", "VARCHAR"),
    ],
    "messages": [
        ("session", "VARCHAR"),
        ("seq", "INTEGER"),
        ("t_ms", "BIGINT"),
        ("sender", "VARCHAR"),
        ("kind", "VARCHAR"),
        ("method", "VARCHAR"),
        ("rpc_id", "VARCHAR"),
        ("is_error", "BOOLEAN"),
        ("size_bytes", "INTEGER"),
        ("body", "VARCHAR"),
        ("ingest_id", "VARCHAR"),
    ],
    "calls": [
        ("session", "VARCHAR"),
        ("call_id", "VARCHAR"),
        ("tool", "VARCHAR"),
        ("arguments", "JSON"),
        ("by_proxy", "BOOLEAN"),
        ("turn", "INTEGER"),
        ("sent_after_results", "INTEGER"),
        ("sent_seq", "INTEGER"),
        ("sent_sub", "INTEGER"),
        ("sent_ms", "BIGINT"),
        ("answered_seq", "INTEGER"),
        ("answered_ms", "BIGINT"),
        ("answered_by", "VARCHAR"),
        ("status", "VARCHAR"),
        ("cancelled", "BOOLEAN"),
        ("result_text", "VARCHAR"),
        ("ingest_id", "VARCHAR"),
    ],
    "context": [
        ("session", "VARCHAR"),
        ("seq", "INTEGER"),
        ("t_ms", "BIGINT"),
        ("role", "VARCHAR"),
        ("content", "VARCHAR"),
        ("ingest_id", "VARCHAR"),
    ],
    "tools": [
        ("session", "VARCHAR"),
        ("tool", "VARCHAR"),
        ("kind", "VARCHAR"),
        ("contract", "VARCHAR"),
        ("summary", "VARCHAR"),
        ("arg_docs", "JSON"),
        ("input_schema", "JSON"),
        ("snapshot", "VARCHAR"),
        ("ingest_id", "VARCHAR"),
    ],
    "steps": [
        ("session", "VARCHAR"),
        ("step", "INTEGER"),
        ("seq", "INTEGER"),
        ("action", "VARCHAR"),
        ("kind", "VARCHAR"),
        ("outcome", "VARCHAR"),
        ("call_id", "VARCHAR"),
        ("by_proxy", "BOOLEAN"),
        ("ingest_id", "VARCHAR"),
    ],
    "quarantine": [
        ("file", "VARCHAR"),
        ("line", "INTEGER"),
        ("error", "VARCHAR"),
        ("raw", "VARCHAR"),
        ("session", "VARCHAR"),
        ("content_hash", "VARCHAR"),
        ("ingest_id", "VARCHAR"),
    ],
}
PARTITION_KEYS = [("domain", "VARCHAR"), ("day", "DATE")]

# The columns that can hold personal data: what the agent, the user and the servers said
# (arguments, results, the conversation, whole wire lines) and what the header kept of the
# server's command line and the host's extras. Tagged in the catalogue (a column comment,
# PERSONAL_COMMENT, in stretto.duckdb and every reader's views) and in the assets' column
# schemas (tag `personal_data`), so a user can drop or check them before sharing a warehouse.
# `stretto ingest --redact` pseudonymises the values of all but `sessions`' header columns,
# which it keeps as `stretto redact` keeps the header. Documented in docs/formats.md §2.
PERSONAL_DATA: dict[str, tuple[str, ...]] = {
    "sessions": ("server_command", "header_extra"),
    "messages": ("body",),
    "calls": ("arguments", "result_text"),
    "context": ("content",),
    "quarantine": ("raw", "error"),
}
PERSONAL_COMMENT = "personal data: can hold what the agent, the user or a server said"


def warehouse_url(given: str | None = None) -> str:
    """The one rule for where the committed data lives: `given` (a command's --warehouse),
    else $STRETTO_WAREHOUSE, else "" (under HOME/warehouse)."""
    return (given if given is not None else os.environ.get(WAREHOUSE_ENV, "")).strip()


@dataclass(frozen=True)
class Layout(Paths):
    """The home's paths (stretto.home) and the warehouse's own under `warehouse/`; `url`, when
    not empty, the object store holding the committed data (warehouse/datastore.py)."""

    url: str = ""

    @classmethod
    def at(cls, home: str | Path | None = None, warehouse: str | None = None) -> Self:
        """The paths under `home` (stretto.home.Paths.at), the committed data where
        `warehouse_url(warehouse)` says."""
        return cls(Paths.at(home).home, warehouse_url(warehouse))

    @property
    def parquet(self) -> Path:
        return self.warehouse / "parquet"

    @property
    def database(self) -> Path:
        return self.warehouse / "stretto.duckdb"

    @property
    def registry(self) -> Path:
        return self.warehouse / "registry"

    @property
    def staging(self) -> Path:
        return self.warehouse / "staging"

    @property
    def lock(self) -> Path:
        return self.warehouse / "ingest.lock"

    def relative(self, path: str | Path) -> str:
        """A path under the home as the warehouse stores it: relative to the home."""
        text, home = os.fspath(path), os.fspath(self.home) + os.sep
        rest = text.removeprefix(home)
        plain = os.sep + "." not in os.sep + rest and os.sep * 2 not in os.sep + rest + os.sep
        if rest != text and plain:
            return rest  # no `.`, `..` or empty parts: what relpath would give
        return os.path.relpath(path, self.home)

    def absolute(self, stored: str) -> Path:
        return self.home / stored

    def table_dir(self, table: str) -> Path:
        return self.parquet / table
