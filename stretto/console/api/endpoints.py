"""The JSON API's routes under /api: each endpoint is declared once, in ENDPOINTS, which the
app makes its routes from (each handler wrapped in stretto.console.api.request.guarded) and the
OpenAPI description is made from (stretto.console.api.openapi; served by `openapi`, here). The
handlers live by resource: meta (the console, its settings and events), sessions, flows and
jobs, with a session's time and tools (sessionview) and a flow's life (lifeview)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from stretto.console.api import lifeview, sessionview
from stretto.console.api.flows import delete_flow, flow, flow_diff, flow_raw, flow_replay, flows
from stretto.console.api.jobs import (
    cancel_job,
    job,
    job_artifact,
    job_output,
    job_preview,
    jobs,
    start_job,
)
from stretto.console.api.meta import (
    events,
    get_settings,
    health,
    logout,
    meta,
    overview,
    put_settings,
)
from stretto.console.api.openapi import describe
from stretto.console.api.request import PAGE_LIMIT
from stretto.console.api.sessions import (
    SESSION_SORTS,
    delete_session,
    raw,
    session,
    sessions,
    timeline,
)
from stretto.console.endpoint import NAME, Endpoint
from stretto.console.jobs import KINDS


def openapi(request: Request) -> Response:
    return JSONResponse(describe(ENDPOINTS))


KEY = sessionview.KEY  # a session named in the path, as its page's endpoints name it
JOB = ("id", "path", "the job's id")
THRESHOLD = (
    "threshold",
    "query",
    "the served threshold, 0 to 1 (default: the flow's own when it carries one, else the "
    "settings')",
)
PAGING = [
    ("offset", "query", "skip this many"),
    ("limit", "query", f"at most this many (≤ {PAGE_LIMIT})"),
]

ENDPOINTS = [
    Endpoint(
        "GET", "/api/health", health, "Whether the console answers (no token needed).", public=True
    ),
    Endpoint(
        "GET",
        "/api/meta",
        meta,
        "The console: version, data directory, auth, read-only, what is found.",
    ),
    Endpoint(
        "GET",
        "/api/overview",
        overview,
        "Sessions, calls, lookups made and used, turns saved: totals, by domain and by day.",
        [THRESHOLD],
        (400,),
    ),
    Endpoint(
        "GET",
        "/api/sessions",
        sessions,
        "Sessions, newest first, filtered.",
        [
            ("domain", "query", "only this domain"),
            ("day", "query", "only sessions started that UTC day (YYYY-MM-DD)"),
            ("agent_model", "query", "only this agent model"),
            ("server", "query", "only this server"),
            ("mode", "query", "recorded, shadow or served"),
            ("q", "query", "text to find in the id, paths, domain, model, server"),
            ("sort", "query", f"sort by one of {', '.join(SESSION_SORTS)} (default: newest first)"),
            ("order", "query", "asc (the default) or desc"),
            *PAGING,
        ],
        (400,),
    ),
    Endpoint("GET", "/api/sessions/{key}", session, "One session's summary.", [KEY], (404,)),
    Endpoint(
        "GET",
        "/api/sessions/{key}/timeline",
        timeline,
        "A page of the session's timeline: calls, lookups, decisions, appended blocks, messages.",
        [KEY, *PAGING],
        (400, 404, 422),
    ),
    *sessionview.ENDPOINTS,
    Endpoint(
        "GET",
        "/api/sessions/{key}/raw",
        raw,
        "The log as on disk, streamed (all of it, or `lines` lines from line `from`).",
        [KEY, ("from", "query", "the first line (1-based)"), ("lines", "query", "how many lines")],
        (400, 404, 422),
        content="application/x-ndjson",
    ),
    Endpoint(
        "DELETE",
        "/api/sessions/{key}",
        delete_session,
        "Move the session's log, its copies and side logs to console/trash/<time>/.",
        [KEY],
        (403, 404),
    ),
    Endpoint("GET", "/api/flows", flows, "Every flow file in the data directory, valid or not."),
    Endpoint(
        "GET",
        "/api/flows/diff",
        flow_diff,
        "What changed between two flows; what needs review first.",
        [("from", "query", "the old flow"), ("to", "query", "the new flow"), THRESHOLD],
        (400, 404, 422),
    ),
    *lifeview.ENDPOINTS,  # before /api/flows/{name}: a flow's name holds slashes
    Endpoint(
        "GET",
        "/api/flows/{name}/replay",
        flow_replay,
        "Replay figures of the flow at a threshold on its domain's recorded sessions.",
        [NAME, THRESHOLD],
        (400, 404, 422),
    ),
    Endpoint("GET", "/api/flows/{name}/raw", flow_raw, "The flow file as it is.", [NAME], (404,)),
    Endpoint(
        "GET",
        "/api/flows/{name}",
        flow,
        "The flow at a threshold: sites, lookups, bindings, probabilities, graph, promotion.",
        [NAME, THRESHOLD],
        (400, 404, 422),
    ),
    Endpoint(
        "DELETE",
        "/api/flows/{name}",
        delete_flow,
        "Move the flow to console/trash/<time>/.",
        [NAME],
        (403, 404),
    ),
    Endpoint("GET", "/api/jobs", jobs, "Every job, newest first, and the one running."),
    Endpoint(
        "POST",
        "/api/jobs",
        start_job,
        "Start a job (one at a time).",
        errors=(400, 403, 404, 409, 422),
        body=f'{{"kind": "{"|".join(KINDS)}", "params": {{...}}}}',
    ),
    Endpoint(
        "GET",
        "/api/jobs/{id}",
        job,
        "One job: its state, command, writes and artifacts.",
        [JOB],
        (404,),
    ),
    Endpoint(
        "POST", "/api/jobs/{id}/cancel", cancel_job, "Stop a running job.", [JOB], (403, 404, 409)
    ),
    Endpoint(
        "GET",
        "/api/jobs/{id}/output",
        job_output,
        "What the job printed.",
        [JOB],
        (404,),
        content="text/plain",
    ),
    Endpoint(
        "GET",
        "/api/jobs/{id}/artifacts/{path}",
        job_artifact,
        "A file the job wrote (reports, tables, plots).",
        [JOB, ("path", "path", "the file, under the job's artifacts/")],
        (404,),
        content="application/octet-stream",
    ),
    Endpoint(
        "GET",
        "/api/jobs/{id}/preview/{path}",
        job_preview,
        "A report the job wrote rendered (Markdown as escaped HTML) or a table's first rows "
        "(Parquet).",
        [JOB, ("path", "path", "the file, under the job's artifacts/")],
        (404, 422),
    ),
    Endpoint("GET", "/api/settings", get_settings, "The console's settings."),
    Endpoint(
        "PUT",
        "/api/settings",
        put_settings,
        "Change settings (threshold, costs, Dagster UI address).",
        errors=(400, 403, 422),
        body='{"threshold": 0.3, "beta": 7, "delta": 3, "dagster_url": ""}',
    ),
    Endpoint(
        "GET",
        "/api/events",
        events,
        "Server-Sent Events: `changed`, `job`, and a ping every 15 s.",
        content="text/event-stream",
    ),
    Endpoint("POST", "/api/logout", logout, "Forget the cookie.", errors=(403,)),
    Endpoint("GET", "/api/openapi.json", openapi, "This description."),
]
