"""`stretto init`: the MCP host configuration that wraps a server in stretto-proxy."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

HOSTS = {
    # host: (where its configuration lives, the key of its server table, a "type" field)
    "claude-desktop": (
        "claude_desktop_config.json (Settings > Developer > Edit Config)",
        "mcpServers",
        False,
    ),
    "claude-code": (".mcp.json in the project (or `claude mcp add-json`)", "mcpServers", True),
    "cursor": ("~/.cursor/mcp.json, or .cursor/mcp.json in the project", "mcpServers", False),
    "vscode": (".vscode/mcp.json in the workspace", "servers", True),
}


def server_name(command: list[str]) -> str:
    """A short name for the server, from its command: the package or program, no scope."""
    words = [w for w in command if not w.startswith("-")]
    candidates = [
        w
        for w in words
        if w not in ("npx", "uvx", "node", "python", "python3", "docker", "run", "-y")
    ]
    base = (candidates or words or ["server"])[0]
    base = Path(base).name.split("@")[0] or base.split("/")[-1]
    base = re.sub(r"^(mcp-server-|server-)", "", base)
    return re.sub(r"[^A-Za-z0-9_-]+", "-", base).strip("-") or "server"


def proxy_path() -> str:
    return str(Path(sys.executable).parent / "stretto-proxy")


def host_config(
    host: str,
    command: list[str],
    *,
    name: str,
    home: str,
    flow: str | None = None,
    decider: str | None = None,
) -> dict:
    """The JSON to put in the host's configuration."""
    if host not in HOSTS:
        raise ValueError(f"unknown host {host!r}; one of {', '.join(HOSTS)}")
    args = [
        "--record",
        f"{home}/logs/{name}",
        "--domain",
        name,
        "--context",
        f"{home}/context/{name}.jsonl",
    ]
    if flow:
        args += ["--flow", os.path.abspath(os.path.expanduser(flow))]
        if decider:
            args += ["--flow-decider", decider]
    entry: dict = {"command": proxy_path(), "args": [*args, "--", *command]}
    _, table, typed = HOSTS[host]
    if typed:
        entry = {"type": "stdio", **entry}
    return {table: {name: entry}}


def next_steps(host: str, name: str, home: str, flow: str | None) -> str:
    where = HOSTS[host][0]
    lines = [f"Put this in {where} and restart the host. Then:"]
    if flow:
        lines += [
            f"  - the proxy serves {flow}; its decisions go to {home}/logs/{name}/*.flow.jsonl",
            f"  - review the flow any time: stretto flow-show {flow}",
        ]
    else:
        lines += [
            f"  1. use the host as usual: each session is recorded in {home}/logs/{name}/",
            "  2. after a few sessions: stretto ingest",
            f"  3. stretto learn --sessions {home}/logs/{name} --domain {name} --habit-only "
            f"--out {home}/flows/{name}.flow.json",
            "  4. read it, then serve it: run this command again with "
            f"--flow {home}/flows/{name}.flow.json",
        ]
    lines.append(
        f"  (--context {home}/context/{name}.jsonl is for a host that writes the "
        "conversation there; without it the proxy still records every call)"
    )
    return "\n".join(lines)
