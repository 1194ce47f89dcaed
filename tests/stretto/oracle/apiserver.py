"""A local HTTP server started by a test, standing in for a model API (Ollama, Anthropic,
OpenAI-compatible, TypeSafe): each route answers with a function of the request that speaks
that API's documented request/response shapes, or with responses scripted in advance (errors,
429 with Retry-After, a hang past the client's timeout, malformed bodies). It records every
request it receives."""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HANG = "hang"  # a scripted response that never comes (until the server stops)


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: Any  # parsed JSON, or the raw text when it is not JSON


Reply = tuple[int, dict[str, str], Any]  # status, headers, body (JSON value, str or bytes)
Route = Callable[[Seen], Reply]


class ApiServer:
    def __init__(self) -> None:
        self.routes: dict[tuple[str, str], Route] = {}
        self.scripted: dict[tuple[str, str], deque] = {}
        self.seen: list[Seen] = []
        self.answered: list[str] = []  # the paths of the requests answered, in order
        self.release = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet
                pass

            def _serve(self, method: str) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length).decode() if length else ""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw
                seen = Seen(
                    method, self.path, {k.lower(): v for k, v in self.headers.items()}, body
                )
                server.seen.append(seen)
                queue = server.scripted.get((method, self.path))
                if queue:
                    reply = queue.popleft()
                elif (method, self.path) in server.routes:
                    reply = server.routes[(method, self.path)](seen)
                else:
                    reply = (404, {}, {"error": f"no route {method} {self.path}"})
                if reply == HANG:
                    server.release.wait(30)
                    return
                status, headers, payload = reply
                data = (
                    payload
                    if isinstance(payload, bytes)
                    else payload.encode()
                    if isinstance(payload, str)
                    else json.dumps(payload).encode()
                )
                try:
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(data)
                    server.answered.append(self.path)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def do_GET(self) -> None:
                self._serve("GET")

            def do_POST(self) -> None:
                self._serve("POST")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def route(self, method: str, path: str, handler: Route) -> None:
        self.routes[(method, path)] = handler

    def script(self, method: str, path: str, *replies) -> None:
        """Answer the next requests to this route with these, in order, then as routed."""
        self.scripted.setdefault((method, path), deque()).extend(replies)

    def requests_to(self, path: str) -> list[Seen]:
        return [s for s in self.seen if s.path == path]

    def __enter__(self) -> ApiServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def openai_chat(pick: Callable[[str, list[str]], str], model: str = "demo-model-2026") -> Route:
    """POST /chat/completions as an OpenAI-compatible server (vLLM, llama.cpp's server, LM
    Studio) answers a request with a `json_schema` response format: each question's answer is
    `pick(question id, its options)`; no token log-probabilities (as such servers often
    give none)."""

    def route(seen: Seen) -> Reply:
        schema = seen.body["response_format"]["json_schema"]["schema"]
        answer = {qid: pick(qid, prop["enum"]) for qid, prop in schema["properties"].items()}
        return (
            200,
            {},
            {
                "id": f"chatcmpl-{len(seen.body['messages'][1]['content'])}",
                "object": "chat.completion",
                "created": 1790000000,
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": json.dumps(answer)},
                        "logprobs": None,
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 700, "completion_tokens": 20, "total_tokens": 720},
            },
        )

    return route


def look_up_first(qid: str, options: list[str]) -> str:
    """A model that always expects another lookup: the first lookup offered, `yes` to go on."""
    if "yes" in options:
        return "yes" if qid == "go_on" else "no"
    lookups = [o for o in options if o != "respond"]
    return lookups[0] if lookups else options[0]
