"""`openai://MODEL`: any OpenAI-compatible chat-completions server — OpenAI, vLLM, llama.cpp's
server, LM Studio (`--oracle-base-url`, else OPENAI_BASE_URL, else https://api.openai.com/v1;
OPENAI_API_KEY, required for api.openai.com only). The answer is one option per question under
a `json_schema` response format; its probabilities come from the token log-probabilities
when the server gives them, else the picked option gets 1."""

from __future__ import annotations

import json
from urllib.parse import urlsplit

from stretto.oracle import http
from stretto.oracle.errors import Malformed, OracleError
from stretto.oracle.request import Request
from stretto.oracle.runners import chat
from stretto.oracle.runners.base import Context, Reply, Runner, count, member, text

DEFAULT_BASE = "https://api.openai.com/v1"
TOP_LOGPROBS = 20
OPENAI_PRICE = (2.5, 10.0)  # $ per million tokens, a current mid-size model's; --oracle-price


class OpenAIRunner(Runner):
    scheme = "openai"
    answer_tokens = 10

    @property
    def base(self) -> str:
        return (self.options.base_url or self.env("OPENAI_BASE_URL") or DEFAULT_BASE).rstrip("/")

    @property
    def hosted(self) -> bool:
        return urlsplit(self.base).hostname == "api.openai.com"

    def price(self) -> tuple[float, float]:
        # A server of one's own costs nothing per token here; OpenAI's own does.
        return self.options.price or (OPENAI_PRICE if self.hosted else (0.0, 0.0))

    def _headers(self) -> dict[str, str]:
        if self.hosted or self.env("OPENAI_API_KEY"):
            return {"authorization": f"Bearer {self.key_from('OPENAI_API_KEY')}"}
        return {}

    def ask(self, request: Request, context: Context) -> Reply:
        headers = self._headers()
        body = {
            "model": self.model,
            "messages": [
                {"role": "system", "content": chat.SYSTEM},
                {"role": "user", "content": chat.prompt(request, chat.PICK_TASK)},
            ],
            "response_format": {
                "type": "json_schema",
                "json_schema": {
                    "name": "answers",
                    "strict": True,
                    "schema": chat.pick_schema(request),
                },
            },
            "temperature": 0,
            "seed": 0,
            "logprobs": True,
            "top_logprobs": TOP_LOGPROBS,
        }
        sent = json.dumps(body, ensure_ascii=False)
        response = http.post_json(
            f"{self.base}/chat/completions",
            sent.encode(),
            label=self.uri,
            options=self.options.http,
            headers=headers,
        )
        choices = response.get("choices") if isinstance(response, dict) else None
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise Malformed(f"{self.uri}: the answer has no choices")
        choice = choices[0]
        message = member(choice, "message")
        if message.get("refusal"):
            raise Malformed(f"{self.uri}: the model refused: {str(message['refusal'])[:200]}")
        if choice.get("finish_reason") == "length":
            raise Malformed(f"{self.uri}: the answer was cut at its length limit")
        answers, used = chat.picked_answers(
            request, text(message, "content"), _tokens(choice.get("logprobs")), self.uri
        )
        usage = member(response, "usage")
        version = text(response, "model")
        if version and text(response, "system_fingerprint"):
            version = f"{version} ({response['system_fingerprint']})"
        notes = [] if used else ["no token probabilities: the picked options get 1"]
        return Reply(
            answers,
            sent,
            version,
            count(usage, "prompt_tokens"),
            count(usage, "completion_tokens"),
            notes,
        )

    def check(self) -> str:
        """The server answers GET /models (with the key, if any) and lists the model."""
        listing = http.get_json(
            f"{self.base}/models",
            label=self.uri,
            options=self.options.http,
            headers=self._headers(),
        )
        data = listing.get("data") if isinstance(listing, dict) else None
        ids = {m.get("id") for m in data or [] if isinstance(m, dict)}
        if self.model not in ids:
            raise OracleError(
                f"{self.uri}: {http.origin(self.base)} does not list the model {self.model}"
            )
        return f"{http.origin(self.base)} lists {self.model}"


def _tokens(logprobs) -> list[chat.Token] | None:
    """The chosen tokens with their alternatives, from `choices[0].logprobs.content`."""
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    if not isinstance(content, list) or not content:
        return None
    tokens: list[chat.Token] = []
    for item in content:
        if not isinstance(item, dict) or not isinstance(item.get("token"), str):
            return None
        alternatives = [
            (alt["token"], float(alt["logprob"]))
            for alt in item.get("top_logprobs") or []
            if isinstance(alt, dict)
            and isinstance(alt.get("token"), str)
            and isinstance(alt.get("logprob"), int | float)
        ]
        if not isinstance(item.get("logprob"), int | float):
            return None
        tokens.append((item["token"], float(item["logprob"]), alternatives))
    return tokens
