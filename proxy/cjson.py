"""JSON through the C functions behind the `json` package, without importing the package.

`import json` pulls in `re` (and with it `enum`, `functools`, `collections`): about 7 ms of a
proxy start-up that should cost the host nothing. The accelerator `_json` is what `json` itself
calls to scan and to encode; used directly it gives the same values and the same text
(tests/proxy/transport/test_cjson.py checks this against `json`) at a cost of ~0.4 ms. Only when
`_json` is missing (an interpreter built without it) does this fall back on `json`.
"""

from __future__ import annotations

_WHITESPACE = " \t\n\r"  # JSON's whitespace; nothing else may surround a value


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


class _Strict:
    """The scanner's settings, as `json.JSONDecoder()` has them, but NaN and ±Infinity refused."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = staticmethod(_reject_constant)


try:
    import _json
except ImportError:  # pragma: no cover - CPython always has it
    import json as _json_package

    def loads_strict(text: str) -> object:
        """The one JSON value in `text`; ValueError (or StopIteration) if it is not one."""
        try:
            return _json_package.loads(text, parse_constant=_reject_constant)
        except RecursionError:
            return _loads_deep(text)

    def dumps_compact(value: object) -> str:
        """`json.dumps(value, ensure_ascii=False, separators=(",", ":"))`."""
        return _json_package.dumps(value, ensure_ascii=False, separators=(",", ":"))

    def dumps_string(text: str) -> str:
        """`json.dumps(text, ensure_ascii=False)` for a str."""
        return _json_package.dumps(text, ensure_ascii=False)

else:
    _scan = _json.make_scanner(_Strict())  # type: ignore[arg-type]  # any object with these attributes
    _encode = _json.make_encoder(
        None,  # no check for circular references: the values are parsed JSON or built here
        None,  # type: ignore[arg-type]  # no default: other types are a TypeError, as in json.dumps
        _json.encode_basestring,  # ensure_ascii=False
        None,  # no indent
        ":",
        ",",
        False,  # sort_keys
        False,  # skipkeys
        True,  # allow_nan, as json.dumps
    )
    _encode_string = _json.encode_basestring

    def dumps_string(text: str) -> str:
        """`json.dumps(text, ensure_ascii=False)` for a str."""
        return _encode_string(text)

    def loads_strict(text: str) -> object:
        """The one JSON value in `text`; ValueError (or StopIteration) if it is not one."""
        if text.startswith("\ufeff"):
            raise ValueError("a byte-order mark is not JSON")  # json.loads refuses it too
        start = len(text) - len(text.lstrip(_WHITESPACE))
        try:
            try:
                value, end = _scan(text, start)
            except SystemError:
                # Python 3.11's scanner reports bad JSON with json.decoder's exception type,
                # which it can only find once that module is loaded: load it (once), ask again.
                import json.decoder  # noqa: F401

                value, end = _scan(text, start)
        except RecursionError:
            return _loads_deep(text)
        if end != len(text) and len(text.rstrip(_WHITESPACE)) != end:
            raise ValueError(f"extra data after the JSON value at {end}")
        return value

    def dumps_compact(value: object) -> str:
        """`json.dumps(value, ensure_ascii=False, separators=(",", ":"))`."""
        return "".join(_encode(value, 0))


def _loads_deep(text: str) -> object:
    """Valid JSON nested deeper than the scanner's recursion goes (~1,000 levels) is JSON all
    the same: read without recursion (loaded only then: it imports `json`)."""
    from stretto.logs.deepjson import loads_deep  # proxy start-up: it imports json

    return loads_deep(text, allow_nan=False)
