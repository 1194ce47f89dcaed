"""What the API's modules share: how an endpoint is declared (stretto.console.api.endpoints'
ENDPOINTS, and those of a flow's life and of a session's time, stretto.console.api.lifeview
and sessionview), and how a handler finds the console, a flow and a session."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from starlette.requests import Request

from stretto.console.state import ApiError, Console

NAME = ("name", "path", "the flow: its path in the data directory")


@dataclass
class Endpoint:
    method: str
    path: str
    handler: Callable
    summary: str
    params: list[tuple[str, str, str]] = field(default_factory=list)  # name, in, description
    errors: tuple[int, ...] = ()
    body: str | None = None  # what the JSON body holds, for mutations
    content: str = "application/json"
    public: bool = False


def console_of(request: Request) -> Console:
    return request.app.state.console


def flow_entry(request: Request, name: str | None = None, valid: bool = True):
    """The flow named by the path (or `name`): 404 when there is none, 422 when it is not a
    valid flow (unless `valid` is False)."""
    name = name if name is not None else request.path_params["name"]
    if not name:
        raise ApiError(400, "give a flow by its path in the data directory")
    entry = console_of(request).catalog.flow(name)
    if entry is None:
        raise ApiError(404, f"no flow {name!r}")
    if valid and entry.flow is None:
        raise ApiError(422, entry.error or "an invalid flow")
    return entry


def session_entry(request: Request, readable: bool = False):
    """The session named by the path's `key`: 404 when there is none, 422 when its log cannot
    be read (with `readable`)."""
    key = request.path_params["key"]
    entry = console_of(request).catalog.session(key)
    if entry is None:
        raise ApiError(404, f"no session {key!r}")
    if readable and entry.summary.get("unreadable"):
        raise ApiError(422, entry.summary["problem"])
    return entry
