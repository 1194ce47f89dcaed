"""The ASGI app: the API's routes, the pages, the static files and the libraries from
node/node_modules, behind the auth rules:

- a token, from the cookie `stretto_console` (set by opening `/?token=…`) or an
  `Authorization: Bearer` header; else 401. `/api/health` and the static files need none.
- with `--no-auth` (loopback only) no token, but the Host must be localhost, 127.0.0.1 or
  [::1] (a page of another site cannot reach the console through DNS rebinding); else 403.
- every mutation (not GET or HEAD) also needs the header `X-Stretto-Console: 1`, which a
  cross-site form cannot send; else 403. With `--read-only` every mutation is refused (403).
"""

from __future__ import annotations

import hmac
from contextlib import asynccontextmanager
from http.cookies import SimpleCookie
from urllib.parse import parse_qs

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.responses import (
    FileResponse,
    HTMLResponse,
    JSONResponse,
    RedirectResponse,
    Response,
)
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from stretto.console.api.endpoints import ENDPOINTS
from stretto.console.api.request import guarded
from stretto.console.doctor import STATIC, vendor_files
from stretto.console.state import Console, Options

COOKIE = "stretto_console"
LOOPBACK_HOSTS = {"localhost", "127.0.0.1", "[::1]", "::1"}
SAFE_METHODS = {"GET", "HEAD", "OPTIONS"}
PAGES = [
    "/",
    "/sessions",
    "/sessions/{key}",
    "/flows",
    "/flows/{name:path}",
    "/jobs",
    "/jobs/{id}",
]
NOT_SIGNED_IN = """<!doctype html><meta charset="utf-8"><title>stretto console</title>
<body style="font-family: system-ui; margin: 3rem"><h1>stretto console</h1>
<p>{message}</p><p>Open the address <code>stretto-console</code> printed when it started
(it ends in <code>/?token=…</code>).</p></body>"""


class Auth:
    """Pure ASGI middleware (streams, such as the events, pass through untouched)."""

    def __init__(self, app, options: Options) -> None:
        self.app, self.options = app, options

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path, method = scope["path"], scope["method"]
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        public = path == "/api/health" or path.startswith(("/static/", "/vendor/"))
        is_api = path.startswith("/api/")
        token = self.options.token
        if token is None:
            host = host_name(headers.get("host", ""))
            if host not in LOOPBACK_HOSTS:
                return await self._refuse(scope, receive, send, 403, f"Host {host!r} not allowed")
        elif not public:
            query = parse_qs(scope.get("query_string", b"").decode())
            given = (query.get("token") or [None])[0]
            if path == "/" and given is not None:
                if not hmac.compare_digest(given.encode(), token.encode()):
                    return await self._refuse(scope, receive, send, 401, "wrong token")
                response = RedirectResponse("/", status_code=303)
                response.set_cookie(COOKIE, token, httponly=True, samesite="strict", path="/")
                return await response(scope, receive, send)
            if not self._signed_in(headers, token):
                why = "a wrong token" if self._presented(headers) else "no token"
                return await self._refuse(scope, receive, send, 401, f"{why}: sign in")
        if is_api and method not in SAFE_METHODS:
            if headers.get("x-stretto-console") != "1":
                return await self._refuse(
                    scope, receive, send, 403, "a change needs the header X-Stretto-Console: 1"
                )
            if self.options.read_only and path != "/api/logout":
                return await self._refuse(
                    scope, receive, send, 403, "the console is read-only (--read-only)"
                )
        await self.app(scope, receive, send)

    @staticmethod
    def _presented(headers: dict) -> bool:
        return "authorization" in headers or COOKIE in _cookies(headers)

    @staticmethod
    def _signed_in(headers: dict, token: str) -> bool:
        authorization = headers.get("authorization", "")
        if authorization.lower().startswith("bearer "):
            given = authorization[7:].strip()
        else:
            given = _cookies(headers).get(COOKIE, "")
        return bool(given) and hmac.compare_digest(given.encode(), token.encode())

    @staticmethod
    async def _refuse(scope, receive, send, status: int, message: str) -> None:
        response: Response
        if scope["path"].startswith("/api/"):
            response = JSONResponse({"error": message}, status_code=status)
        else:
            response = HTMLResponse(NOT_SIGNED_IN.format(message=message), status_code=status)
        await response(scope, receive, send)


def host_name(host: str) -> str:
    """The Host header without its port: `[::1]:7878` -> `[::1]`, `localhost:7878` ->
    `localhost`."""
    if host.startswith("["):
        return host.split("]", 1)[0] + "]"
    return host.split(":", 1)[0]


def _cookies(headers: dict) -> dict[str, str]:
    jar = SimpleCookie()
    try:
        jar.load(headers.get("cookie", ""))
    except Exception:  # noqa: BLE001 - a malformed cookie header is no cookie
        return {}
    return {k: v.value for k, v in jar.items()}


def _page(request):
    return FileResponse(STATIC / "index.html", media_type="text/html")


def _vendor(request):
    name = request.path_params["name"]
    files = {path.name: path for path in vendor_files().values()}
    path = files.get(name)
    if path is None or not path.exists():
        return JSONResponse(
            {"error": f"{name}: not installed (run `make setup` to install node/node_modules)"},
            status_code=404,
        )
    return FileResponse(path, media_type="text/javascript")


async def _not_found(request, exc):
    status = getattr(exc, "status_code", 404)
    if request.url.path.startswith("/api/"):
        return JSONResponse({"error": f"no such endpoint: {request.url.path}"}, status_code=status)
    return HTMLResponse(NOT_SIGNED_IN.format(message="no such page"), status_code=status)


def route_path(path: str) -> str:
    """OpenAPI's `{name}` as Starlette's: flow names and artifact paths hold slashes."""
    return path.replace("{name}", "{name:path}").replace("{path}", "{path:path}")


def create_app(options: Options) -> Starlette:
    console = Console(options)

    @asynccontextmanager
    async def lifespan(app):
        yield
        console.stop()

    routes: list[BaseRoute] = [
        Route(route_path(e.path), guarded(e.handler), methods=[e.method]) for e in ENDPOINTS
    ]
    routes += [Route(p, _page, methods=["GET"]) for p in PAGES]
    routes += [
        Route("/vendor/{name}", _vendor, methods=["GET"]),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    app = Starlette(
        routes=routes,
        middleware=[Middleware(Auth, options=options)],
        lifespan=lifespan,
        exception_handlers={404: _not_found, 405: _not_found},
    )
    app.state.console = console
    return app
