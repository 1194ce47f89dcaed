"""What the API's modules share: how an endpoint is declared
(stretto.console.api.endpoints.ENDPOINTS
and the flow lifecycle's, stretto.console.api.lifeview.ENDPOINTS), and how a handler finds the
console and a flow."""

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
