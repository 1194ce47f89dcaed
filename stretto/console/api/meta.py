"""The console as a whole under /api: whether it answers, what it is, the overview's figures,
its settings, the stream of its events, and logging out."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from stretto.console import adapter
from stretto.console.api.request import json_body, query_threshold
from stretto.console.endpoint import console_of


def health(request: Request) -> Response:
    return JSONResponse({"ok": True, "version": adapter.VERSION})


def meta(request: Request) -> Response:
    return JSONResponse(console_of(request).meta())


def overview(request: Request) -> Response:
    console = console_of(request)
    settings = console.settings()
    threshold = query_threshold(request, console)
    return JSONResponse(console.overview.figures(threshold, (settings["beta"], settings["delta"])))


def get_settings(request: Request) -> Response:
    return JSONResponse(console_of(request).settings())


async def put_settings(request: Request) -> Response:
    body = await json_body(request)
    return JSONResponse(console_of(request).save_settings(body))


def events(request: Request) -> Response:
    stream = console_of(request).events.stream()
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(stream, media_type="text/event-stream", headers=headers)


def logout(request: Request) -> Response:
    response = JSONResponse({"ok": True})
    response.delete_cookie("stretto_console", path="/")
    return response
