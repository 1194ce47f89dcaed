"""Where the warehouse's committed data lives — the Parquet data files and the registry — and
how it is read and written there: under HOME/warehouse/ (the default), or at an object-store
URL, `s3://bucket/prefix` (`Layout.url`: a command's `--warehouse URL`, else
$STRETTO_WAREHOUSE; warehouse.layout.warehouse_url is the one rule).

An object store is read and written through pyarrow's S3 filesystem (DuckDB's httpfs
extension is not needed): data files are uploaded whole (an object appears complete or not
at all), the registry file last, so a commit stays one atomic write; DuckDB reads the files
as pyarrow datasets registered on its connection, which take the projections and filters
DuckDB pushes down. What must be one machine's stays local: staging, the ingest lock,
stretto.duckdb, the learn's part counts.

The endpoint is $AWS_ENDPOINT_URL_S3, else $AWS_ENDPOINT_URL (else AWS's own); the region
$AWS_REGION, else $AWS_DEFAULT_REGION. Credentials come from the environment (the AWS SDK's
chain: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, or a profile or role),
never from the URL; no message stretto writes holds them.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from warehouse.files import move_in, write_atomic
from warehouse.layout import WAREHOUSE_ENV, Layout

# The Hive partition keys as the table folders spell them (domain=<d>/day=<YYYY-MM-DD>).
PARTITIONING = pa.schema([("domain", pa.string()), ("day", pa.date32())])
UPLOAD_CHUNK = 8 * 1024 * 1024
# Environment variables whose values never appear in a message.
SECRETS = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ACCESS_KEY_ID")


# (url, name) -> the registry file's rows, read once per process (RemoteData.read_registry).
_REGISTRY_FILES: dict[tuple[str, str], pa.Table] = {}


class StorageError(RuntimeError):
    """The object store cannot be used (a bad URL, no such bucket, no answer): one line."""


def sql_text(text: str) -> str:
    """`text` as a SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def scrubbed(text: str) -> str:
    """`text` on one line, without any credential the environment holds."""
    for name in SECRETS:
        value = os.environ.get(name)
        if value and len(value) >= 4:
            text = text.replace(value, "***")
    return " ".join(text.split())


class LocalData:
    """The committed data under HOME/warehouse/ (paths stored relative to the home): written
    by rename after an fsync, read by DuckDB's own Parquet reader."""

    remote = False

    def __init__(self, layout: Layout) -> None:
        self.layout = layout

    @property
    def where(self) -> str:
        return str(self.layout.warehouse)

    def registry_names(self) -> list[str]:
        folder = self.layout.registry
        return [p.name for p in folder.iterdir()] if folder.is_dir() else []

    def read_registry(self, name: str, schema: pa.Schema) -> pa.Table:
        return pq.read_table(self.layout.registry / name, schema=schema)

    def registry_version(self, name: str) -> tuple[int, ...]:
        """What tells a registry file from another of the same name (one written again)."""
        found = (self.layout.registry / name).stat()
        return found.st_ino, found.st_size, found.st_mtime_ns

    def write_registry(self, name: str, table: pa.Table) -> None:
        write_atomic(self.layout.registry / name, lambda temp: pq.write_table(table, temp))

    def stored(self, table: str, relative: str) -> str:
        """How the registry names a data file of `table` at `relative` in its folder."""
        return self.layout.relative(self.layout.table_dir(table) / relative)

    def put(self, files: Sequence[tuple[Path, str]]) -> None:
        """Move finished local files (fsynced) to their stored places."""
        move_in([(source, self.layout.absolute(stored)) for source, stored in files])

    def exists(self, stored: str) -> bool:
        return self.layout.absolute(stored).exists()

    def delete(self, stored: str) -> None:
        self.layout.absolute(stored).unlink(missing_ok=True)

    def delete_named(self, prefix: str) -> None:
        """Delete the data files whose name starts with `prefix` (a crashed run's)."""
        for folder, _, names in os.walk(self.layout.parquet):
            for name in names:
                if name.startswith(prefix):
                    os.unlink(os.path.join(folder, name))

    def scan(
        self, con, name: str, table: str, files: list[tuple[str, int | None]], confined: bool
    ) -> tuple[str, set[str]]:
        """A FROM clause reading `files` (stored paths and sizes, oldest first) of `table` with
        their partition keys, on `con` (for the view `name`), and the columns the newest file
        has (it has every column any has). DuckDB's own Parquet reader opens them, unless
        `confined`: then a pyarrow dataset does (read-only by nature), so a connection that
        may open no file at all — the user's SQL — still reads its views."""
        if confined:
            folder = f"{self.layout.relative(self.layout.table_dir(table))}/"
            at = [(str(self.layout.absolute(f)), f.removeprefix(folder), n) for f, n in files]
            return dataset_scan(con, name, pafs.LocalFileSystem(), at)
        paths = [str(self.layout.absolute(f)) for f, _ in files]
        source = (
            f"read_parquet([{', '.join(sql_text(p) for p in paths)}], "
            "hive_partitioning = true, union_by_name = true)"
        )
        newest = f"read_parquet({sql_text(paths[-1])}, hive_partitioning = true)"
        present = {row[0] for row in con.execute(f"DESCRIBE SELECT * FROM {newest}").fetchall()}
        return source, present


