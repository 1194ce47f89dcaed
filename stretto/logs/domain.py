"""The one rule for a domain name. A domain becomes a folder or file name (logs/<domain>/,
flows/<domain>.flow.json, reports/<domain>/, the warehouse's domain=<domain> partitions), so
it must be a single, ordinary path component: letters, digits, `-`, `_` and `.`, not starting
with `.` or `-` (no `..`, no hidden files, nothing a command line reads as an option)."""

from __future__ import annotations

import re

DOMAIN_PATTERN = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
RULE = "letters, digits, `-`, `_` and `.`, not starting with `.` or `-`, at most 128 characters"
_DOMAIN = re.compile(DOMAIN_PATTERN)


class DomainError(ValueError):
    pass


def is_valid_domain(name: object) -> bool:
    return isinstance(name, str) and _DOMAIN.fullmatch(name) is not None


def check_domain(name: object) -> str:
    """`name` if it is a valid domain; else DomainError saying why."""
    if not is_valid_domain(name):
        raise DomainError(f"not a valid domain name: {name!r} ({RULE})")
    return name  # type: ignore[return-value]
