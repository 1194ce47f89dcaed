"""An MCP server for the flow's safety tests, speaking JSON-RPC over stdio by hand so that the
bytes of every answer are exactly the test's.

Tools:
- `search_docs(query)` (read-only): its result's text is the query's parts split at `|`, one
  per line — the test chooses what a result holds, hostile lines included. A part `<LONE>`
  is written as the JSON escape of a lone surrogate (`"\\ud800"`); a query containing
  `<HUGE>` adds `"_meta":{"size":1e400}` to the result (a number no float holds).
- `get_doc(id)` (read-only; `id` must match `^doc-[0-9]+$`): `Doc <id>.` (for `doc-13`
  followed by a lone surrogate)
- `peek_doc(id)` (no annotations: MCP reads readOnlyHint as false): `Peek <id>.`
- `delete_doc(id)` (readOnlyHint false): `Deleted <id>.`

Options: `--calls FILE` appends each tools/call's name and arguments, one JSON line each
(what the proxy really asked); `--hint TOOL=true|false|none` changes a tool's readOnlyHint
(`none`: no annotations); `--pages N` splits tools/list into N pages (nextCursor).
"""

from __future__ import annotations

import argparse
import json
import sys

SCHEMAS = {
    "search_docs": {
        "type": "object",
        "properties": {"query": {"type": "string"}},
        "required": ["query"],
    },
    "get_doc": {
        "type": "object",
        "properties": {"id": {"type": "string", "pattern": "^doc-[0-9]+$", "maxLength": 12}},
        "required": ["id"],
    },
    "peek_doc": {
        "type": "object",
        "properties": {"id": {"type": "string", "pattern": "^doc-[0-9]+$", "maxLength": 12}},
        "required": ["id"],
    },
    "delete_doc": {
        "type": "object",
        "properties": {"id": {"type": "string", "pattern": "^doc-[0-9]+$", "maxLength": 12}},
        "required": ["id"],
    },
}
HINTS: dict[str, bool | None] = {
    "search_docs": True,
    "get_doc": True,
    "peek_doc": None,
    "delete_doc": False,
}


def tools() -> list[dict]:
    out = []
    for name, schema in SCHEMAS.items():
        tool: dict = {"name": name, "description": f"{name} a document", "inputSchema": schema}
        if HINTS[name] is not None:
            tool["annotations"] = {"readOnlyHint": HINTS[name], "destructiveHint": not HINTS[name]}
        out.append(tool)
    return out


def answer(request_id, result_json: str) -> bytes:
    return f'{{"jsonrpc":"2.0","id":{json.dumps(request_id)},"result":{result_json}}}\n'.encode()


def text_result(text: str, extra: str = "") -> str:
    encoded = json.dumps(text).replace("<LONE>", "\\ud800")
    return f'{{"content":[{{"type":"text","text":{encoded}}}],"isError":false{extra}}}'


def call(name: str, arguments: dict) -> str:
    if name == "search_docs":
        query = str(arguments.get("query", ""))
        extra = ',"_meta":{"size":1e400}' if "<HUGE>" in query else ""
        parts = [p for p in query.replace("<HUGE>", "").split("|") if p]
        return text_result("\n".join(parts), extra)
    doc = arguments.get("id")
    said = {"get_doc": "Doc", "peek_doc": "Peek", "delete_doc": "Deleted"}[name]
    return text_result(f"{said} {doc}." + (" <LONE>" if doc == "doc-13" else ""))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls")
    parser.add_argument("--hint", action="append", default=[])
    parser.add_argument("--pages", type=int, default=1)
    args = parser.parse_args()
    for hint in args.hint:
        tool, _, value = hint.partition("=")
        HINTS[tool] = {"true": True, "false": False, "none": None}[value]
    out = sys.stdout.buffer
    for line in sys.stdin.buffer:
        message = json.loads(line)
        method, request_id = message.get("method"), message.get("id")
        if request_id is None:
            continue
        params = message.get("params") or {}
        if method == "initialize":
            result = json.dumps(
                {
                    "protocolVersion": params.get("protocolVersion", "2025-06-18"),
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "docs", "version": "1"},
                }
            )
        elif method == "tools/list":
            listed = tools()
            page = int(params.get("cursor") or 0)
            size = -(-len(listed) // args.pages)
            body: dict = {"tools": listed[page * size : (page + 1) * size]}
            if (page + 1) * size < len(listed):
                body["nextCursor"] = str(page + 1)
            result = json.dumps(body)
        elif method == "tools/call":
            name, arguments = params.get("name"), params.get("arguments") or {}
            if args.calls:
                with open(args.calls, "a") as calls:
                    calls.write(json.dumps({"name": name, "arguments": arguments}) + "\n")
            result = call(name, arguments)
        else:
            result = "{}"
        out.write(answer(request_id, result))
        out.flush()


if __name__ == "__main__":
    main()
