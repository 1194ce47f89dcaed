"""The warehouse's SQL, one file per query family; each file is a list of `-- name: x`
sections run in order.

The values the SQL shares with the Python side (stretto.vocabulary: the step names, the
session-log versions, the same-turn window) are never written in a file as literals: a file
says `{RESPOND}`, and `statements` puts the value's SQL literal in its place (VOCABULARY), the
one place this is done. An unknown `{NAME}` is an error, not left in the SQL. (Lower-case
placeholders such as `{files}` are filled by the caller, per run.)
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from stretto.vocabulary import (
    LOG_VERSIONS_READ,
    LOG_VERSIONS_SAID,
    RESPOND,
    RESPOND_END,
    SAME_TURN_MS,
)

SQL_DIR = Path(__file__).parent
PLACEHOLDER = re.compile(r"\{([A-Z][A-Z_]*)\}")


def _text(value: str) -> str:
    """`value` as a SQL string literal."""
    return "'" + value.replace("'", "''") + "'"


# What each `{NAME}` of a SQL file stands for, as SQL.
VOCABULARY = {
    "RESPOND": _text(RESPOND),
    "RESPOND_END": _text(RESPOND_END),
    "SAME_TURN_MS": str(int(SAME_TURN_MS)),
    # the header's `stretto_mcp_log` read as text (`->>`): `'1', '2'`, for an IN list
    "LOG_VERSIONS_READ": ", ".join(_text(str(v)) for v in LOG_VERSIONS_READ),
    # ... and said in an error, as stretto.logs.sessionlog says it: `'1 and 2'`
    "LOG_VERSIONS_SAID": _text(LOG_VERSIONS_SAID),
}


def with_vocabulary(sql: str) -> str:
    """`sql` with each `{NAME}` replaced by its VOCABULARY value (KeyError for an unknown one)."""
    return PLACEHOLDER.sub(lambda m: VOCABULARY[m[1]], sql)


@cache
def statements(name: str) -> list[tuple[str, str]]:
    """The `-- name: x` sections of warehouse/sql/<name>.sql, in order, the vocabulary in place."""
    text = with_vocabulary((SQL_DIR / f"{name}.sql").read_text())
    parts = re.split(r"^-- name: (\w+)\s*$", text, flags=re.MULTILINE)
    return [(parts[i], parts[i + 1].strip().rstrip(";")) for i in range(1, len(parts), 2)]
