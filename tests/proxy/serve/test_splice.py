"""Adding the lookups' item to a server's answer without rewriting the server's bytes."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.serve.splice import SpliceError, append_content

ITEM = b'{"type":"text","text":"more"}'

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=150, deadline=None)
@given(
    content=st.lists(json_values, max_size=4),
    before=st.dictionaries(st.text().filter(lambda k: k != "content"), json_values, max_size=3),
    after=st.dictionaries(st.text().filter(lambda k: k != "content"), json_values, max_size=3),
    spaced=st.booleans(),
)
def test_only_the_item_is_added(content, before, after, spaced) -> None:
    result = {**before, "content": content, **after}
    answer = {"jsonrpc": "2.0", "id": 7, "result": result}
    separators = (", ", ": ") if spaced else (",", ":")
    line = json.dumps(answer, separators=separators, ensure_ascii=spaced).encode() + b"\n"
    out = append_content(line, ITEM)
    assert json.loads(out) == {
        **answer,
        "result": {**result, "content": [*content, {"type": "text", "text": "more"}]},
    }
    start = out.index(ITEM)
    assert out[:start] in (line[:start], line[: start - 1] + b",")  # nothing before changed
    assert out[start + len(ITEM) :] == line[len(line) - len(out) + start + len(ITEM) :]


def test_the_servers_own_spelling_stays() -> None:
    line = (
        b'{"id":1,"result":{"c\\u006fntent":[{"type":"text","text":"\\ud800 ] ["}],'
        b'"_meta":{"n":1e400,"m":1.50}} }\r\n'
    )
    out = append_content(line, ITEM)
    assert out == line.replace(b'"}],', b'"},' + ITEM + b"],")
    # the last of two `content`s counts, as Python's parser reads it
    twice = b'{"result":{"content":"x","content":[]}}\n'
    assert append_content(twice, ITEM) == b'{"result":{"content":"x","content":[' + ITEM + b"]}}\n"
    bare = b'{"id":1,"result":{"isError":false}}\n'
    assert (
        append_content(bare, ITEM)
        == b'{"id":1,"result":{"content":[' + ITEM + b'],"isError":false}}\n'
    )
    assert append_content(b'{"result":{}}', ITEM) == b'{"result":{"content":[' + ITEM + b"]}}"


@pytest.mark.parametrize(
    ("line", "why"),
    [
        (b'{"result":{"content":"text"}}', "not a list"),
        (b'{"result":[1]}', "not an object"),
        (b'{"error":{"code":1}}', "not an object"),
        (b"[1]", "not a JSON object"),
    ],
)
def test_no_place_for_the_item_is_said(line: bytes, why: str) -> None:
    with pytest.raises(SpliceError, match=why):
        append_content(line, ITEM)
