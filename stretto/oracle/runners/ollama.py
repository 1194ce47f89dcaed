"""`ollama://MODEL`: a local Ollama server (`--oracle-base-url`, else OLLAMA_HOST, else
http://127.0.0.1:11434). `/api/show` says what the model is: a `decision` model answers
System-One questions itself (`/v1/systemone`, every question a choice, yes/no ones over `yes`
and `no`); a chat model (`completion`) is asked through `/api/chat` with the answer's JSON
schema as `format`, no thinking, no streaming, and a context (`num_ctx`) sized to the request:
at least 8,192 tokens, a power of two, never past the model's own context length — a request
that does not fit is refused, never cut."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from urllib.parse import urlsplit

from stretto.oracle import http
from stretto.oracle.errors import ContextTooLong, HttpError, Malformed, OracleError
from stretto.oracle.request import Request
from stretto.oracle.runners import chat, systemone
from stretto.oracle.runners.base import Context, Reply, Runner, member

DEFAULT_HOST = "http://127.0.0.1:11434"
DEFAULT_PORT = 11434
MIN_CONTEXT = 8192
CHARS_PER_TOKEN = 3  # sizing the context: assume denser text than the usual 4, so none is cut
ANSWER_TOKENS = 1024  # room for the answer


@dataclass(frozen=True)
class ModelInfo:
    kind: str  # decision | chat
    context_length: int | None
    capabilities: tuple[str, ...]


def context_size(needed: int, model_context: int | None) -> int:
    """`num_ctx` for a request needing `needed` tokens: ≥ 8,192, a power of two, never past
    the model's context; ContextTooLong when the model cannot hold it."""
    if model_context is not None and needed > model_context:
        raise ContextTooLong(
            f"the request needs about {needed} tokens, more than the model's context of "
            f"{model_context}; refused rather than cut"
        )
    size = max(MIN_CONTEXT, 1 << max(0, math.ceil(math.log2(max(needed, 1)))))
    return min(size, model_context) if model_context is not None else size


def host_url(value: str) -> str:
    """OLLAMA_HOST as a URL: `host`, `host:port` or a URL; 0.0.0.0 (listen on all) is
    reached at 127.0.0.1."""
    text = value.strip().rstrip("/")
    if "://" not in text:
        text = "http://" + text
    parts = urlsplit(text)
    host = parts.hostname or "127.0.0.1"
    if host in ("0.0.0.0", "::"):
        host = "127.0.0.1"
    port = parts.port or (DEFAULT_PORT if parts.scheme == "http" else 443)
    return f"{parts.scheme}://{host}:{port}{parts.path}"


