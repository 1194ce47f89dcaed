"""The flows under /api/flows: the list, one flow at a threshold, its replay figures, the file
as it is, what changed between two flows, and moving one to the trash. (A flow's versions,
staged report and drift are stretto.console.api.lifeview's.)"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response

from stretto.console import files
from stretto.console.api.request import query_threshold
from stretto.console.endpoint import console_of, flow_entry
from stretto.console.state import ApiError
from stretto.console.views import flowview


def flows(request: Request) -> Response:
    return JSONResponse(
        {"items": [flowview.listing(e) for e in console_of(request).catalog.flows()]}
    )


def flow(request: Request) -> Response:
    console = console_of(request)
    entry = flow_entry(request)
    return JSONResponse(flowview.detail(entry, query_threshold(request, console, flow=entry.flow)))


def flow_replay(request: Request) -> Response:
    console = console_of(request)
    entry = flow_entry(request)
    settings = console.settings()
    threshold = query_threshold(request, console, flow=entry.flow)
    figures = console.replays.figures(entry, threshold, (settings["beta"], settings["delta"]))
    return JSONResponse(figures)


def flow_raw(request: Request) -> Response:
    entry = flow_entry(request, valid=False)
    return FileResponse(entry.path, media_type="application/json")


def flow_diff(request: Request) -> Response:
    console = console_of(request)
    old = request.query_params.get("from")
    new = request.query_params.get("to")
    if not old or not new:
        raise ApiError(400, "give both flows: ?from=OLD&to=NEW (their paths in the data directory)")
    return JSONResponse(
        flowview.diff(
            flow_entry(request, old), flow_entry(request, new), query_threshold(request, console)
        )
    )


def delete_flow(request: Request) -> Response:
    console = console_of(request)
    entry = flow_entry(request, valid=False)
    folder = files.move_to_trash(console.data, [entry.path])
    console.changed("flows")
    return JSONResponse(
        {"ok": True, "trash": str(folder.relative_to(console.data)), "moved": [entry.name]}
    )
