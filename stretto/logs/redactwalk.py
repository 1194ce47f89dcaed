"""Which parts of a session log's lines are values to pseudonymise, which are free text and
which are kept (`stretto redact`; docs/formats.md §11): the one walk both of redaction's
passes take (stretto.logs.redact), so what the census counts is exactly what the rewrite
replaces. What each value becomes is stretto.logs.pseudonyms's.

Kept: the methods that carry no data (`initialize`, `tools/list`, …), tool names, the
members of params the protocol defines, what kind a content item is, and the flow-log
members stretto writes from names and numbers. Free text (the conversation, error messages,
reasons) is rewritten word by word; everything else is data.
"""

from __future__ import annotations

import json
from typing import Any

from stretto.logs.pseudonyms import Count, Pseudonyms, dumps, parse_json
from stretto.logs.sessionlog import WireLine

# Methods whose messages carry no data, kept as they are.
KEPT_METHODS = frozenset({"initialize", "tools/list", "ping", "notifications/initialized"})
# Members of a message's params that the protocol defines, kept.
PROTOCOL_KEYS = frozenset({"requestId", "progressToken", "progress", "total", "level", "cursor"})
FREE_TEXT_KEYS = frozenset({"reason", "message"})  # in params: words, not values
# Members of a content item kept: what kind of item it is, not what it holds.
CONTENT_KEPT = frozenset({"type", "mimeType", "annotations"})
# Flow-log members written by stretto from names and numbers (docs/formats.md §4).
FLOW_KEPT = frozenset(
    {"address", "after", "site", "probs", "prob", "p", "binding", "shadow", "action", "tool"}
    | {"ms", "run", "epsilon", "greedy", "explored", "propensity", "habit"}
)
FLOW_GENERATED = frozenset({"reason", "withheld", "unbound"})  # generated text: values only


def _dumps_like(value: Any, original: str) -> str:
    """JSON text in the original's style: indented, spaced or compact."""
    if "\n" in original.strip():
        return dumps(value, indent=2)
    if '": ' in original or ", " in original:
        return dumps(value)
    return dumps(value, separators=(",", ":"))


