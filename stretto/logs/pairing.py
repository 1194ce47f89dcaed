"""Tool calls and their answers in a session log's wire messages: which message is a call,
which is an answer, and which call an answer answers.

The episode reader (stretto.logs.episode) is the one place that pairs them; each ToolResult
keeps the log line of its answer and whether it was a JSON-RPC error, so evaluate's labelling
and the console read the pairs from the episode instead of pairing again.
"""

from __future__ import annotations

import json
from typing import Any, Generic, TypeVar

CALLERS = ("client", "proxy")  # the agent's calls, and the flow's lookups
ANSWERERS = ("server", "proxy")  # the server, and the proxy answering for it

T = TypeVar("T")


def call_id_text(value: Any) -> str:
    """A JSON-RPC id as text: a string as-is, a number in decimal."""
    if isinstance(value, str):
        return value
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return json.dumps(value)


def messages(value: Any) -> list[Any]:
    """A wire line's messages: a JSON-RPC batch's, or the one."""
    return value if isinstance(value, list) else [value]


def request_method(sender: str, message: dict) -> str | None:
    """The method of a request (or notification) the agent or the proxy sent, else None."""
    method = message.get("method")
    return method if sender in CALLERS and isinstance(method, str) else None


def tool_call(sender: str, message: dict) -> tuple[str, str, dict[str, Any]] | None:
    """(id, tool, arguments) of a tools/call request with an id and a tool name, else None."""
    if request_method(sender, message) != "tools/call" or message.get("id") is None:
        return None
    params = message.get("params")
    params = params if isinstance(params, dict) else {}
    name = params.get("name")
    if not isinstance(name, str):
        return None
    arguments = params.get("arguments")
    return call_id_text(message["id"]), name, arguments if isinstance(arguments, dict) else {}


def is_answer(sender: str, message: dict) -> bool:
    """Whether a message is a response (a result or a JSON-RPC error) from the server, or
    from the proxy answering for it."""
    return (
        sender in ANSWERERS
        and message.get("method") is None
        and "id" in message
        and ("result" in message or "error" in message)
    )


class Pairing(Generic[T]):
    """The calls waiting for their answer, by id. The first answer wins: a later copy (the
    proxy's extended answer to the agent) pairs with nothing; a reused id pairs with its
    latest call."""

    def __init__(self) -> None:
        self._waiting: dict[str, T] = {}

    def sent(self, call_id: str, call: T) -> None:
        self._waiting[call_id] = call

    def waiting(self, call_id: str) -> T | None:
        """The call `call_id` names, while it waits for its answer."""
        return self._waiting.get(call_id)

    def answered(self, call_id: str) -> T | None:
        """The call an answer with this id answers (None: no call waits for it)."""
        return self._waiting.pop(call_id, None)
