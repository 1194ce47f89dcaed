"""A small MCP server for tests, written with the `mcp` SDK.

Tools: `lookup` (read-only) and `update` (a write) echo their arguments; `fail` always
fails; `slow` sleeps `delay_ms`; `big` returns `size` bytes of text. Runs on stdio, or with
`--http PORT` as a Streamable HTTP server on 127.0.0.1 (`--json` for plain JSON answers).
"""

from __future__ import annotations

import argparse
import json
import time

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

READ = ToolAnnotations(readOnlyHint=True)
WRITE = ToolAnnotations(readOnlyHint=False)

server = MCPServer(
    "stretto-test-demo", instructions="A server for stretto's tests.", log_level="WARNING"
)


@server.tool(description="Look a key up; echoes its arguments.", annotations=READ)
def lookup(key: str, detail: str = "") -> str:
    return json.dumps({"key": key, "detail": detail, "found": f"value-of-{key}"})


@server.tool(description="Change a record; echoes its arguments.", annotations=WRITE)
def update(key: str, value: str) -> str:
    return json.dumps({"key": key, "value": value, "status": "updated"})


@server.tool(description="Always fails.", annotations=READ)
def fail(reason: str = "asked to fail") -> str:
    raise ToolError(reason)


@server.tool(description="Answers after delay_ms milliseconds.", annotations=READ)
def slow(delay_ms: int = 200) -> str:
    time.sleep(delay_ms / 1000)  # the latency is the tool's whole point
    return f"slept {delay_ms} ms"


@server.tool(description="Returns size bytes of text.", annotations=READ)
def big(size: int = 1_000_000) -> str:
    return "x" * size


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, metavar="PORT")
    parser.add_argument("--json", action="store_true", help="answer with JSON, not SSE")
    args = parser.parse_args()
    if args.http is None:
        server.run()
    else:
        server.run("streamable-http", host="127.0.0.1", port=args.http, json_response=args.json)


if __name__ == "__main__":
    main()
