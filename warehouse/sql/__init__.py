"""The warehouse's SQL, one file per query family; each file is a list of `-- name: x`
sections run in order."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

SQL_DIR = Path(__file__).parent


@cache
def statements(name: str) -> list[tuple[str, str]]:
    """The `-- name: x` sections of warehouse/sql/<name>.sql, in order."""
    text = (SQL_DIR / f"{name}.sql").read_text()
    parts = re.split(r"^-- name: (\w+)\s*$", text, flags=re.MULTILINE)
    return [(parts[i], parts[i + 1].strip().rstrip(";")) for i in range(1, len(parts), 2)]
