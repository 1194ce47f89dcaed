"""What the front of several servers (proxy.listen.fan) merges and rewrites: the servers'
`initialize` answers as one, the cursors of paged lists, and the name a message's prefix is
taken from."""

from __future__ import annotations

import copy
import json

from stretto import __version__


def encoded(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def renamed(line: bytes, message: dict, holder: dict, key: str, new: str) -> bytes:
    """`line` (the JSON of `message`) with holder[key], a string, replaced by `new`: in its
    bytes when the old string's JSON occurs there once, else the message written anew."""
    old = holder[key]
    for form in {json.dumps(old).encode(), json.dumps(old, ensure_ascii=False).encode()}:
        if line.count(form) == 1:
            return line.replace(form, json.dumps(new, ensure_ascii=False).encode())
    holder[key] = new
    try:
        return encoded(message)
    finally:
        holder[key] = old


def cursors(cursor: object) -> dict[str, str] | None:
    """Each server's cursor in one of ours, or None when it is not ours."""
    try:
        value = json.loads(cursor) if isinstance(cursor, str) else None
    except ValueError:
        return None
    more = value.get("stretto-fan") if isinstance(value, dict) else None
    if not isinstance(more, dict) or not all(isinstance(c, str) for c in more.values()):
        return None
    return more


def initialized(results: dict[str, dict]) -> dict:
    """The servers' initialize answers as one: the oldest protocol version (dates sort), the
    union of their capabilities, their instructions each under its server's name."""
    versions = sorted(
        r["protocolVersion"] for r in results.values() if isinstance(r.get("protocolVersion"), str)
    )
    capabilities: dict = {}
    for result in results.values():
        union(capabilities, result.get("capabilities") or {})
    merged: dict = {
        "protocolVersion": versions[0] if versions else None,
        "capabilities": capabilities,
        "serverInfo": {"name": f"stretto-proxy ({', '.join(results)})", "version": __version__},
    }
    notes = [
        f"{name}: {r['instructions']}"
        for name, r in results.items()
        if isinstance(r.get("instructions"), str) and r["instructions"]
    ]
    if notes:
        merged["instructions"] = "\n\n".join(notes)
    return merged


def union(into: dict, more: dict) -> None:
    """Capabilities merged: objects key by key, `true` wins."""
    for key, value in more.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            union(into[key], value)
        elif isinstance(value, dict):
            into[key] = copy.deepcopy(value)
        elif isinstance(value, bool):
            into[key] = bool(into.get(key)) or value
        elif key not in into:
            into[key] = value
