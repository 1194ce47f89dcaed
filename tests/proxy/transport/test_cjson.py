"""proxy.cjson gives what the json package gives (and refuses what it refuses, and NaN)."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.cjson import dumps_compact, dumps_string, loads_strict
from proxy.record.recorder import parse_json_line

VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(VALUES)
def test_dumps_and_loads_agree_with_json(value) -> None:
    text = dumps_compact(value)
    assert text == json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    assert loads_strict(text) == json.loads(text)
    spaced = json.dumps(value, indent=1)
    assert loads_strict(f" \t{spaced}\r\n") == json.loads(spaced)


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_strings_and_any_text(text: str) -> None:
    assert dumps_string(text) == json.dumps(text, ensure_ascii=False)
    try:
        expected = json.loads(text)
    except ValueError:
        with pytest.raises((ValueError, StopIteration)):
            loads_strict(text)
    else:
        if isinstance(expected, float) and not math.isfinite(expected):
            with pytest.raises(ValueError):
                loads_strict(text)
        else:
            assert loads_strict(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        " ",
        "{",
        '{"a":1} x',
        "[1,]",
        "NaN",
        "-Infinity",
        '{"a":NaN}',
        "\ufeff{}",
        "01",
        "{'a':1}",
    ],
)
def test_what_is_not_json_is_refused(text: str) -> None:
    with pytest.raises((ValueError, StopIteration)):
        loads_strict(text)


def test_a_line_is_json_or_raw_as_the_log_says() -> None:
    assert parse_json_line(b'{"a": [1, 2]}\r\n') == ({"a": [1, 2]}, b'{"a": [1, 2]}')
    assert parse_json_line(b"[1]") == ([1], b"[1]")
    for line in (b"\n", b"  \n", b"NaN\n", b"\xff\n", b"{\n", b'{"a":1}{"b":2}\n'):
        assert parse_json_line(line) is None, line


def nested(depth: int, inner: str = "1") -> str:
    return '{"deep":' + "[" * depth + inner + "]" * depth + "}"


def depth_of(value: object) -> int:
    value, depth = value["deep"], 0  # type: ignore[index]
    while isinstance(value, list):
        value, depth = value[0] if value else None, depth + 1
    return depth


@pytest.mark.parametrize("depth", [1_000, 100_000])
def test_valid_json_at_any_depth_is_json(depth: int) -> None:
    """Python's scanner gives up near 1,000 levels (RecursionError); a JavaScript host reads
    any depth, and so does the log: what was valid is logged as a message, not as raw."""
    text = nested(depth)
    assert depth_of(loads_strict(text)) == depth
    line = text.encode() + b"\r\n"
    parsed = parse_json_line(line)
    assert parsed is not None and bytes(parsed[1]) == text.encode()
    assert depth_of(parsed[0]) == depth


@pytest.mark.parametrize("inner", ["NaN", "1,", "-", "'a'", '"\x01"'])
def test_what_is_not_json_is_refused_at_any_depth(inner: str) -> None:
    with pytest.raises(ValueError):
        loads_strict(nested(1_000, inner))
    assert parse_json_line(nested(1_000, inner).encode() + b"\n") is None
    assert parse_json_line(b"[" * 2_000 + b"]" * 1_999 + b"\n") is None
