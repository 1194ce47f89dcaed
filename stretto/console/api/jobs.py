"""The jobs under /api/jobs: the list, starting one, one job, cancelling it, what it printed,
a file it wrote and a preview of one. The jobs themselves run in stretto.console.jobs; here a
JobError becomes the API's error with the same status."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response

from stretto.console.api.request import json_body
from stretto.console.endpoint import console_of
from stretto.console.jobs import KINDS_SAID, JobError
from stretto.console.state import ApiError
from stretto.console.views import artifactview


def _job_call(call):
    try:
        return call()
    except JobError as exc:
        raise ApiError(exc.status, str(exc)) from None


def jobs(request: Request) -> Response:
    return JSONResponse(
        {"items": console_of(request).jobs.all(), "running": console_of(request).jobs.running}
    )


async def start_job(request: Request) -> Response:
    console = console_of(request)
    body = await json_body(request)
    kind = body.get("kind")
    if not isinstance(kind, str):
        raise ApiError(422, f"field `kind`: one of {KINDS_SAID}")
    job = _job_call(lambda: console.jobs.start(kind, body.get("params") or {}))
    return JSONResponse(console.job_links(job), status_code=202)


def job(request: Request) -> Response:
    console = console_of(request)
    found = _job_call(lambda: console.jobs.get(request.path_params["id"]))
    return JSONResponse(console.job_links(found))


def cancel_job(request: Request) -> Response:
    console = console_of(request)
    return JSONResponse(_job_call(lambda: console.jobs.cancel(request.path_params["id"])))


def job_output(request: Request) -> Response:
    console = console_of(request)
    job_id = request.path_params["id"]
    _job_call(lambda: console.jobs.get(job_id))
    return Response(console.jobs.output(job_id), media_type="text/plain; charset=utf-8")


def job_artifact(request: Request) -> Response:
    console = console_of(request)
    path = _job_call(
        lambda: console.jobs.artifact(request.path_params["id"], request.path_params["path"])
    )
    return FileResponse(path)


def job_preview(request: Request) -> Response:
    console = console_of(request)
    path = _job_call(
        lambda: console.jobs.artifact(request.path_params["id"], request.path_params["path"])
    )
    try:
        return JSONResponse(artifactview.preview(path))
    except artifactview.NoPreview as exc:
        raise ApiError(422, str(exc)) from None
