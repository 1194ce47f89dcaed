"""The lookups' block, and adding it to a server's answer without rewriting the server's bytes.

The flow hands the agent its own result with the lookups appended. Parsing the answer and
serialising it again would change what the server said: a lone surrogate (`"\\ud800"`) cannot
be encoded back, `1e400` comes out as `Infinity` (not JSON), and numbers, escapes and key
order may all differ. So the answer's bytes are kept and the new item is inserted just before
the `]` that closes `result.content` — everything else is the server's, byte for byte.

JSON's structural characters are ASCII and never occur inside a UTF-8 multi-byte sequence, so
the line is scanned as bytes. A key is compared as JSON reads it (escapes decoded); when a key
occurs twice the last one counts, as Python's parser (and so the flow) saw it.
"""

from __future__ import annotations

import json

APPENDIX = "--- Also looked up automatically (current results; no need to repeat these calls) ---"
_WS = b" \t\r\n"
_SCALAR_END = b",]}" + _WS


class SpliceError(ValueError):
    """The answer has no place for the item (its `result` is not an object, or its
    `content` not a list), or is not the JSON it should be."""


def _skip_ws(data: bytes, i: int) -> int:
    while i < len(data) and data[i] in _WS:
        i += 1
    return i


def _string_end(data: bytes, i: int) -> int:
    """The index just past the string that opens at `i`."""
    i += 1
    while True:
        quote = data.find(b'"', i)
        if quote < 0:
            raise SpliceError("a string is not closed")
        backslashes = 0
        while data[quote - 1 - backslashes] == 0x5C:  # \
            backslashes += 1
        if backslashes % 2 == 0:
            return quote + 1
        i = quote + 1


def _value_end(data: bytes, i: int) -> int:
    """The index just past the value that starts at `i` (without recursion: depth counted)."""
    opening = data[i : i + 1]
    if opening == b'"':
        return _string_end(data, i)
    if opening not in (b"{", b"["):
        while i < len(data) and data[i] not in _SCALAR_END:
            i += 1
        return i
    depth = 0
    while i < len(data):
        char = data[i]
        if char == 0x22:  # "
            i = _string_end(data, i)
            continue
        if char in b"{[":
            depth += 1
        elif char in b"}]":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise SpliceError("a value is not closed")


def _members(data: bytes, i: int) -> dict[str, tuple[int, int]]:
    """An object's members (that opens at `i`): key -> (value start, value end)."""
    found: dict[str, tuple[int, int]] = {}
    i = _skip_ws(data, i + 1)
    if data[i : i + 1] == b"}":
        return found
    while True:
        if data[i : i + 1] != b'"':
            raise SpliceError("an object's key is not a string")
        key_end = _string_end(data, i)
        key = json.loads(data[i:key_end])
        i = _skip_ws(data, key_end)
        if data[i : i + 1] != b":":
            raise SpliceError("a key is not followed by `:`")
        start = _skip_ws(data, i + 1)
        end = _value_end(data, start)
        found[key] = (start, end)
        i = _skip_ws(data, end)
        if data[i : i + 1] == b"}":
            return found
        if data[i : i + 1] != b",":
            raise SpliceError("members are not separated by `,`")
        i = _skip_ws(data, i + 1)


def append_content(line: bytes, item: bytes) -> bytes:
    """`line` (one JSON-RPC answer, with its line ending) with `item` (one JSON value) added
    at the end of `result.content` (a result without `content` gets `"content":[item]` first
    thing); SpliceError when `result` is not an object or its `content` not a list."""
    start = _skip_ws(line, 0)
    if line[start : start + 1] != b"{":
        raise SpliceError("the answer is not a JSON object")
    result = _members(line, start).get("result")
    if result is None or line[result[0] : result[0] + 1] != b"{":
        raise SpliceError("the answer's `result` is not an object")
    members = _members(line, result[0])
    content = members.get("content")
    if content is None:  # a result without content gets one, holding the item alone
        at = result[0] + 1
        return line[:at] + b'"content":[' + item + b"]" + (b"," if members else b"") + line[at:]
    first, close = content[0], content[1] - 1
    if line[first : first + 1] != b"[":
        raise SpliceError("the answer's `result.content` is not a list")
    empty = _skip_ws(line, first + 1) == close
    return line[:close] + (b"" if empty else b",") + item + line[close:]


def encoded(value, **options) -> bytes:
    """`value` as JSON in UTF-8; a lone surrogate (which UTF-8 cannot hold) kept as its JSON
    escape, as the server sent it."""
    try:
        return json.dumps(value, ensure_ascii=False, **options).encode()
    except UnicodeEncodeError:
        return json.dumps(value, ensure_ascii=True, **options).encode()


def lookups_item(made: list[tuple[str, dict, bool, str]], budget: int) -> bytes:
    """One text item holding the lookups' results (tool, arguments, ok, text), at most
    `budget` characters of text: a long result is cut with a note saying so."""
    text, left = APPENDIX, budget - len(APPENDIX)
    for tool, arguments, ok, found in made:
        shown = json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))
        head = f"\n\n{tool} {shown}{'' if ok else ' (error)'}:\n"
        if len(head) + len(found) > left:
            keep = max(0, left - len(head) - 80)
            found = (
                found[:keep] + f"\n[... cut: {len(found) - keep} more characters; "
                "call the tool to see all]"
            )
        text += head + found
        left = budget - len(text)
    return encoded({"type": "text", "text": text}, separators=(",", ":"))
