"""Property: whatever lines the host sends, the server gets exactly those bytes back out,
and the log holds every line, as JSON when it is JSON and as text when it is not."""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stretto.logs.sessionlog import read_session_log
from tests.conftest import echo_server, proxy

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=40),
)
params = st.dictionaries(
    st.text(max_size=10),
    st.recursive(
        scalars,
        lambda inner: (
            st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
        ),
        max_leaves=12,
    ),
    max_size=5,
)
rpc = st.one_of(
    st.builds(
        lambda i, m, p: {"jsonrpc": "2.0", "id": i, "method": m, "params": p},
        st.integers(0, 10**6) | st.text(max_size=8),
        st.sampled_from(["tools/call", "tools/list", "ping", "initialize"]),
        params,
    ),
    st.builds(
        lambda m, p: {"jsonrpc": "2.0", "method": m, "params": p},
        st.sampled_from(["notifications/progress", "notifications/cancelled"]),
        params,
    ),
    st.builds(lambda i, r: {"jsonrpc": "2.0", "id": i, "result": r}, st.integers(0, 99), params),
)


def encode(value: object, ascii_only: bool, spaced: bool) -> bytes:
    separators = (", ", ": ") if spaced else (",", ":")
    return json.dumps(value, ensure_ascii=ascii_only, separators=separators).encode()


json_lines = st.builds(
    encode, rpc | st.lists(rpc, min_size=1, max_size=4), st.booleans(), st.booleans()
)
text_lines = st.text(max_size=200).map(lambda t: t.replace("\n", " ").encode())
binary_lines = st.binary(max_size=200).map(lambda b: b.replace(b"\n", b" "))
long_lines = st.integers(100_000, 3_000_000).map(lambda n: b"L" * n)
endings = st.sampled_from([b"\n", b"\r\n"])
lines = st.lists(
    st.tuples(st.one_of(json_lines, json_lines, text_lines, binary_lines, long_lines), endings).map(
        lambda pair: pair[0] + pair[1]
    ),
    min_size=1,
    max_size=25,
)


def strict_json(text: bytes) -> tuple[bool, object]:
    def refuse(name: str) -> None:
        raise ValueError(name)

    try:
        return True, json.loads(text.decode("utf-8"), parse_constant=refuse)
    except (UnicodeDecodeError, ValueError):
        return False, None


@pytest.mark.slow  # a property over 30 drawn examples, each through a real proxy
@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(lines)
def test_every_byte_out_equals_every_byte_in_and_the_log_holds_every_line(
    sent: list[bytes],
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(tmp) / "logs"
        data = b"".join(sent)
        done = subprocess.run(
            proxy("--record", str(logs), server=echo_server()),
            input=data,
            capture_output=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout == data
        (log_path,) = logs.glob("*.jsonl")
        log = read_session_log(log_path)
    for sender in ("client", "server"):
        logged = [line for line in log.lines if line.sender == sender]
        assert len(logged) == len(sent)
        for line, original in zip(logged, sent, strict=True):
            text = original.rstrip(b"\r\n")
            is_json, value = strict_json(text) if text.strip() else (False, None)
            if is_json:
                assert line.raw is None and line.message == value
            else:
                assert line.raw == text.decode("utf-8", errors="replace")
