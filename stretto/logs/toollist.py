"""What a server's `tools/list` answer tells: each tool's kind, docs and input contract."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

READ, WRITE, GENERIC = "read", "write", "generic"
KINDS = (READ, WRITE, GENERIC)


@dataclass(frozen=True)
class ToolInfo:
    name: str
    kind: str  # read | write | generic
    summary: str = ""
    args: dict[str, str] = field(default_factory=dict)  # argument -> its description
    contract: str | None = None
    input_schema: Any = None


def kind_of(tool: dict) -> str:
    """`readOnlyHint` true -> read, false -> write, absent -> generic (unknown)."""
    annotations = tool.get("annotations")
    hint = annotations.get("readOnlyHint") if isinstance(annotations, dict) else None
    if hint is True:
        return READ
    if hint is False:
        return WRITE
    return GENERIC


def _collapse(text: Any) -> str:
    return re.sub(r"\s+", " ", text).strip() if isinstance(text, str) else ""


def contract_of(schema: Any) -> str | None:
    """`name:type` per input property, `!` when required, sorted, joined with ", "."""
    if not isinstance(schema, dict):
        return None
    properties = schema.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    required = schema.get("required")
    required = set(required) if isinstance(required, list) else set()
    parts = []
    for name, spec in properties.items():
        kind = spec.get("type") if isinstance(spec, dict) else None
        if isinstance(kind, str):
            text = kind
        elif isinstance(kind, list) and all(isinstance(k, str) for k in kind):
            text = "|".join(kind)
        else:
            text = "any"
        parts.append(f"{name}:{text}" + ("!" if name in required else ""))
    return ", ".join(sorted(parts))


def tool_info(tool: dict) -> ToolInfo | None:
    name = tool.get("name")
    if not isinstance(name, str) or not name:
        return None
    schema = tool.get("inputSchema")
    args = {}
    if isinstance(schema, dict) and isinstance(schema.get("properties"), dict):
        for arg, spec in schema["properties"].items():
            if isinstance(spec, dict) and _collapse(spec.get("description")):
                args[arg] = _collapse(spec.get("description"))
    return ToolInfo(
        name=name,
        kind=kind_of(tool),
        summary=_collapse(tool.get("description")),
        args=args,
        contract=contract_of(schema),
        input_schema=schema,
    )


def tools_from_result(result: Any) -> list[ToolInfo]:
    """The tools of one `tools/list` result (entries without a name are skipped)."""
    if not isinstance(result, dict) or not isinstance(result.get("tools"), list):
        return []
    infos = (tool_info(t) for t in result["tools"] if isinstance(t, dict))
    return [info for info in infos if info is not None]
