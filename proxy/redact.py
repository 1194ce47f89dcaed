"""Hide credential-looking values in what the session-log header records.

The header keeps the server command (or upstream URL) so a reader knows what was wrapped;
it must never keep the secrets people pass on command lines.
"""

from __future__ import annotations

import re

REDACTED = "<redacted>"

# Names of options, variables, headers and query keys whose values are secrets.
_SECRET_NAME = re.compile(
    r"(api[_-]?key|apikey|token|secret|passw(or)?d|pwd|credential|auth|bearer|"
    r"private[_-]?key|access[_-]?key|session[_-]?key|cookie|signature)",
    re.IGNORECASE,
)
# `Authorization: Bearer X`, `Bearer X`, `Basic X` anywhere in one argument.
_SCHEME_VALUE = re.compile(r"\b(Bearer|Basic|Token)\s+\S+", re.IGNORECASE)
_HEADER = re.compile(r"^\s*([A-Za-z0-9_-]+)\s*:\s*(.*)$")
_ASSIGNMENT = re.compile(r"^(-{0,2})([A-Za-z_][A-Za-z0-9_.-]*)=(.*)$", re.DOTALL)


def is_secret_name(name: str) -> bool:
    return bool(_SECRET_NAME.search(name))


def redact_url(url: str) -> str:
    """The URL without user, password, or credential-looking query values."""
    from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit  # only for URLs

    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if not parts.scheme or not parts.netloc:
        return url
    host = parts.hostname or ""
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port else "")
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode([(k, REDACTED if is_secret_name(k) else v) for k, v in pairs], safe="<>")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def _redact_one(arg: str) -> str:
    if "://" in arg and not arg.startswith("-"):
        return redact_url(arg)
    header = _HEADER.match(arg)
    if header and " " not in header.group(1) and is_secret_name(header.group(1)):
        value = header.group(2)
        scheme = _SCHEME_VALUE.match(value)
        kept = f"{scheme.group(1)} {REDACTED}" if scheme else REDACTED
        return f"{header.group(1)}: {kept}"
    assignment = _ASSIGNMENT.match(arg)
    if assignment:
        dashes, name, value = assignment.groups()
        if is_secret_name(name):
            return f"{dashes}{name}={REDACTED}"
        if "://" in value:
            return f"{dashes}{name}={redact_url(value)}"
        return arg
    return _SCHEME_VALUE.sub(lambda m: f"{m.group(1)} {REDACTED}", arg)


def redact_command(command: list[str]) -> list[str]:
    """The command with every credential-looking value replaced by `<redacted>`.

    Handles `--api-key X`, `--token=X`, `GITHUB_TOKEN=X`, `Authorization: Bearer X`, and URLs
    with a user, password or secret query value.
    """
    out: list[str] = []
    secret_follows = False
    for arg in command:
        if secret_follows and not arg.startswith("-"):
            out.append(REDACTED)
            secret_follows = False
            continue
        secret_follows = False
        if arg.startswith("-") and "=" not in arg and is_secret_name(arg.lstrip("-")):
            secret_follows = True
            out.append(arg)
            continue
        out.append(_redact_one(arg))
    return out
