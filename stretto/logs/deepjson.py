"""JSON at any depth: the value `json.loads` gives, without its recursion limit.

Python's scanner recurses once per level of nesting, so valid JSON nested about 1,000 deep
raises RecursionError, while hosts written in JavaScript (`JSON.parse`) and DuckDB read any
depth. What a server says and the proxy forwards must be logged as the JSON it is, and read
back as JSON, whatever its depth: `loads_deep` walks arrays and objects with a stack of its
own and leaves each scalar (string, number, literal) to the C scanner, so its values and its
errors are those of `json.loads`. It is the slower path, for the lines the scanner refuses
with RecursionError (the proxy imports it only then).
"""

from __future__ import annotations

from json import JSONDecodeError, JSONDecoder, decoder

scanstring = decoder.scanstring  # type: ignore[attr-defined]  # (not in the stubs)

_WHITESPACE = " \t\n\r"


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


# json.loads's own scanner (the C one), for the scalars; and one that refuses NaN, ±Infinity
_SCAN = JSONDecoder().scan_once  # type: ignore[attr-defined]
_SCAN_STRICT = JSONDecoder(parse_constant=_reject_constant).scan_once  # type: ignore[attr-defined]


def loads_deep(text: str, *, allow_nan: bool = True) -> object:
    """The one JSON value in `text`, at any depth; ValueError (a JSONDecodeError) if `text` is
    not one. `allow_nan=False` refuses NaN and ±Infinity, as the proxy does."""
    scan = _SCAN if allow_nan else _SCAN_STRICT
    end = len(text)
    containers: list[list | dict] = []  # the arrays and objects open around the position
    keys: list[str] = []  # the key each open object is reading the value of ("" for arrays)
    at = _skip(text, 0)
    while True:
        # a value starts at `at`
        char = text[at : at + 1]
        if char == "[":
            at = _skip(text, at + 1)
            if text[at : at + 1] != "]":
                containers.append([])
                keys.append("")
                continue
            value: object = []
            at += 1
        elif char == "{":
            at = _skip(text, at + 1)
            if text[at : at + 1] != "}":
                key, at = _key(text, at)
                containers.append({})
                keys.append(key)
                continue
            value = {}
            at += 1
        else:
            try:
                value, at = scan(text, at)
            except StopIteration:
                raise JSONDecodeError("Expecting value", text, at) from None
        # the value is whole: it goes into its container, and what it ends is closed
        while True:
            if not containers:
                at = _skip(text, at)
                if at != end:
                    raise JSONDecodeError("Extra data", text, at)
                return value
            container = containers[-1]
            if type(container) is list:
                container.append(value)
            else:
                container[keys[-1]] = value  # type: ignore[call-overload]
            at = _skip(text, at)
            char = text[at : at + 1]
            if char == ",":
                at = _skip(text, at + 1)
                if type(container) is dict:
                    keys[-1], at = _key(text, at)
                break  # the next value of the container
            if char != ("]" if type(container) is list else "}"):
                raise JSONDecodeError("Expecting ',' delimiter", text, at)
            at += 1
            value = containers.pop()
            keys.pop()


def _skip(text: str, at: int) -> int:
    end = len(text)
    while at < end and text[at] in _WHITESPACE:
        at += 1
    return at


def _key(text: str, at: int) -> tuple[str, int]:
    """An object's key at `at` and its colon: the key and where its value starts."""
    if text[at : at + 1] != '"':
        raise JSONDecodeError("Expecting property name enclosed in double quotes", text, at)
    key, at = scanstring(text, at + 1, True)
    at = _skip(text, at)
    if text[at : at + 1] != ":":
        raise JSONDecodeError("Expecting ':' delimiter", text, at)
    return key, _skip(text, at + 1)
