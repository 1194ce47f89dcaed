"""JSON over HTTP with the standard library (no client library to install): a timeout on every
request, retries on 429/502/503/504/529 that honour Retry-After, and errors that say which
server failed and how — never which key was sent."""

from __future__ import annotations

import email.utils
import http.client
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from stretto.oracle.errors import (
    HttpError,
    Malformed,
    OracleError,
    RateLimited,
    TimedOut,
    Unreachable,
)

RETRY_STATUSES = frozenset({429, 502, 503, 504, 529})  # 529: Anthropic's "overloaded"
RATE_LIMIT_STATUSES = frozenset({429, 529})
FIRST_BACKOFF = 0.5  # seconds, doubled per retry, when the server does not say how long


@dataclass
class HttpOptions:
    timeout: float = 30.0  # seconds, per request (connect and each read)
    retries: int = 3  # further attempts after a 429/5xx
    max_wait: float = 30.0  # the longest Retry-After we wait for; longer gives up at once
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False)


@dataclass
class Response:
    status: int
    headers: dict[str, str]  # names lower-cased
    body: bytes

    def json(self, label: str) -> Any:
        try:
            return json.loads(self.body)
        except ValueError as exc:
            raise Malformed(f"{label}: the answer is not JSON ({exc})") from exc


def origin(url: str) -> str:
    """scheme://host:port of a URL: what an error message may show."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"


def retry_after(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delay-seconds or an HTTP date), or None."""
    value = headers.get("retry-after")
    if value is None:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def error_text(body: bytes, limit: int = 300) -> str:
    """The message of an error body: `error.message`, `error`, `message` or `detail` of a JSON
    body (Anthropic, OpenAI, Ollama, TypeSafe), else its text; clipped, on one line."""
    text = body.decode("utf-8", "replace")
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if isinstance(value, dict):
        error = value.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            text = error["message"]
        elif isinstance(error, str):
            text = error
        elif isinstance(value.get("message"), str):
            text = value["message"]
        elif isinstance(value.get("detail"), str):
            text = value["detail"]
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _connection(url: str, timeout: float) -> tuple[http.client.HTTPConnection, str]:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise OracleError(f"not an http(s) URL: {origin(url)!r}")
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    if parts.scheme == "https":
        import ssl  # only a remote service needs it

        return (
            http.client.HTTPSConnection(
                parts.hostname, parts.port, timeout=timeout, context=ssl.create_default_context()
            ),
            path,
        )
    return http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout), path


def request(
    method: str,
    url: str,
    *,
    label: str,
    options: HttpOptions,
    body: Any = None,
    headers: Mapping[str, str] | None = None,
) -> Response:
    """Send one request (a JSON body when `body` is not None) and return a 2xx response;
    retry what the server says is passing (429, 5xx gateways, 529) up to `options.retries`
    times, waiting what its Retry-After asks (or a doubling back-off). `label` names the
    runner in errors, e.g. `ollama://qwen3:8b`."""
    data = None
    sent_headers = {"accept": "application/json", "user-agent": "stretto-oracle"}
    if body is not None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        sent_headers["content-type"] = "application/json"
    sent_headers.update(headers or {})
    where = origin(url)
    for attempt in range(options.retries + 1):
        connection, path = _connection(url, options.timeout)
        try:
            connection.request(method, path, body=data, headers=sent_headers)
            raw = connection.getresponse()
            response = Response(raw.status, {k.lower(): v for k, v in raw.getheaders()}, raw.read())
        except TimeoutError as exc:  # socket.timeout is TimeoutError
            raise TimedOut(f"{label}: no answer from {where} within {options.timeout:g} s") from exc
        except (OSError, http.client.HTTPException) as exc:
            reason = getattr(exc, "strerror", None) or exc.__class__.__name__
            raise Unreachable(f"{label}: cannot reach {where}: {reason}") from exc
        finally:
            connection.close()
        if 200 <= response.status < 300:
            return response
        message = error_text(response.body)
        if response.status in RETRY_STATUSES:
            wait = retry_after(response.headers)
            wait = FIRST_BACKOFF * 2**attempt if wait is None else wait
            kind = RateLimited if response.status in RATE_LIMIT_STATUSES else HttpError
            if attempt == options.retries:
                raise kind(
                    f"{label}: {where} answered {response.status} ({message}) "
                    f"{options.retries + 1} times; giving up",
                    response.status,
                )
            if wait > options.max_wait:
                raise kind(
                    f"{label}: {where} answered {response.status} ({message}) and asks to "
                    f"wait {wait:g} s, longer than {options.max_wait:g} s",
                    response.status,
                )
            options.sleep(wait)
            continue
        raise HttpError(f"{label}: {where} answered {response.status}: {message}", response.status)
    raise AssertionError("unreachable")  # the loop returns or raises


def post_json(url: str, body: Any, *, label: str, options: HttpOptions, headers=None) -> Any:
    return request("POST", url, label=label, options=options, body=body, headers=headers).json(
        label
    )


def get_json(url: str, *, label: str, options: HttpOptions, headers=None) -> Any:
    return request("GET", url, label=label, options=options, headers=headers).json(label)
