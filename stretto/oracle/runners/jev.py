"""`jev://MODEL`: TypeSafe's System-One service (the reference's own oracle). The key comes
from TYPESAFE_API_KEY, or the file TYPESAFE_API_KEY_FILE names; the server from
`--oracle-base-url`, else TYPESAFE_BASE_URL, else https://api.typesafe.ai."""

from __future__ import annotations

import json

from stretto.oracle import http
from stretto.oracle.request import Request
from stretto.oracle.runners import systemone
from stretto.oracle.runners.base import Context, Reply, Runner

DEFAULT_BASE = "https://api.typesafe.ai"


class JevRunner(Runner):
    scheme = "jev"
    default_price = (0.042, 0.0)  # $ per million input tokens; output is free

    @property
    def base(self) -> str:
        return (self.options.base_url or self.env("TYPESAFE_BASE_URL") or DEFAULT_BASE).rstrip("/")

    def ask(self, request: Request, context: Context) -> Reply:
        key = self.key_from("TYPESAFE_API_KEY", "TYPESAFE_API_KEY_FILE")
        body = systemone.request_body(request, self.model)
        sent = json.dumps(body, ensure_ascii=False)
        response = http.post_json(
            f"{self.base}/v1/systemone",
            sent.encode(),
            label=self.uri,
            options=self.options.http,
            headers={"authorization": f"Bearer {key}"},
        )
        answers, version, usage = systemone.read_answers(request, response, self.uri)
        return Reply(answers, sent, version, usage["input"], usage["output"])

    def check(self) -> str:
        """The key is set and accepted (GET /v1/models), and whether the model is listed."""
        key = self.key_from("TYPESAFE_API_KEY", "TYPESAFE_API_KEY_FILE")
        listing = http.get_json(
            f"{self.base}/v1/models",
            label=self.uri,
            options=self.options.http,
            headers={"authorization": f"Bearer {key}"},
        )
        models = listing.get("models") if isinstance(listing, dict) else None
        names = {m.get("name") for m in models or [] if isinstance(m, dict)}
        listed = "listed" if self.model in names else "not listed (an alias is not)"
        return f"key set and accepted by {http.origin(self.base)}; {self.model} {listed}"
