"""A session's time and tools on its page: a waterfall of its turns (when each began and
ended, its calls and their latency) and the server's tool list (`tools/list`: each tool's
kind from readOnlyHint, its description and input schema). One endpoint each."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from stretto.console.endpoint import Endpoint, console_of, session_entry

KEY = ("key", "path", "the session: its id (id@hash when two logs share an id)")


def turns_of(items: list[dict]) -> list[dict]:
    """The agent's turns in order: each with the span from its first call or reply to the
    last answer (ms since the session began), its calls and the flow's lookups after them."""
    turns: dict[int, dict] = {}
    current: dict | None = None
    for item in items:
        kind = item["kind"]
        if kind in ("call", "reply") and item.get("turn") is not None:
            current = turns.setdefault(
                item["turn"],
                {"turn": item["turn"], "start_ms": item["t_ms"], "end_ms": item["t_ms"]}
                | {"calls": 0, "lookups": 0, "latency_ms": 0},
            )
        if current is None or kind not in ("call", "lookup", "reply"):
            continue
        start = item.get("t_ms") or 0
        end = start + (item.get("latency_ms") or 0)
        current["start_ms"] = min(current["start_ms"], start)
        current["end_ms"] = max(current["end_ms"], end)
        if kind in ("call", "lookup"):
            current["calls" if kind == "call" else "lookups"] += 1
            current["latency_ms"] += item.get("latency_ms") or 0
    return sorted(turns.values(), key=lambda t: t["turn"])


def latency_of(items: list[dict], kind: str) -> dict:
    """How many items of a kind ("call": the agent's; "lookup": the proxy's own, made by the
    flow) were answered, and their median and longest latency in ms."""
    latencies = sorted(
        i["latency_ms"] for i in items if i["kind"] == kind and i.get("latency_ms") is not None
    )
    return {
        f"{kind}s": len(latencies),  # "calls" or "lookups"
        "median": latencies[len(latencies) // 2] if latencies else None,
        "max": latencies[-1] if latencies else None,
    }


def waterfall(request: Request) -> Response:
    console, entry = console_of(request), session_entry(request, readable=True)
    index = console.catalog.index(entry.path)
    turns = turns_of(index.items)
    return JSONResponse(
        {
            "started_unix_ms": entry.summary.get("started_unix_ms"),
            "duration_ms": entry.summary.get("duration_ms"),
            "turns": turns,
            # the agent's calls alone, as the page labels them; the lookups apart
            "latency_ms": latency_of(index.items, "call"),
            "lookup_latency_ms": latency_of(index.items, "lookup"),
        }
    )


def tools(request: Request) -> Response:
    console, entry = console_of(request), session_entry(request, readable=True)
    episode = console.catalog.episode(entry.path)
    items = [
        {
            "name": info.name,
            "kind": info.kind,
            "description": info.summary,
            "contract": info.contract,
            "input_schema": info.input_schema,
        }
        for info in sorted(episode.tools.values(), key=lambda i: i.name)
    ]
    return JSONResponse({"items": items})


ENDPOINTS = [
    Endpoint(
        "GET",
        "/api/sessions/{key}/waterfall",
        waterfall,
        "The session's turns in time: each one's start and end (ms since the session began), "
        "calls, lookups and their latency; the agent's calls' median and longest latency, and "
        "the lookups' apart.",
        [KEY],
        (404, 422),
    ),
    Endpoint(
        "GET",
        "/api/sessions/{key}/tools",
        tools,
        "The server's tools as its tools/list answered: kind (read, write or generic, from "
        "readOnlyHint), description, input schema.",
        [KEY],
        (404, 422),
    ),
]
