"""stretto.logs.deepjson reads what json.loads reads, the same values and the same refusals,
at any depth."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stretto.logs.deepjson import loads_deep

VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(VALUES, st.sampled_from([None, 0, 1]))
def test_values_agree_with_json(value, indent: int | None) -> None:
    text = json.dumps(value, indent=indent, ensure_ascii=bool(indent))
    assert loads_deep(text) == json.loads(text)
    assert loads_deep(f" \r\n\t{text} \n") == json.loads(text)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet='[]{}",:01-.eE tfnaulrsNI\\\n x'))
def test_any_text_is_read_or_refused_as_json_does(text: str) -> None:
    try:
        expected = json.loads(text)
    except ValueError as exc:
        with pytest.raises(ValueError) as caught:
            loads_deep(text)
        assert (caught.value.msg, caught.value.pos) == (exc.msg, exc.pos)  # type: ignore[attr-defined]
    else:
        got = loads_deep(text)
        if isinstance(expected, float) and math.isnan(expected):
            assert isinstance(got, float) and math.isnan(got)
        else:
            assert repr(got) == repr(expected)  # NaN inside, key order


def test_a_duplicate_key_keeps_the_last_value_in_the_first_place() -> None:
    text = '{"a":1,"b":2,"a":3}'
    assert list(loads_deep(text).items()) == list(json.loads(text).items())  # type: ignore[attr-defined]


def test_any_depth() -> None:
    depth = 200_000
    value = loads_deep('{"a":' + "[" * depth + '{"b":null}' + "]" * depth + "}")
    inner, levels = value["a"], 0  # type: ignore[index]
    while isinstance(inner, list):
        inner, levels = inner[0], levels + 1
    assert (levels, inner) == (depth, {"b": None})
    with pytest.raises(RecursionError):
        json.loads("[" * depth + "]" * depth)  # what it is for


def test_nan_is_refused_when_asked() -> None:
    assert math.isinf(loads_deep("[[-Infinity]]")[0][0])  # type: ignore[index]
    for text in ("NaN", "[[Infinity]]", '{"a":[-Infinity]}'):
        with pytest.raises(ValueError, match="is not JSON"):
            loads_deep(text, allow_nan=False)
