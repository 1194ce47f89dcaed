"""A flow's life on its page: its committed versions (`stretto flow-log`), the report of the
flow staged beside it (`stretto stage`), and the drift series of its domain's sessions
(`stretto drift`). One endpoint each, through the adapter."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from stretto.console import adapter
from stretto.console.endpoint import NAME, Endpoint, console_of, flow_entry
from stretto.console.state import ApiError


def versions(request: Request) -> Response:
    entry = flow_entry(request, valid=False)
    try:
        entries = adapter.flow_versions(entry.path)
    except ValueError as exc:
        raise ApiError(422, console_of(request).catalog.shown(str(exc))) from None
    return JSONResponse(
        {
            "flow": entry.name,
            "versions": entries,
            "served": entries[-1]["version"] if entries else None,
        }
    )


def staged(request: Request) -> Response:
    console = console_of(request)
    entry = flow_entry(request)
    try:
        report = adapter.stage_report(entry.path)
    except ValueError as exc:  # a staged flow or scores that cannot be read
        raise ApiError(422, console.catalog.shown(str(exc))) from None
    if report is not None:
        report["staged"] = console.catalog.shown(report["staged"])
    return JSONResponse({"flow": entry.name, "report": report})


def drift(request: Request) -> Response:
    console = console_of(request)
    entry = flow_entry(request)
    answer = console.drifts.series(entry)
    # 202 while it is computed in the background: ask again for its progress, then the series
    return JSONResponse(answer, status_code=202 if answer["state"] == "computing" else 200)


ENDPOINTS = [
    Endpoint(
        "GET",
        "/api/flows/{name}/versions",
        versions,
        "The flow's committed versions and rollbacks, oldest first (stretto flow-log).",
        [NAME],
        (404, 422),
    ),
    Endpoint(
        "GET",
        "/api/flows/{name}/staged",
        staged,
        "The report of the flow staged beside it (stretto stage), or null when none is.",
        [NAME],
        (404, 422),
    ),
    Endpoint(
        "GET",
        "/api/flows/{name}/drift",
        drift,
        "The drift series of the flow's domain's sessions in start order (stretto drift), "
        "`state` done; or 202 and its progress (`state` computing, `step`, `done` of `total`) "
        "while it is computed in the background: ask again; or `state` too_large (more calls "
        "than --drift-max-calls) or failed, with `error`.",
        [NAME],
        (404, 422),
    ),
]
