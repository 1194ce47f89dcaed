"""A small MCP server on stdio in plain Python (no SDK: it starts in a few milliseconds, so
tests and benches can run many at once). Tools:

- `echo` (read-only): answers with its arguments, as JSON text;
- `notify`: says `notifications/message` with its arguments, then answers;
- `ask`: asks the host `roots/list`, and answers with what the host said.
"""

import json
import sys

TOOLS = [
    {
        "name": "echo",
        "description": "Answers with its arguments.",
        "inputSchema": {"type": "object"},
        "annotations": {"readOnlyHint": True},
    },
    {
        "name": "notify",
        "description": "Says something, then answers.",
        "inputSchema": {"type": "object"},
    },
    {
        "name": "ask",
        "description": "Asks the host for its roots.",
        "inputSchema": {"type": "object"},
    },
]


def write(message: dict) -> None:
    sys.stdout.write(json.dumps(message, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def text_result(request_id, value) -> dict:
    content = [{"type": "text", "text": json.dumps(value, separators=(",", ":"))}]
    return {"jsonrpc": "2.0", "id": request_id, "result": {"content": content, "isError": False}}


def main() -> None:
    asked: dict = {}  # our request id -> the host's call waiting on its answer
    for line in sys.stdin:
        message = json.loads(line)
        method, request_id = message.get("method"), message.get("id")
        if method is None:  # an answer to one of our requests
            write(text_result(asked.pop(request_id), message.get("result")))
        elif method == "initialize":
            result = {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "stretto-test-rpc", "version": "1"},
            }
            write({"jsonrpc": "2.0", "id": request_id, "result": result})
        elif method == "tools/list":
            write({"jsonrpc": "2.0", "id": request_id, "result": {"tools": TOOLS}})
        elif method == "tools/call":
            name, arguments = message["params"]["name"], message["params"].get("arguments", {})
            if name == "notify":
                params = {"level": "info", "data": arguments}
                write({"jsonrpc": "2.0", "method": "notifications/message", "params": params})
            if name == "ask":
                asked[f"ask-{request_id}"] = request_id
                write({"jsonrpc": "2.0", "id": f"ask-{request_id}", "method": "roots/list"})
                continue
            write(text_result(request_id, arguments))
        elif request_id is not None:
            write({"jsonrpc": "2.0", "id": request_id, "result": {}})


if __name__ == "__main__":
    main()
