"""Small helpers for the JSON-RPC wire: whole writes, message walking, error responses."""

from __future__ import annotations

import os

from proxy.cjson import dumps_compact, dumps_string

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

# JSON-RPC "server error" range; used for answers the proxy gives on the server's behalf.
PROXY_ERROR_CODE = -32000
IOV_MAX = 1024  # pieces per writev (the log's and the outlet's batched writes)


def write_all(fd: int, data: bytes) -> None:
    """Write every byte to `fd` (a pipe may take a large line in several writes)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def drop_written(pieces: list, written: int) -> None:
    """Take the first `written` bytes off a list of byte pieces, in place (after a write of
    them that may have stopped anywhere)."""
    taken = 0
    while taken < len(pieces) and written >= len(pieces[taken]):
        written -= len(pieces[taken])
        taken += 1
    del pieces[:taken]
    if written:
        pieces[0] = memoryview(pieces[0])[written:]


def messages(value: object) -> Sequence[dict]:
    """The JSON-RPC messages in a parsed line: itself, or each object of a batch."""
    if isinstance(value, dict):
        return (value,)
    if isinstance(value, list):
        return [item for item in value if isinstance(item, dict)]
    return ()


def id_key(request_id: object) -> str:
    """A hashable key that tells 1 and "1" apart, as JSON-RPC does: the id's JSON text."""
    if isinstance(request_id, str):
        return dumps_string(request_id)
    if type(request_id) is int:  # not a bool
        return str(request_id)
    return dumps_compact(request_id)


def is_request(message: dict) -> bool:
    return isinstance(message.get("method"), str) and message.get("id") is not None


def is_response(message: dict) -> bool:
    return "method" not in message and ("result" in message or "error" in message)


def error_line(request_id: object, message: str, code: int = PROXY_ERROR_CODE) -> bytes:
    """A JSON-RPC error response as one line."""
    body = {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}
    return dumps_compact(body).encode() + b"\n"
