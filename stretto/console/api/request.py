"""What every handler of the API shares: reading its request (a whole number or a threshold
from the query, a JSON body) and answering its errors as JSON (`guarded`, which the app wraps
each route's handler in)."""

from __future__ import annotations

import asyncio
import functools
import json
import sys
import traceback
from collections.abc import Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from stretto.console.state import ApiError, Console
from stretto.console.views import flowview

PAGE_LIMIT = 200  # items on one page of a list or a timeline, at most


def query_int(
    request: Request, name: str, default: int, low: int = 0, high: int | None = None
) -> int:
    """The query's whole number `name`, from `low` to `high` (no top when None); `default`
    when it is not given. 400 when it is not a whole number or out of bounds."""
    text = request.query_params.get(name)
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        raise ApiError(400, f"{name} {text!r}: expected a whole number") from None
    if value < low or (high is not None and value > high):
        top = f" to {high}" if high is not None else " or more"
        raise ApiError(400, f"{name} {value}: expected {low}{top}")
    return value


def query_threshold(
    request: Request, console: Console, name: str = "threshold", flow: dict | None = None
) -> float:
    """The query's threshold; when not given, the flow's own (a calibrated flow's break-even,
    `serving`), else the settings'. 400 when it is not a number from 0 to 1."""
    own = (flow or {}).get("serving")
    default = own["threshold"] if own else console.settings()["threshold"]
    try:
        return flowview.parse_threshold(request.query_params.get(name), default)
    except ValueError as exc:
        raise ApiError(400, str(exc)) from None


async def json_body(request: Request) -> dict:
    """The request's body as a JSON object; {} when it is empty. 400 when it is not JSON or
    not an object."""
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise ApiError(400, f"the body is not JSON ({exc})") from None
    if not isinstance(body, dict):
        raise ApiError(400, "the body must be a JSON object")
    return body


def guarded(handler: Callable) -> Callable:
    """The handler with every error as `{"error": msg}`: ApiError with its status, anything
    unexpected as 500 (with the traceback on the console's terminal)."""

    def failed(exc: Exception) -> Response:
        if isinstance(exc, ApiError):
            return JSONResponse({"error": exc.message}, status_code=exc.status)
        traceback.print_exc(file=sys.stderr)
        return JSONResponse(
            {"error": f"internal error: {type(exc).__name__}: {exc}"}, status_code=500
        )

    if asyncio.iscoroutinefunction(handler):

        @functools.wraps(handler)
        async def run_async(request: Request) -> Response:
            try:
                return await handler(request)
            except Exception as exc:  # noqa: BLE001 - every error is answered as JSON
                return failed(exc)

        return run_async

    @functools.wraps(handler)
    def run(request: Request) -> Response:
        try:
            return handler(request)
        except Exception as exc:  # noqa: BLE001 - every error is answered as JSON
            return failed(exc)

    return run
