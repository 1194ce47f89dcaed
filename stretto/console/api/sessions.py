"""The sessions under /api/sessions: the list (filtered, searched, sorted, a page at a time),
one session's summary, a page of its timeline, its log as on disk, and moving it to the
trash. (A session's waterfall and tools are stretto.console.api.sessionview's.)"""

from __future__ import annotations

import time
from pathlib import Path

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from stretto.console import adapter, files
from stretto.console.api.request import PAGE_LIMIT, query_int
from stretto.console.endpoint import console_of, session_entry
from stretto.console.state import ApiError

RAW_CHUNK = 1 << 16

SESSION_FILTERS = ("domain", "day", "agent_model", "server", "mode")
# what the sessions' table sorts by: the column's name -> the row's field
SESSION_SORTS = {
    "session": "id",
    "started": "started_unix_ms",
    "domain": "domain",
    "agent_model": "agent_model",
    "server": "server",
    "mode": "mode",
    "calls": "calls",
    "lookups": "lookups",
    "turns": "turns",
    "problem": "problem",
}


def _sorted_rows(request: Request, rows: list[dict]) -> list[dict]:
    """The rows by `sort` (a column) in `order` (asc or desc); rows without the value last.
    Without `sort`: as they are, newest first."""
    column = request.query_params.get("sort")
    if not column:
        return rows
    field = SESSION_SORTS.get(column)
    if field is None:
        raise ApiError(400, f"sort {column!r}: expected one of {', '.join(SESSION_SORTS)}")
    order = request.query_params.get("order") or "asc"
    if order not in ("asc", "desc"):
        raise ApiError(400, f"order {order!r}: expected asc or desc")
    present = [r for r in rows if r.get(field) is not None]
    missing = [r for r in rows if r.get(field) is None]
    present.sort(key=lambda r: (r[field], r["key"]), reverse=order == "desc")
    return present + missing


def _day(summary: dict) -> str | None:
    started = summary.get("started_unix_ms")
    return None if started is None else time.strftime("%Y-%m-%d", time.gmtime(started / 1000))


def _session_row(entry) -> dict:
    return {
        "key": entry.key,
        "path": entry.rel,
        "copies": entry.copies,
        "day": _day(entry.summary),
    } | entry.summary


def sessions(request: Request) -> Response:
    console = console_of(request)
    wanted = {k: request.query_params.get(k) for k in SESSION_FILTERS}
    wanted = {k: v for k, v in wanted.items() if v}
    needle = (request.query_params.get("q") or "").lower()
    offset = query_int(request, "offset", 0)
    limit = query_int(request, "limit", 50, 1, PAGE_LIMIT)
    rows = [_session_row(e) for e in console.catalog.sessions()]
    every = rows
    rows = [r for r in rows if all(str(r.get(k)) == v for k, v in wanted.items())]
    if needle:
        rows = [r for r in rows if needle in _haystack(r)]
    rows = _sorted_rows(request, rows)
    facets = {
        k: sorted({str(r.get(k)) for r in every if r.get(k) is not None}) for k in SESSION_FILTERS
    }
    return JSONResponse(
        {
            "total": len(rows),
            "offset": offset,
            "limit": limit,
            "items": rows[offset : offset + limit],
            "facets": facets,
        }
    )


def _haystack(row: dict) -> str:
    parts = [row["key"], row["path"], *row["copies"]]
    parts += [
        str(row.get(k) or "")
        for k in ("domain", "agent_model", "server", "mode", "task_id", "problem")
    ]
    return " ".join(parts).lower()


def session(request: Request) -> Response:
    entry = session_entry(request)
    return JSONResponse(_session_row(entry))


def timeline(request: Request) -> Response:
    console = console_of(request)
    entry = session_entry(request, readable=True)
    offset = query_int(request, "offset", 0)
    limit = query_int(request, "limit", 100, 1, PAGE_LIMIT)
    index = console.catalog.index(entry.path)
    items = index.items[offset : offset + limit]
    following = offset + limit if offset + limit < len(index.items) else None
    return JSONResponse(
        {
            "total": len(index.items),
            "offset": offset,
            "limit": limit,
            "next": following,
            "items": items,
            "problems": [console.catalog.shown(problem) for problem in index.problems],
        }
    )


def raw(request: Request) -> Response:
    """The log as it is on disk, streamed; `from` and `lines` pick lines (1-based)."""
    console = console_of(request)
    entry = session_entry(request)
    start = query_int(request, "from", 0)
    count = query_int(request, "lines", 0)
    path = entry.path
    if not start and not count:
        return StreamingResponse(_chunks(path, 0, None), media_type="application/x-ndjson")
    index = console.catalog.index(path) if not entry.summary.get("unreadable") else None
    if index is None:
        raise ApiError(422, entry.summary["problem"])
    start = max(start, 1)
    if start > len(index.offsets):
        raise ApiError(404, f"{entry.rel} has {len(index.offsets)} lines; no line {start}")
    end_line = start + (count or len(index.offsets)) - 1
    begin = index.offsets[start - 1]
    end = index.offsets[end_line] if end_line < len(index.offsets) else None
    return StreamingResponse(_chunks(path, begin, end), media_type="application/x-ndjson")


def _chunks(path: Path, begin: int, end: int | None):
    with path.open("rb") as f:
        f.seek(begin)
        left = None if end is None else end - begin
        while left is None or left > 0:
            chunk = f.read(RAW_CHUNK if left is None else min(RAW_CHUNK, left))
            if not chunk:
                return
            if left is not None:
                left -= len(chunk)
            yield chunk


def delete_session(request: Request) -> Response:
    console = console_of(request)
    entry = session_entry(request)
    paths = [console.data / entry.rel, *(console.data / c for c in entry.copies)]
    moving = []
    for path in paths:
        moving.append(path)
        for suffix in adapter.SIDE_FILE_SUFFIXES:
            beside = path.with_suffix(suffix)
            if beside.exists():
                moving.append(beside)
    folder = files.move_to_trash(console.data, moving)
    console.changed("sessions")
    return JSONResponse(
        {
            "ok": True,
            "trash": str(folder.relative_to(console.data)),
            "moved": [str(p.relative_to(console.data)) for p in moving],
        }
    )
