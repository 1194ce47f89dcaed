"""τ²-bench's files other than its results (../shared/spec/formats.md §5.8): the split file
(which tasks train, which test) and the tools file (each domain's tools and their kinds),
each tool as the MCP tool a `tools/list` answer would list. Every τ²-bench file, results
included (stretto.logs.tau2), is read by `load_json`, which also takes it gzip-compressed.
"""

from __future__ import annotations

import gzip
import json
import re
import zlib
from pathlib import Path
from typing import Any

from stretto.logs.sessionlog import LogError

# Python annotations of τ²-bench tool parameters -> JSON Schema types.
_SIMPLE_TYPES = {
    "str": "string",
    "int": "integer",
    "float": "number",
    "bool": "boolean",
    "dict": "object",
    "list": "array",
}


GZIP_MAGIC = b"\x1f\x8b"  # how a gzip file starts (RFC 1952)


def load_json(path: Path) -> tuple[Any, bytes]:
    """A JSON file's value and its bytes; a gzip-compressed file (e.g. `runs.json.gz`) is read
    as the JSON it holds, so its bytes — and the sessions' names made from them — are those
    of the uncompressed file."""
    try:
        data = path.read_bytes()
        if data[:2] == GZIP_MAGIC:
            data = gzip.decompress(data)
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise LogError(path, None, f"not a readable gzip file ({exc})") from None
    except OSError as exc:
        raise LogError(path, None, f"cannot read: {exc.strerror or exc}") from exc
    try:
        return json.loads(data), data
    except (ValueError, RecursionError) as exc:
        raise LogError(path, None, f"not JSON ({exc})") from None


def json_kind(value: Any) -> str:
    """What a JSON value is, for a message: an object, an array, a string or a scalar."""
    kinds: dict[type, str] = {dict: "an object", list: "an array", str: "a string"}
    return kinds.get(type(value), "a scalar")


def read_split(path: str | Path) -> dict[str, set[str]]:
    """A τ²-bench split file (`{"train": [task ids], "test": [...], ...}`): each split's task
    ids, as text."""
    path = Path(path)
    value, _ = load_json(path)
    if not isinstance(value, dict):
        raise LogError(
            path,
            None,
            f'not a τ²-bench split file: expected an object {{"train": [task ids], "test": '
            f"[task ids]}}, got {json_kind(value)}",
        )
    for name in ("train", "test"):
        if name not in value:
            raise LogError(path, None, "missing; this is not a τ²-bench split file", name)
    splits: dict[str, set[str]] = {}
    for name, ids in value.items():
        if not isinstance(ids, list) or not all(isinstance(i, str | int) for i in ids):
            raise LogError(path, None, "expected a list of task ids", name)
        splits[name] = {str(i) for i in ids}
    return splits


def load_tools(tools: str | Path | dict) -> dict[str, list[dict]]:
    """A τ²-bench tools file (`{"domains": {domain: {"tools": [...]}}}`, e.g.
    tau2_tools.json) or its content: each domain's tool entries."""
    path = Path(tools) if isinstance(tools, str | Path) else Path("<tools>")
    value = load_json(path)[0] if isinstance(tools, str | Path) else tools
    domains = value.get("domains") if isinstance(value, dict) else None
    if not isinstance(domains, dict):
        raise LogError(path, None, "missing; this is not a τ²-bench tools file", "domains")
    out: dict[str, list[dict]] = {}
    for domain, entry in domains.items():
        entries = entry.get("tools") if isinstance(entry, dict) else None
        if not isinstance(entries, list):
            raise LogError(path, None, "expected a list of tools", f"domains.{domain}.tools")
        for index, tool in enumerate(entries):
            if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
                where = f"domains.{domain}.tools[{index}].name"
                raise LogError(path, None, "expected a tool with a name", where)
            if tool.get("type", "generic") not in ("read", "write", "generic"):
                where = f"domains.{domain}.tools[{index}].type"
                raise LogError(path, None, "expected read, write or generic", where)
        out[domain] = entries
    return out


def _annotation_type(annotation: Any) -> str | list[str] | None:
    """The JSON type of a parameter's Python annotation; None when it is not plain."""
    if not isinstance(annotation, str):
        return None
    text = annotation.replace(" ", "")
    wrapped = re.fullmatch(r"(Optional|Union)\[(.*)\]", text)
    members = _split_union(wrapped.group(2)) if wrapped else _split_union(text)
    if wrapped and wrapped.group(1) == "Optional":
        members.append("None")
    kinds: list[str] = []
    for member in members:
        if member == "None":
            continue
        head = re.match(r"(\w+)", member)
        name = head.group(1).lower() if head else ""
        kind = _SIMPLE_TYPES.get(name)
        if kind is None:
            return None  # a class or alias of the domain's: its shape is not known here
        if kind not in kinds:
            kinds.append(kind)
    if not kinds:
        return None
    return kinds[0] if len(kinds) == 1 else kinds


def _split_union(text: str) -> list[str]:
    """Top-level members of `a|b` or `a,b` (inside Union[...]), brackets respected."""
    members, depth, start = [], 0, 0
    for index, char in enumerate(text):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        elif char in "|," and depth == 0:
            members.append(text[start:index])
            start = index + 1
    members.append(text[start:])
    return [m for m in members if m]


def mcp_tool(entry: dict) -> dict:
    """A τ²-bench tool entry as an MCP tool of a `tools/list` answer: `readOnlyHint` true for a
    read, false for a write, none for a generic tool (our `generic` kind)."""
    properties: dict[str, dict] = {}
    required: list[str] = []
    for param in entry.get("params") or []:
        if not isinstance(param, dict) or not isinstance(param.get("name"), str):
            continue
        spec: dict[str, Any] = {}
        kind = _annotation_type(param.get("annotation"))
        if kind is not None:
            spec["type"] = kind
        if isinstance(param.get("description"), str) and param["description"]:
            spec["description"] = param["description"]
        if param.get("required"):
            required.append(param["name"])
        elif param.get("default") is not None:
            spec["default"] = param["default"]
        properties[param["name"]] = spec
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    tool: dict[str, Any] = {"name": entry["name"]}
    if isinstance(entry.get("summary"), str) and entry["summary"]:
        tool["description"] = entry["summary"]
    tool["inputSchema"] = schema
    if entry.get("type") in ("read", "write"):
        tool["annotations"] = {"readOnlyHint": entry["type"] == "read"}
    return tool


def agent_tools(entries: list[dict]) -> list[dict]:
    """The MCP tools the agent may call: the domain's tools of requestor `assistant`."""
    return [mcp_tool(e) for e in entries if (e.get("requestor") or "assistant") == "assistant"]
