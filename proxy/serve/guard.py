"""What the proxy will never call: the checks a lookup passes before it is sent.

A flow is data someone may have edited, and a result is data the server (or whoever wrote
into it) controls. So a lookup is made only when the server's own tools/list in this session
says the tool is read-only — `readOnlyHint: true`; a tool without the hint only when the
operator named it (`--flow-tools`, or a read in the manifest learning was given, kept in the
flow as `manifest.read_by_operator`) — and its input contract is the one the flow learned;
and only with arguments that satisfy the tool's inputSchema as listed. (That each value taken
from a result looks like training's values is the binding's own rule: stretto.model.shape.)
"""

from __future__ import annotations

from stretto.logs.toollist import GENERIC, READ, WRITE, ToolInfo

SHOWN = 200  # a schema's complaint is quoted up to this many characters


def flow_refusal(flow: dict, allowed: set[str] | None, tool: str) -> str | None:
    """Why the flow and --flow-tools (`allowed`) do not let `tool` be looked up, or None."""
    if flow["manifest"]["tools"].get(tool) != READ:
        return "the flow does not know it as a read"
    if allowed is not None and tool not in allowed:
        return "not in --flow-tools"
    return None


def server_refusal(
    flow: dict, allowed: set[str] | None, listed: dict[str, ToolInfo] | None, tool: str
) -> str | None:
    """Why what the server listed in this session (None: nothing) does not let `tool` be
    looked up, or None."""
    if listed is None:
        return "the server's tools/list could not be had, so nothing is known read-only"
    info = listed.get(tool)
    if info is None:
        return "the server does not list it"
    if info.kind == WRITE:
        return "the server marks it readOnlyHint: false"
    named = (allowed is not None and tool in allowed) or tool in flow["manifest"].get(
        "read_by_operator", []
    )
    if info.kind == GENERIC and not named:
        return (
            "the server does not mark it readOnlyHint: true "
            "(name it in --flow-tools or the manifest to look it up anyway)"
        )
    pinned = flow.get("contracts", {}).get(tool)
    if pinned is None:  # nothing to hold the server's contract to (learned from OTel, say)
        return "the flow has no input contract for it"
    if info.contract != pinned:
        return "its input contract changed"
    return None


def schema_refusal(schema: object, arguments: dict) -> str | None:
    """Why `arguments` do not satisfy the tool's listed inputSchema (type, pattern, enum,
    length, ...), or None. A schema that cannot be checked lets nothing through."""
    if not isinstance(schema, dict):
        return None  # the contract check already held the flow to what it learned
    import jsonschema  # loaded with the flow already; only a lookup needs it

    try:
        kind = jsonschema.validators.validator_for(schema)
        kind.check_schema(schema)
        error = jsonschema.exceptions.best_match(kind(schema).iter_errors(arguments))
    except Exception as exc:  # noqa: BLE001 - a bad pattern, a $ref out of reach, a deep schema
        return f"the server's inputSchema cannot be checked ({type(exc).__name__})"
    if error is None:
        return None
    where = "".join(f"[{p!r}]" if isinstance(p, int) else f".{p}" for p in error.path)
    said = error.message if len(error.message) <= SHOWN else error.message[:SHOWN] + "…"
    return f"the arguments do not satisfy the server's inputSchema at `${where}`: {said}"