class OllamaRunner(Runner):
    scheme = "ollama"

    def __init__(self, model, options=None) -> None:
        super().__init__(model, options)
        self._info: ModelInfo | None = None
        self._digest: tuple[str | None, str | None] | None = None

    @property
    def host(self) -> str:
        return host_url(self.options.base_url or self.env("OLLAMA_HOST") or DEFAULT_HOST)

    def info(self) -> ModelInfo:
        """What /api/show says the model is (asked once)."""
        if self._info is None:
            try:
                shown = http.post_json(
                    f"{self.host}/api/show",
                    {"model": self.model},
                    label=self.uri,
                    options=self.options.http,
                )
            except HttpError as exc:
                if exc.status == 404:
                    raise OracleError(
                        f"{self.uri}: the Ollama server at {http.origin(self.host)} has no "
                        f"model {self.model} (ollama pull {self.model})"
                    ) from exc
                raise
            if not isinstance(shown, dict):
                raise Malformed(f"{self.uri}: /api/show did not answer an object")
            capabilities = tuple(c for c in shown.get("capabilities") or [] if isinstance(c, str))
            if "decision" in capabilities:
                kind = "decision"
            elif "completion" in capabilities:
                kind = "chat"
            else:
                raise OracleError(
                    f"{self.uri}: neither a decision nor a chat model (capabilities: "
                    f"{', '.join(capabilities) or 'none'})"
                )
            info = member(shown, "model_info")
            lengths = [
                v
                for k, v in sorted(info.items())
                if k.endswith(".context_length") and isinstance(v, int) and v > 0
            ]
            self._info = ModelInfo(kind, lengths[0] if lengths else None, capabilities)
        return self._info

    def digest(self) -> tuple[str | None, str | None]:
        """(the model's digest from /api/tags, or None and why the lookup failed)."""
        if self._digest is None:
            try:
                tags = http.get_json(
                    f"{self.host}/api/tags", label=self.uri, options=self.options.http
                )
                names = {self.model, f"{self.model}:latest"}
                found = [
                    m.get("digest")
                    for m in (tags.get("models") or [] if isinstance(tags, dict) else [])
                    if isinstance(m, dict) and (m.get("name") in names or m.get("model") in names)
                ]
                self._digest = (
                    (found[0], None)
                    if found and isinstance(found[0], str)
                    else (None, f"/api/tags does not list {self.model} with a digest")
                )
            except OracleError as exc:
                self._digest = (None, f"the model's digest could not be looked up: {exc}")
        return self._digest

    def ask(self, request: Request, context: Context) -> Reply:
        info = self.info()
        reply = self._decide(request) if info.kind == "decision" else self._chat(request, info)
        digest, note = self.digest()
        if digest:
            reply.model_version = f"{self.model}@{digest}"
        if note:
            reply.notes.append(note)
        return reply

    def _decide(self, request: Request) -> Reply:
        body = systemone.request_body(request, self.model, all_choice=True)
        sent = json.dumps(body, ensure_ascii=False)
        response = http.post_json(
            f"{self.host}/v1/systemone", sent.encode(), label=self.uri, options=self.options.http
        )
        answers, _, usage = systemone.read_answers(request, response, self.uri)
        return Reply(answers, sent, None, usage["input"], usage["output"])

    def _chat(self, request: Request, info: ModelInfo) -> Reply:
        body: dict = {
            "model": self.model,
            "messages": [
                {"role": "system", "content": chat.SYSTEM},
                {"role": "user", "content": chat.prompt(request, chat.WEIGH_TASK)},
            ],
            "format": chat.weigh_schema(request),
            "stream": False,
            "think": False,
        }
        needed = math.ceil(len(json.dumps(body, ensure_ascii=False)) / CHARS_PER_TOKEN)
        try:
            num_ctx = context_size(needed + ANSWER_TOKENS, info.context_length)
        except ContextTooLong as exc:
            raise ContextTooLong(f"{self.uri}: {exc}") from exc
        body["options"] = {"num_ctx": num_ctx, "temperature": 0, "seed": 0}
        sent = json.dumps(body, ensure_ascii=False)
        response = http.post_json(
            f"{self.host}/api/chat", sent.encode(), label=self.uri, options=self.options.http
        )
        if not isinstance(response, dict) or not isinstance(response.get("message"), dict):
            raise Malformed(f"{self.uri}: /api/chat answered without a message")
        if response.get("done_reason") == "length":
            raise Malformed(f"{self.uri}: the answer was cut at its length limit")
        prompt_tokens = response.get("prompt_eval_count")
        output_tokens = response.get("eval_count")
        if isinstance(prompt_tokens, int) and prompt_tokens + (output_tokens or 0) >= num_ctx:
            raise ContextTooLong(
                f"{self.uri}: the request and answer filled the context of {num_ctx} tokens "
                "(the prompt may have been cut); refused"
            )
        value = chat.parse_json_text(response["message"].get("content"), self.uri)
        answers = chat.read_weighed(request, value, self.uri)
        return Reply(
            answers,
            sent,
            None,
            prompt_tokens if isinstance(prompt_tokens, int) else None,
            output_tokens if isinstance(output_tokens, int) else None,
        )

    def check(self) -> str:
        info = self.info()
        context = f", context {info.context_length}" if info.context_length else ""
        return f"{http.origin(self.host)} has {self.model} ({info.kind} model{context})"