class RemoteData:
    """The committed data at an object-store URL (paths stored relative to it)."""

    remote = True

    def __init__(self, url: str) -> None:
        self.url = url
        self.fs, self.base = _open(url, *_endpoint())

    @property
    def where(self) -> str:
        return self.url

    def _at(self, stored: str) -> str:
        return f"{self.base}/{stored}"

    @contextmanager
    def _errors(self, doing: str) -> Iterator[None]:
        try:
            yield
        except OSError as exc:
            raise StorageError(f"{self.url}: {doing}: {scrubbed(str(exc))}") from None

    def registry_names(self) -> list[str]:
        with self._errors("cannot list the registry"):
            found = self.fs.get_file_info(
                pafs.FileSelector(self._at("registry"), allow_not_found=True)
            )
        return [info.base_name for info in found if info.type == pafs.FileType.File]

    def read_registry(self, name: str, schema: pa.Schema) -> pa.Table:
        # a registry file is written once and never changed: read each once per process
        key = (self.url, name)
        if key not in _REGISTRY_FILES:
            with self._errors(f"cannot read registry/{name}"):
                _REGISTRY_FILES[key] = pq.read_table(
                    self._at(f"registry/{name}"), schema=schema, filesystem=self.fs
                )
        return _REGISTRY_FILES[key]

    def registry_version(self, name: str) -> tuple[int, ...]:
        return ()  # written once, never changed

    def write_registry(self, name: str, table: pa.Table) -> None:
        # one PUT: the object is there whole once the stream closes, or not at all
        with self._errors(f"cannot write registry/{name}"):
            with self.fs.open_output_stream(self._at(f"registry/{name}")) as out:
                pq.write_table(table, out)

    def stored(self, table: str, relative: str) -> str:
        return f"parquet/{table}/{relative}"

    def put(self, files: Sequence[tuple[Path, str]]) -> None:
        """Upload finished local files, then remove them (a stream, not pyarrow's copy_files,
        which would also write an empty marker object per folder)."""
        with self._errors("cannot upload a data file"):
            for source, stored in files:
                with source.open("rb") as data, self.fs.open_output_stream(self._at(stored)) as out:
                    shutil.copyfileobj(data, out, UPLOAD_CHUNK)
                source.unlink()

    def exists(self, stored: str) -> bool:
        with self._errors(f"cannot look at {stored}"):
            return self.fs.get_file_info(self._at(stored)).type != pafs.FileType.NotFound

    def delete(self, stored: str) -> None:
        if self.exists(stored):
            with self._errors(f"cannot delete {stored}"):
                self.fs.delete_file(self._at(stored))

    def delete_named(self, prefix: str) -> None:
        with self._errors("cannot list the data files"):
            found = self.fs.get_file_info(
                pafs.FileSelector(self._at("parquet"), recursive=True, allow_not_found=True)
            )
            for info in found:
                if info.type == pafs.FileType.File and info.base_name.startswith(prefix):
                    self.fs.delete_file(info.path)

    def scan(
        self, con, name: str, table: str, files: list[tuple[str, int | None]], confined: bool
    ) -> tuple[str, set[str]]:
        """`files` as one pyarrow dataset registered on `con` (`dataset_scan`; always, so a
        connection is `confined` whatever it asks). The registry's sizes spare a request per
        file (a file without one is asked for its size)."""
        folder = f"parquet/{table}/"
        at = [(self._at(path), path.removeprefix(folder), size) for path, size in files]
        with self._errors(f"cannot read the {table} table's files"):
            return dataset_scan(con, name, self.fs, at)


