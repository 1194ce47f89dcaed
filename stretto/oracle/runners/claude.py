"""`claude://MODEL`: Anthropic's Messages API (ANTHROPIC_API_KEY; the server from
`--oracle-base-url`, else ANTHROPIC_BASE_URL, else https://api.anthropic.com). The answer is
forced through a tool whose input schema is the answer: a probability per option of each
question (Claude gives no token probabilities)."""

from __future__ import annotations

import json

from stretto.oracle import http
from stretto.oracle.errors import Malformed
from stretto.oracle.request import Request
from stretto.oracle.runners import chat
from stretto.oracle.runners.base import Context, Reply, Runner, count, member, text

DEFAULT_BASE = "https://api.anthropic.com"
API_VERSION = "2023-06-01"
TOOL = "answer"
MAX_TOKENS_BASE, MAX_TOKENS_PER_QUESTION = 256, 128
# $ per million tokens (input, output) by model family; a model not named here is priced as
# the dearest family named, so a budget errs on the safe side.
PRICES = {"haiku": (1.0, 5.0), "sonnet": (3.0, 15.0), "opus": (15.0, 75.0)}


class ClaudeRunner(Runner):
    scheme = "claude"
    answer_tokens = 40

    @property
    def base(self) -> str:
        return (self.options.base_url or self.env("ANTHROPIC_BASE_URL") or DEFAULT_BASE).rstrip("/")

    def price(self) -> tuple[float, float]:
        if self.options.price:
            return self.options.price
        for family, price in PRICES.items():
            if family in self.model:
                return price
        return max(PRICES.values())

    def _headers(self) -> dict[str, str]:
        return {"x-api-key": self.key_from("ANTHROPIC_API_KEY"), "anthropic-version": API_VERSION}

    def ask(self, request: Request, context: Context) -> Reply:
        headers = self._headers()
        body = {
            "model": self.model,
            "max_tokens": MAX_TOKENS_BASE + MAX_TOKENS_PER_QUESTION * len(request.questions),
            "temperature": 0,
            "system": chat.SYSTEM,
            "messages": [{"role": "user", "content": chat.prompt(request, chat.WEIGH_TASK)}],
            "tools": [
                {
                    "name": TOOL,
                    "description": "Give the probability of each option of each question.",
                    "input_schema": chat.weigh_schema(request),
                }
            ],
            "tool_choice": {"type": "tool", "name": TOOL},
        }
        sent = json.dumps(body, ensure_ascii=False)
        response = http.post_json(
            f"{self.base}/v1/messages",
            sent.encode(),
            label=self.uri,
            options=self.options.http,
            headers=headers,
        )
        if not isinstance(response, dict) or not isinstance(response.get("content"), list):
            raise Malformed(f"{self.uri}: the answer has no content")
        if response.get("stop_reason") == "max_tokens":
            raise Malformed(f"{self.uri}: the answer was cut at max_tokens")
        uses = [
            block
            for block in response["content"]
            if isinstance(block, dict)
            and block.get("type") == "tool_use"
            and block.get("name") == TOOL
        ]
        if not uses:
            raise Malformed(f"{self.uri}: the answer does not use the `{TOOL}` tool")
        answers = chat.read_weighed(request, uses[0].get("input"), self.uri)
        usage = member(response, "usage")
        return Reply(
            answers,
            sent,
            text(response, "model"),
            count(usage, "input_tokens"),
            count(usage, "output_tokens"),
        )

    def check(self) -> str:
        """The key is set and accepted, and the model is known (GET /v1/models/MODEL)."""
        info = http.get_json(
            f"{self.base}/v1/models/{self.model}",
            label=self.uri,
            options=self.options.http,
            headers=self._headers(),
        )
        name = info.get("id", self.model) if isinstance(info, dict) else self.model
        return f"key set and accepted by {http.origin(self.base)}; model {name} present"
