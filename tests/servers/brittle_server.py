"""A small MCP server on stdio in plain Python (no SDK) whose answers attack its host. Tools:

- `deep` (read-only): answers with a valid result nested `depth` arrays deep (1,000 unless
  the arguments say), on one line: `{"content":[...],"isError":false,"deep":[[[...]]]}`;
- `tear`: writes the first half of its answer, no end of line, and exits with status 3 (a
  server that dies in the middle of a line).
"""

import json
import os
import sys

TOOLS = [
    {
        "name": "deep",
        "description": "Answers with a deeply nested value.",
        "inputSchema": {"type": "object"},
        "annotations": {"readOnlyHint": True},
    },
    {
        "name": "tear",
        "description": "Dies half-way through its answer.",
        "inputSchema": {"type": "object"},
    },
]


def line(message: dict) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


def deep_answer(request_id, depth: int) -> bytes:
    """The answer's line, built as text: json.dumps itself stops at ~1,000 levels."""
    content = [{"type": "text", "text": f"nested {depth} deep"}]
    head = line({"jsonrpc": "2.0", "id": request_id, "result": {"content": content}})
    # ..."result":{"content":[...]}}\n -> ...{"content":[...],"isError":false,"deep":[[...]]}}\n
    nested = b"[" * depth + b"]" * depth
    return head[: -len(b"}}\n")] + b',"isError":false,"deep":' + nested + b"}}\n"


def main() -> None:
    out = sys.stdout.buffer
    for text in sys.stdin.buffer:
        message = json.loads(text)
        method, request_id = message.get("method"), message.get("id")
        if method == "initialize":
            result = {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "stretto-test-brittle", "version": "1"},
            }
            out.write(line({"jsonrpc": "2.0", "id": request_id, "result": result}))
        elif method == "tools/list":
            out.write(line({"jsonrpc": "2.0", "id": request_id, "result": {"tools": TOOLS}}))
        elif method == "tools/call":
            name, arguments = message["params"]["name"], message["params"].get("arguments", {})
            if name == "tear":
                content = [{"type": "text", "text": "never finished"}]
                whole = line({"jsonrpc": "2.0", "id": request_id, "result": {"content": content}})
                out.write(whole[: len(whole) // 2])
                out.flush()
                os._exit(3)
            out.write(deep_answer(request_id, int(arguments.get("depth", 1000))))
        elif request_id is not None:
            out.write(line({"jsonrpc": "2.0", "id": request_id, "result": {}}))
        out.flush()


if __name__ == "__main__":
    main()