def _id_key(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


class Walk:
    """Which parts of a session's messages are data, free text or kept — for both passes."""

    def __init__(self, values: Count | Pseudonyms) -> None:
        self.v = values
        self.asked: dict[tuple[bool, str], str] = {}  # (asked by the server, id) -> method

    def data(self, value: Any, forced: bool = False) -> Any:
        v = self.v
        if isinstance(value, str):
            return v.string(value, forced)
        if isinstance(value, bool) or value is None:
            return value
        if isinstance(value, int):
            return v.integer(value, forced)
        if isinstance(value, float):
            return v.number(value, forced)
        if isinstance(value, list):
            return [self.data(item, forced) for item in value]
        if isinstance(value, dict):
            return {v.string(k): self.data(item, forced or v.named(k)) for k, item in value.items()}
        return value

    def free(self, value: Any) -> Any:
        """Free text wherever it is in a JSON value (keys and `type`s kept)."""
        if isinstance(value, str):
            return self.v.text(value)
        if isinstance(value, list):
            return [self.free(item) for item in value]
        if isinstance(value, dict):
            return {k: item if k == "type" else self.free(item) for k, item in value.items()}
        return self.data(value)

    def line(self, line: WireLine) -> dict:
        if not line.is_json:
            return {"t_ms": line.t_ms, "from": line.sender, "raw": self.v.text(line.raw or "")}
        if line.sender == "context":
            message = self.context(line.message)
        elif isinstance(line.message, list):
            message = [self.message(line.sender, m) for m in line.message]
        else:
            message = self.message(line.sender, line.message)
        return {"t_ms": line.t_ms, "from": line.sender, "message": message}

    def context(self, message: Any) -> Any:
        if not isinstance(message, dict):
            return self.free(message)
        return {k: item if k == "role" else self.free(item) for k, item in message.items()}

    def message(self, sender: str, message: Any) -> Any:
        if not isinstance(message, dict):
            return self.data(message)
        method = message.get("method")
        if isinstance(method, str):
            if message.get("id") is not None:
                self.asked[(sender == "server", _id_key(message["id"]))] = method
            if method in KEPT_METHODS or method.startswith("stretto/"):
                return message
            if method.endswith("/list_changed"):
                return message
            out = dict(message)
            if "params" in message:
                out["params"] = self.params(method, message["params"])
            return out
        if "id" not in message or not ("result" in message or "error" in message):
            return self.data(message)
        asked = self.asked.get((sender == "client", _id_key(message["id"])))
        if asked in KEPT_METHODS:
            if asked == "tools/list" and isinstance(message.get("result"), dict):
                self.v.tools(message["result"])
            return message
        out = dict(message)
        if "result" in message:
            out["result"] = self.result(message["result"])
        if "error" in message:
            out["error"] = self.error(message["error"])
        return out

    def params(self, method: str, params: Any) -> Any:
        if not isinstance(params, dict):
            return self.data(params)
        out = {}
        for key, value in params.items():
            if method == "tools/call" and key == "name":
                out[key] = value
            elif method == "tools/call" and key == "arguments":
                out[key] = self.data(value)
            elif key in PROTOCOL_KEYS:
                out[key] = value
            elif key == "_meta":
                out[key] = self.meta(value)
            elif key in FREE_TEXT_KEYS and isinstance(value, str):
                out[key] = self.v.text(value)
            else:
                out[key] = self.data(value)
        return out

    def meta(self, meta: Any) -> Any:
        if not isinstance(meta, dict):
            return self.data(meta)
        return {k: v if k == "progressToken" else self.free(v) for k, v in meta.items()}

    def result(self, result: Any) -> Any:
        """A response's result: a tools/call result's content as the readers see it (its text
        items joined: JSON, or lines), everything else as data (isError and _meta aside)."""
        if not isinstance(result, dict):
            return self.data(result)
        out = {}
        for key, value in result.items():
            if key == "isError":
                out[key] = value
            elif key == "_meta":
                out[key] = self.meta(value)
            elif key in ("content", "contents") and isinstance(value, list):
                out[key] = self.content(value)
            else:
                out[key] = self.data(value)
        return out

    def content(self, items: list) -> list:
        texts = [
            item["text"]
            for item in items
            if isinstance(item, dict)
            and item.get("type") == "text"
            and isinstance(item.get("text"), str)
        ]
        is_json, document = parse_json(texts[0]) if len(texts) == 1 else (False, None)
        out = []
        for item in items:
            if not isinstance(item, dict):
                out.append(self.data(item))
                continue
            new = {}
            for key, value in item.items():
                if key in CONTENT_KEPT:
                    new[key] = value
                elif key == "text" and is_json and item.get("type") == "text" and value is texts[0]:
                    new[key] = _dumps_like(self.data(document), value)
                else:
                    new[key] = self.data(value)
            out.append(new)
        return out

    def error(self, error: Any) -> Any:
        if not isinstance(error, dict):
            return self.data(error)
        out = {}
        for key, value in error.items():
            if key == "code":
                out[key] = value
            elif key == "message" and isinstance(value, str):
                out[key] = self.v.text(value)
            else:
                out[key] = self.data(value)
        return out

    def flow_entry(self, entry: Any) -> Any:
        """A line of a flow log (docs/formats.md §4): its arguments as data, the reasons
        stretto wrote with every hashed value in them replaced, names and numbers kept."""
        if not isinstance(entry, dict):
            return self.data(entry)
        out = {}
        for key, value in entry.items():
            if key in FLOW_KEPT:
                out[key] = value
            elif key in FLOW_GENERATED and isinstance(value, str):
                out[key] = self.v.text(value, words=False)
            elif key == "explore" and isinstance(value, dict):
                out[key] = self.flow_entry(value)
            elif key == "options" and isinstance(value, list):
                out[key] = [self.flow_entry(option) for option in value]
            else:
                out[key] = self.data(value)
        return out
