"""Printing query results: an aligned text table, CSV, or JSON."""

from __future__ import annotations

import csv
import io
import json
from datetime import date, datetime
from decimal import Decimal

MAX_CELL = 60  # a table cell longer than this is cut, with an ellipsis


def _plain(value: object) -> object:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, list | dict):
        text = json.dumps(value, ensure_ascii=False, default=str)
    else:
        text = str(_plain(value))
    text = text.replace("\n", "\\n")
    return text if len(text) <= MAX_CELL else text[: MAX_CELL - 1] + "…"


def render(table, fmt: str = "table") -> str:
    """`table` is a pyarrow Table."""
    names = table.column_names
    rows = table.to_pylist()
    if fmt == "json":
        return (
            json.dumps(
                [{k: _plain(v) for k, v in row.items()} for row in rows],
                ensure_ascii=False,
                default=str,
                indent=1,
            )
            + "\n"
        )
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(names)
        for row in rows:
            writer.writerow(["" if row[n] is None else _plain(row[n]) for n in names])
        return out.getvalue()
    cells = [[_cell(row[n]) for n in names] for row in rows]
    widths = [max([len(n)] + [len(c[i]) for c in cells]) for i, n in enumerate(names)]
    lines = [
        "  ".join(n.ljust(w) for n, w in zip(names, widths, strict=True)).rstrip(),
        "  ".join("-" * w for w in widths),
    ]
    lines += [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]
    lines.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(lines) + "\n"
