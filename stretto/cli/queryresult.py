"""A query's result (a pyarrow Table) printed through polars: an aligned text table (long
cells cut), CSV (nested values as JSON) or JSON (null for NaN and infinities).

Only `stretto sql` loads this module: polars and pyarrow take ~0.5 s to import."""

from __future__ import annotations

import json
from typing import Any

import polars as pl
import pyarrow as pa

from stretto.cli.options import aligned

MAX_CELL = 60  # a table cell longer than this is cut, with an ellipsis


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


def _cells(frame: pl.DataFrame) -> pl.DataFrame:
    """A table's cells: every value as text (nested ones as JSON), nulls empty, newlines shown
    as \\n, cells longer than MAX_CELL cut with an ellipsis."""
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
    return [
        pl.col(name).cast(_plain_type(dtype))
        if dtype != pl.Binary
        else pl.col(name).map_elements(_bytes_text, return_dtype=pl.String)
        for name, dtype in frame.schema.items()
    ]


def _plain_type(dtype: Any) -> pl.DataType:
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