def dataset_scan(
    con, name: str, fs: pafs.FileSystem, files: list[tuple[str, str, int | None]]
) -> tuple[str, set[str]]:
    """`files` (path on `fs`, path under the table's folder, size if known; oldest first) as
    one pyarrow dataset registered on `con` as `<name>_files` (the schema the newest file's,
    with the partition keys; older files lack what was added since: null there): its name
    and columns. DuckDB reads it through pyarrow, which takes the projections and filters it
    pushes down and never writes."""
    # here, not at the top: pyarrow.dataset imports pandas (~0.2 s), which the ingest's
    # workers and a local warehouse's own readers never need
    import pyarrow.dataset as ds

    parquet = ds.ParquetFileFormat()
    hive = ds.partitioning(PARTITIONING, flavor="hive")
    fragments = [
        parquet.make_fragment(
            path, filesystem=fs, partition_expression=hive.parse("/" + inside), file_size=size
        )
        for path, inside, size in files
    ]
    schema = fragments[-1].physical_schema
    for key in PARTITIONING.names:
        if key not in schema.names:
            schema = schema.append(PARTITIONING.field(key))
    con.register(f"{name}_files", ds.FileSystemDataset(fragments, schema, parquet, fs))
    return f"{name}_files", set(schema.names)


def _endpoint() -> tuple[str | None, str | None]:
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    return endpoint or None, region or None


def _bucket_and_prefix(url: str) -> tuple[str, str]:
    """`s3://bucket/prefix` split; anything else refused (never echoing the URL, which may
    hold a credential)."""
    parts = urlsplit(url)
    if parts.scheme != "s3":
        raise StorageError(
            f"{WAREHOUSE_ENV} / --warehouse: want s3://bucket/prefix, not a "
            f"{parts.scheme or 'local'} location; leave it unset for HOME/warehouse"
        )
    if "@" in parts.netloc or parts.query or parts.fragment:
        raise StorageError(
            f"{WAREHOUSE_ENV} / --warehouse: credentials or options in the URL are refused; "
            "give s3://bucket/prefix and the credentials in AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY"
        )
    if not parts.netloc:
        raise StorageError(f"{WAREHOUSE_ENV} / --warehouse: no bucket in {url}")
    return parts.netloc, parts.path.strip("/")


@cache
def _open(url: str, endpoint: str | None, region: str | None) -> tuple[pafs.FileSystem, str]:
    """The filesystem and `bucket/prefix` of `url`, once its bucket is known to exist (cached
    per process: a failure is not)."""
    bucket, prefix = _bucket_and_prefix(url)
    options: dict = {
        "connect_timeout": 5,
        "request_timeout": 60,
        "retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=3),
    }
    if endpoint:
        options["endpoint_override"] = endpoint
    if region:
        options["region"] = region
    where = f"the object store at {endpoint}" if endpoint else "the object store"
    try:
        fs = pafs.S3FileSystem(**options)
        found = fs.get_file_info(bucket)
    except (OSError, ValueError) as exc:
        raise StorageError(f"{url}: cannot reach {where}: {scrubbed(str(exc))}") from None
    if found.type == pafs.FileType.NotFound:
        raise StorageError(f"{url}: the bucket {bucket} does not exist in {where}")
    return fs, f"{bucket}/{prefix}" if prefix else bucket


def committed(layout: Layout) -> LocalData | RemoteData:
    """Where `layout`'s committed data lives."""
    return RemoteData(layout.url) if layout.url else LocalData(layout)
