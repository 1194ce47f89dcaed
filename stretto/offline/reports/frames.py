"""The offline reports' tables as polars DataFrames written to Parquet (audit, replay, search).

Every table has a fixed schema, so an empty table keeps its columns and a column's type does
not depend on the rows it happened to get. polars is imported inside the functions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from stretto.home import private_dirs, write_private

# Column types by name, as polars dtypes' names (resolved on use, so this module is cheap):
# "String", ["String"] (a list of), {"field": "Float64", ...} (a struct).
Schema = Mapping[str, object]

RELIABILITY: Schema = {
    "from": "Float64",
    "to": "Float64",
    "count": "Int64",
    "mean_score": "Float64",
    "used": "Float64",
}


def _dtype(pl, spec):
    if isinstance(spec, str):
        return getattr(pl, spec)
    if isinstance(spec, list):  # [inner]: a list of inner
        return pl.List(_dtype(pl, spec[0]))
    if isinstance(spec, dict):  # {field: type}: a struct
        return pl.Struct({name: _dtype(pl, inner) for name, inner in spec.items()})
    raise TypeError(f"not a column type: {spec!r}")


def frame(rows: Sequence[dict], schema: Schema):
    """The rows as a DataFrame with exactly `schema`'s columns, in its order."""
    import polars as pl  # heavy: only a writer needs polars

    dtypes = {name: _dtype(pl, spec) for name, spec in schema.items()}
    return pl.DataFrame([{name: row.get(name) for name in dtypes} for row in rows], schema=dtypes)


def write_tables(tables: Mapping[str, tuple[Sequence[dict], Schema]], folder: Path) -> list[Path]:
    """Each table (name -> rows, schema) as `<folder>/<name>.parquet`, private (0600, a new
    folder 0700: the tables hold tool arguments); the paths written."""
    private_dirs(folder, own=False)
    written = []
    for name, (rows, schema) in tables.items():
        written.append(write_private(folder / f"{name}.parquet", frame(rows, schema).write_parquet))
    return written
