"""`stretto-proxy --listen ADDR --servers FILE`: the servers one listening proxy fronts.

FILE is JSONL, one server a line (blank lines and lines starting with `#` are skipped), so a
mistake is named by its line:

    {"name": "github", "command": ["npx", "-y", "github-mcp"], "env": {"GITHUB_TOKEN": "..."}}
    {"name": "docs", "url": "https://docs.example/mcp", "headers": {"Authorization": "DOCS_AUTH"}}

- `name` (required): letters, digits, `-`, `_`, `.`; unique. The host sees this server's tools
  as `name::tool`, and its log is written as `stretto-proxy --server-name name` writes it.
- `command` (a list of words, or one word) [+ `args`, a list of words] [+ `env`, an object
  of strings added to the proxy's environment for this server]; or
- `url`: a server over Streamable HTTP (as `--upstream URL`) [+ `headers`, an object naming
  for each header the environment variable that holds its value, as `--upstream-header`].
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from proxy.options import plain_name


class ServersFileError(ValueError):
    """What is wrong with a servers file, as `FILE:LINE: field: why` (or `FILE: why`)."""


@dataclass(frozen=True)
class ServerEntry:
    name: str
    command: list[str] = field(default_factory=list)  # empty for a server at `url`
    env: dict[str, str] = field(default_factory=dict)
    url: str | None = None
    headers: dict[str, str] = field(default_factory=dict)  # header -> environment variable

    def upstream_headers(self) -> list[str]:
        """The headers as `--upstream-header` specs (NAME=VAR)."""
        return [f"{name}={var}" for name, var in self.headers.items()]


def _words(value: object) -> list[str] | None:
    if isinstance(value, str) and value:
        return [value]
    if isinstance(value, list) and value and all(isinstance(w, str) and w for w in value):
        return list(value)
    return None


def _strings(value: object) -> dict[str, str] | None:
    if isinstance(value, dict) and all(isinstance(v, str) for v in value.values()):
        return dict(value)
    return None


def _entry(value: object, where: str) -> ServerEntry:
    def bad(field_name: str, why: str) -> ServersFileError:
        return ServersFileError(f"{where}: field `{field_name}`: {why}")

    if not isinstance(value, dict):
        raise ServersFileError(f"{where}: a server is a JSON object")
    unknown = sorted(set(value) - {"name", "command", "args", "env", "url", "headers"})
    if unknown:
        raise bad(unknown[0], "unknown (name, command, args, env, url, headers)")
    name = value.get("name")
    if not isinstance(name, str) or not name:
        raise bad("name", "required, a string")
    if not plain_name(name):
        raise bad("name", f"{name!r}: letters, digits, '-', '_' or '.' only (no '::')")
    has_command, has_url = "command" in value, "url" in value
    if has_command == has_url:
        raise bad("command", "give either `command` or `url`")
    if has_url:
        for only in ("args", "env"):
            if only in value:
                raise bad(only, "goes with `command`, not `url`")
        url = value["url"]
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise bad("url", "an http:// or https:// URL")
        headers = _strings(value.get("headers", {}))
        if headers is None or not all(headers.values()):
            raise bad("headers", "an object of header -> environment variable")
        return ServerEntry(name, url=url, headers=headers)
    if "headers" in value:
        raise bad("headers", "goes with `url`, not `command`")
    command = _words(value["command"])
    if command is None:
        raise bad("command", "a list of words (or one word)")
    args = value.get("args", [])
    if not isinstance(args, list) or (args and _words(args) is None):
        raise bad("args", "a list of words")
    env = _strings(value.get("env", {}))
    if env is None:
        raise bad("env", "an object of strings")
    return ServerEntry(name, command=command + args, env=env)


def read_servers(path: str) -> list[ServerEntry]:
    """The servers `path` names, in its order; ServersFileError says what is wrong."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ServersFileError(f"{path}: cannot read: {exc}") from exc
    servers: list[ServerEntry] = []
    seen: dict[str, int] = {}
    for number, text in enumerate(lines, 1):
        if not text.strip() or text.lstrip().startswith("#"):
            continue
        where = f"{path}:{number}"
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise ServersFileError(f"{where}: not JSON: {exc}") from None
        entry = _entry(value, where)
        if entry.name in seen:
            raise ServersFileError(
                f"{where}: field `name`: {entry.name!r} is named on line {seen[entry.name]} too"
            )
        seen[entry.name] = number
        servers.append(entry)
    if not servers:
        raise ServersFileError(f"{path}: names no server (one JSON object a line)")
    return servers
