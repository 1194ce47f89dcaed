"""Bad input never stops an ingest: every line is ingested, quarantined (with file, line and
reason) or dropped, and lines read = ingested + quarantined + dropped, file by file."""

from __future__ import annotations

import json
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stretto.logs.domain import DomainError, check_domain, is_valid_domain
from tests.conftest import PROXY
from tests.warehouse.faults import FAULTS, HEADER, PING, header
from tests.warehouse.helpers import ingest, rows
from warehouse import store
from warehouse.ingest.discover import discover
from warehouse.ingest.run import ingest_plan
from warehouse.layout import Layout


def test_lines_that_are_not_json_are_kept_as_raw_and_ingest_keeps_working(tmp_path: Path) -> None:
    """The proxy logs a host line that is not JSON (`hello`) or is blank as `raw`."""
    home = tmp_path / "home"
    done = subprocess.run(
        [PROXY, "--record", str(home / "logs/r"), "--", "cat"],
        input=b'{"jsonrpc":"2.0","id":1,"method":"ping"}\nhello\n\n',
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    meta = ingest(home)
    assert (meta["lines read"], meta["lines ingested"], meta["lines quarantined"]) == (7, 7, 0)
    raw = rows(home, "SELECT sender, body FROM messages WHERE kind = 'raw' ORDER BY seq")
    assert raw == [
        {"sender": "client", "body": "hello"},
        {"sender": "client", "body": ""},
        {"sender": "server", "body": "hello"},
        {"sender": "server", "body": ""},
    ]
    # later runs are fine, and so is a second session of the same kind
    subprocess.run(
        [PROXY, "--record", str(home / "logs/r"), "--", "cat"],
        input=b"hello again\n",
        capture_output=True,
        timeout=60,
    )
    assert ingest(home)["files read"] == 1
    assert rows(home, "SELECT count(*) AS n FROM sessions") == [{"n": 2}]


def test_per_line_faults_are_quarantined_or_dropped_and_the_run_goes_on(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "logs/x").mkdir(parents=True)
    for name, (content, *_) in FAULTS.items():
        (home / f"logs/x/{name}.jsonl").write_bytes(content)
    meta = ingest(home)
    assert meta["files read"] == len(FAULTS)
    assert meta["lines read"] == sum(f[1] for f in FAULTS.values())
    assert (
        meta["lines read"]
        == meta["lines ingested"] + meta["lines quarantined"] + meta["lines dropped"]
    )
    sessions = {
        r["session"]: r
        for r in rows(
            home,
            "SELECT session, lines_read, lines_ingested, lines_quarantined, lines_dropped "
            "FROM sessions",
        )
    }
    for name, (_, read, ingested, quarantined, dropped) in FAULTS.items():
        if ingested:
            got = sessions[name]
            assert (
                got["lines_read"],
                got["lines_ingested"],
                got["lines_quarantined"],
                got["lines_dropped"],
            ) == (read, ingested, quarantined, dropped), name
    quarantine = rows(home, "SELECT file, line, error, raw FROM quarantine ORDER BY file, line")
    by_file: dict[str, list[dict]] = {}
    for q in quarantine:
        by_file.setdefault(q["file"], []).append(q)
    assert [(q["line"], q["error"]) for q in by_file["logs/x/bad-utf8.jsonl"]] == [
        (3, "not valid UTF-8")
    ]
    bad_line = by_file["logs/x/bad-utf8.jsonl"][0]["raw"]
    assert bad_line == '{"t_ms":2,"from":"client","raw":"\\xff\\xfe"}'
    random = by_file["logs/x/random-text.jsonl"]
    assert [(q["line"], q["error"]) for q in random] == [
        (1, "line 1: not JSON"),
        (2, "line 1: not JSON"),
        (4, "line 1: not JSON"),
    ]
    # a file of blank lines is no loss: its lines are dropped, one note says why
    assert by_file["logs/x/only-newlines.jsonl"] == [
        {
            "file": "logs/x/only-newlines.jsonl",
            "line": None,
            "error": "empty: only blank lines, no header",
            "raw": None,
        }
    ]
    # the lone surrogate escape is valid JSON: kept as logged, its text readable
    (result,) = rows(home, "SELECT body FROM messages WHERE session = 'lone-surrogate' AND seq = 2")
    assert "a\\ud800b" in result["body"]
    (raw,) = rows(home, "SELECT body FROM messages WHERE session = 'lone-surrogate' AND seq = 3")
    assert raw["body"] == "\ufffd"
    # nothing breaks the next run
    assert ingest(home)["files read"] == 0


def test_a_key_after_the_message_in_the_proxys_form_is_read_as_json(tmp_path: Path) -> None:
    """A line that starts as stretto-proxy writes one but has another key after `message`:
    its message is the `message` value (it used to be the text up to the last brace, which
    stopped the whole batch when that text began with a brace)."""
    home = tmp_path / "home"
    (home / "logs/x").mkdir(parents=True)
    (home / "logs/x/k.jsonl").write_bytes(
        header("k")
        + b'\n{"t_ms":1,"from":"client","message":{"jsonrpc":"2.0","id":1,"method":"ping"},"n":2}'
        + b'\n{"t_ms":2,"from":"client","message":5,"n":2}\n'
    )
    meta = ingest(home)
    assert (meta["lines read"], meta["lines ingested"], meta["lines quarantined"]) == (3, 3, 0)
    got = rows(home, "SELECT seq, kind, method, body FROM messages ORDER BY seq")
    assert got == [
        {
            "seq": 2,
            "kind": "request",
            "method": "ping",
            "body": '{"jsonrpc":"2.0","id":1,"method":"ping"}',
        },
        {"seq": 3, "kind": "other", "method": None, "body": "5"},
    ]


def test_a_domain_that_is_not_a_plain_name_is_quarantined(tmp_path: Path) -> None:
    """A header's domain becomes a path (flows/<domain>.flow.json, domain=<domain>/)."""
    from assets.learn import flow
    from pipeline.run import materialize

    home = tmp_path / "home"
    (home / "logs/x").mkdir(parents=True)
    for i, domain in enumerate(["../../../escaped", "/abs", ".hidden", "-opt", "a/b", "ok.1"]):
        (home / f"logs/x/{i}.jsonl").write_bytes(
            header(f"d{i}", domain=domain)
            + b"\n"
            + b'{"t_ms":1,"from":"client","message":{"jsonrpc":"2.0","id":1,"method":'
            + b'"tools/call","params":{"name":"find","arguments":{}}}}\n'
            + b'{"t_ms":2,"from":"server","message":{"jsonrpc":"2.0","id":1,"result":{}}}\n'
        )
    meta = ingest(home)
    assert meta["lines quarantined"] == 15
    assert rows(home, "SELECT DISTINCT domain FROM sessions") == [{"domain": "ok.1"}]
    errors = rows(home, "SELECT DISTINCT file, error FROM quarantine ORDER BY file")
    assert errors[0] == {
        "file": "logs/x/0.jsonl",
        "error": 'line 1: field `domain`: "../../../escaped" is not a valid domain name '
        "(letters, digits, -, _ and ., not starting with . or -)",
    }
    assert materialize([flow], str(home), 30).success
    written = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*.flow.json"))
    assert written == [Path("home/flows/ok.1.flow.json")]
    assert not any(p.name.startswith("escaped") for p in tmp_path.parent.rglob("escaped*"))


@pytest.mark.parametrize("name", ["notes", "a.b", "A_1-x", "9"])
def test_the_domain_rule_takes_plain_names(name: str) -> None:
    assert is_valid_domain(name) and check_domain(name) == name


@pytest.mark.parametrize("name", ["", ".", "..", ".x", "-x", "a/b", "a\\b", "é", "a b", None, 3])
def test_the_domain_rule_refuses_anything_else(name: object) -> None:
    assert not is_valid_domain(name)
    with pytest.raises(DomainError, match="not a valid domain name"):
        check_domain(name)


# --- fuzz: any bytes in, a balanced ingest out -------------------------------------------

wire_line = st.one_of(
    st.just(PING),
    st.builds(
        lambda t, sender, text: json.dumps({"t_ms": t, "from": sender, "raw": text}).encode(),
        st.integers(-5, 2**64),
        st.sampled_from(["client", "server", "proxy", "context", "nobody"]),
        st.text(),
    ),
    st.builds(
        lambda t, text: (
            f'{{"t_ms":{t},"from":"server","message":{{"jsonrpc":"2.0","id":1,"result":'
            f'{{"content":[{{"type":"text","text":{json.dumps(text)}}}]}}}}}}'
        ).encode(),
        st.integers(0, 10**6),
        st.text(),
    ),
    st.binary(max_size=40).filter(lambda b: b"\n" not in b),
    st.text(max_size=40).map(lambda t: t.replace("\n", " ").encode("utf-8", "surrogatepass")),
    st.sampled_from([b"", b"\t", b" \r", b"\\ud800", b'"\\udfff"', b"\xef\xbb\xbf"]),
)
log_file = st.builds(
    lambda head, lines, end: b"\n".join([head, *lines]) + (b"\n" if end else b""),
    st.one_of(
        st.builds(lambda s: header(s), st.text(min_size=1, max_size=8)),
        st.builds(lambda s: b"\xef\xbb\xbf" + header(s), st.text(min_size=1, max_size=8)),
        st.builds(
            lambda d, ms: json.dumps({**HEADER, "domain": d, "started_unix_ms": ms}).encode(),
            st.one_of(st.none(), st.text(max_size=6)),
            st.integers(-(2**63), 2**64),
        ),
        st.binary(max_size=30).filter(lambda b: b"\n" not in b),
    ),
    st.lists(wire_line, max_size=8),
    st.booleans(),
)


def expected_lines(content: bytes) -> int:
    return content.count(b"\n") + (0 if content.endswith(b"\n") or not content else 1)


@pytest.mark.slow  # a property over 20 drawn sets of files, each ingested
@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(files=st.lists(log_file, min_size=1, max_size=4))
def test_fuzz_any_bytes_ingest_balanced(files: list[bytes]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        (home / "logs/f").mkdir(parents=True)
        for content in files:
            (home / f"logs/f/{uuid.uuid4().hex}.jsonl").write_bytes(content)
        layout = Layout.at(home)
        plan, stats = ingest_plan(layout, discover(layout, store.known_state(layout)), "fz")
        assert stats.balanced
        # each file is read (every line counted) or known (its content, or a longer version
        # of it, is read: same bytes twice, or a log and its start)
        assert stats.files + len(plan.known) == len(files)
        assert stats.lines_read == sum(expected_lines(Path(f.path).read_bytes()) for f in plan.read)
        assert len({f.content_hash for f in plan.read}) == len(plan.read)
        con = store.open_catalogue(layout)
        try:
            (sessions, messages, ingested) = con.execute(
                "SELECT count(*), (SELECT count(*) FROM messages), "
                "coalesce(sum(lines_ingested), 0) FROM sessions"
            ).fetchall()[0]
            assert messages == ingested - sessions  # each ingested line but the header
        finally:
            con.close()
        again, stats = ingest_plan(layout, discover(layout, store.known_state(layout)), "fz2")
        assert stats.files == 0 and again.unchanged == len(files)
