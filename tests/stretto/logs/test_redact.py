"""`stretto redact`: a pseudonymised copy of session logs that learns the same flow and keeps
no original value (docs/formats.md §11). The command is called in this process; the
walkthrough-like sessions are recorded through the real proxy and filesystem server."""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import re
import stat
import sys
from pathlib import Path

import pytest

from stretto.cli import main
from stretto.logs.episode import Assistant, ToolResult, User, read_episode
from stretto.logs.pseudonyms import Census, Count, Pseudonyms, fold
from stretto.logs.redact import pseudonyms_for
from stretto.logs.sessionlog import list_session_logs, read_session_log
from stretto.model.binding import compile_path
from tests.conftest import REFERENCE_HOME, ROOT, TAU2

SALT = "a salt for the tests"
SHOP = REFERENCE_HOME / "logs/shop"
SERVED_SHOP = REFERENCE_HOME / "served/shop"
TAU2_RETAIL = TAU2 / "results/sierra-model_training/gpt-4.1_retail_defautl_gpt-4.1_1trials.json.gz"
TAU2_TOOLS = TAU2 / "domains/tau2_tools.json"
TOKEN = re.compile(r"[hH]_[0-9a-fA-F]{12}")


@pytest.fixture(autouse=True)
def salt(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STRETTO_REDACT_SALT", SALT)


def redact(sessions: Path, out: Path, *options: str) -> int:
    return main(["redact", "--sessions", str(sessions), "--out", str(out), *options])


def learn(sessions: Path, domain: str, out: Path, home: Path) -> dict:
    args = ["learn", "--sessions", str(sessions), "--domain", domain, "--habit-only"]
    assert main([*args, "--out", str(out), "--home", str(home)]) == 0
    return json.loads(out.read_text())


def write_log(path: Path, session: str, lines: list[tuple[int, str, object]]) -> None:
    header = {"stretto_mcp_log": 2, "session": session, "started_unix_ms": 0}
    header |= {"server_command": ["demo"], "domain": "shop", "agent_model": None}
    rows = [header] + [
        {"t_ms": t, "from": who, "raw" if isinstance(m, str) else "message": m}
        for t, who, m in lines
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def call(i: int, tool: str, arguments: dict, sender: str = "client") -> tuple:
    message = {"jsonrpc": "2.0", "id": i, "method": "tools/call"}
    return (i, sender, message | {"params": {"name": tool, "arguments": arguments}})


def answer(i: int, text: str, sender: str = "server", to: int | None = None) -> tuple:
    """The answer at time `i` to the call of id `to` (default: sent at time `i` too)."""
    result = {"content": [{"type": "text", "text": text}], "isError": False}
    return (i, sender, {"jsonrpc": "2.0", "id": i if to is None else to, "result": result})


def said(i: int, role: str, text: str) -> tuple:
    return (i, "context", {"role": role, "content": text})


def _tool(name: str, properties: dict, output: dict | None = None) -> dict:
    tool = {"name": name, "inputSchema": {"type": "object", "properties": properties}}
    if output:
        tool["outputSchema"] = {"type": "object", "properties": output}
    return tool | {"annotations": {"readOnlyHint": True}}


STRING = {"type": "string"}
NAME = {"type": "object", "properties": {"first": STRING, "last": STRING}}
USER = {"user_id": STRING, "name": NAME, "orders": {}, "payment_methods": {}, "zip": STRING}
TOOLS = [
    _tool("find_user", {"email": STRING}),
    _tool("get_user", {"user_id": STRING}, USER | {"phone": {}, "balance": {}}),
    _tool("get_order", {"order_id": STRING, "speed": {"enum": ["express"]}, "phone": STRING}),
    _tool("track", {"line": STRING, "method": STRING}),
]
TOOLS_LIST = [
    (0, "client", {"jsonrpc": "2.0", "id": 0, "method": "tools/list"}),
    (0, "server", {"jsonrpc": "2.0", "id": 0, "result": {"tools": TOOLS}}),
]


def messages(path: Path) -> list:
    return [line.message for line in read_session_log(path).lines]


# what a value becomes -------------------------------------------------------------------------


def test_a_value_gets_the_same_token_wherever_the_readers_find_it(tmp_path: Path) -> None:
    record = {
        "user_id": "mia_garcia_4516",
        "name": {"first": "Mia", "last": "Garcia"},
        "orders": ["#W5490111"],
        "payment_methods": {"paypal_9497703": {"id": "paypal_9497703"}},
        "zip": "046229",
        "phone": 15551232002,
        "balance": 54.04,
    }
    error = {"code": -1, "message": "no parcel for mia_garcia_4516"}
    log = {"level": "info", "data": {"who": "mia_garcia_4516"}}
    lines = [
        *TOOLS_LIST,
        said(1, "user", "Hi, I'm mia.garcia@example.com; order W5490111 please."),
        call(2, "find_user", {"email": "mia.garcia@example.com"}),
        answer(2, "mia_garcia_4516"),
        call(3, "get_user", {"user_id": "mia_garcia_4516"}),
        answer(3, json.dumps(record)),
        call(4, "get_order", {"order_id": "#W5490111", "speed": "express", "phone": "15551232002"}),
        answer(4, "Order #W5490111\n  shipped to 046229  \n\nby paypal_9497703"),
        call(5, "track", {"line": "shipped to 046229", "method": "paypal_9497703"}),
        (5, "server", {"jsonrpc": "2.0", "id": 5, "error": error}),
        (6, "server", {"jsonrpc": "2.0", "method": "notifications/message", "params": log}),
        (7, "server", "a line that is no JSON, about mia_garcia_4516"),
    ]
    sessions, out = tmp_path / "in", tmp_path / "out"
    sessions.mkdir()
    write_log(sessions / "one.jsonl", "one", lines)
    assert redact(sessions, out, "--keep-shared", "0") == 0
    m = messages(out / "one.jsonl")
    assert m[:2] == [line[2] for line in TOOLS_LIST]  # tools/list kept as it was
    email = m[3]["params"]["arguments"]["email"]
    assert TOKEN.fullmatch(email)
    user_id = m[4]["result"]["content"][0]["text"]
    assert TOKEN.fullmatch(user_id) and m[5]["params"]["arguments"]["user_id"] == user_id
    got = json.loads(m[6]["result"]["content"][0]["text"])
    assert list(got) == list(record)  # the keys the schema declares, kept
    assert got["user_id"] == user_id
    assert got["name"]["first"] == "Mia"  # 3 characters: kept
    assert got["name"]["last"].startswith("H_")  # "Garcia" has capitals: H_
    order = got["orders"][0]
    assert order.startswith("#") and TOKEN.fullmatch(order[1:])
    assert m[7]["params"]["arguments"]["order_id"] == order
    assert m[7]["params"]["arguments"]["speed"] == "express"  # an enum value: declared, kept
    # typed in the conversation: the same tokens, the order without its # as typed; the
    # email holds the last name, so it is followed by its parts (the name is found in it)
    words = m[2]["content"]
    assert words.startswith(f"Hi, I'm {email}[{got['name']['last'].lower()}]; ")
    assert f" {order[1:]} " in words
    (card,) = got["payment_methods"]  # a key that is data: hashed like the value it is
    assert got["payment_methods"][card] == {"id": card} and TOKEN.fullmatch(card)
    assert re.fullmatch(r"0[0-9]{14}", got["zip"])  # digits stay digits, a leading 0 too
    assert isinstance(got["phone"], int) and len(str(got["phone"])) == 15
    assert m[7]["params"]["arguments"]["phone"] == str(got["phone"])  # as text: the same
    assert isinstance(got["balance"], float) and got["balance"] != 54.04
    # a text result: each line hashed whole, its whitespace kept, as the binding reads lines
    text = m[8]["result"]["content"][0]["text"]
    first, second, blank, third = text.split("\n")
    assert first.startswith("H_") and blank == ""
    assert second.startswith("  ") and second.endswith("  ") and TOKEN.fullmatch(second.strip())
    assert m[9]["params"]["arguments"]["line"] == second.strip()
    assert third.startswith("h_") and m[9]["params"]["arguments"]["method"] == card != third
    error = m[10]["error"]
    # error text: word by word; the user id holds the last name, still found in it
    last = got["name"]["last"].lower()
    assert error["code"] == -1
    assert re.fullmatch(rf"no h_\w{{12}} for {user_id}\[{last}\]", error["message"])
    assert m[11]["params"]["level"] == "info" and m[11]["params"]["data"]["who"] == user_id
    raw_line = read_session_log(out / "one.jsonl").lines[-1].raw
    assert raw_line and re.fullmatch(  # `line` is declared (by track), `JSON` all capitals
        rf"a line h_\w{{12}} is no H_[0-9A-F]{{12}}, h_\w{{12}} {user_id}\[{last}\]", raw_line
    )
    raw = (out / "one.jsonl").read_text()
    for original in ("garcia", "5490111", "9497703", "46229", "5551232002", "parcel", "54.04"):
        assert original not in raw.lower()


def test_a_value_the_customer_typed_inside_a_longer_one_is_still_found(tmp_path: Path) -> None:
    """A hashed value holding other values is written `token[what they became]`, so the
    binding's check (is the value in what the customer said?) answers as on the original."""
    lines = [
        said(1, "user", "I fly from Las Vegas to Denver, user anna_lee_123."),
        call(2, "get_user", {"user_id": "anna_lee_123"}),
        answer(2, json.dumps({"city": "Las Vegas", "airport": "LAS", "last": "anna"})),
    ]
    sessions, out = tmp_path / "in", tmp_path / "out"
    sessions.mkdir()
    write_log(sessions / "one.jsonl", "one", lines)
    assert redact(sessions, out, "--keep-shared", "0") == 0
    m = messages(out / "one.jsonl")
    record = json.loads(m[2]["result"]["content"][0]["text"])
    city, airport, name = record.values()  # keys hashed too: nothing declares them
    (user_id,) = m[1]["params"]["arguments"].values()
    assert airport == "LAS"
    said_text = m[0]["content"]
    assert f"{city}[Las] to H_" in said_text  # LAS still in what was said
    assert f"{user_id}[{name}]." in said_text  # and the name inside the user id
    assert "Vegas" not in said_text and "lee" not in said_text and "123" not in said_text
    for value in (city, "las", user_id, name):
        assert fold(value) in fold(said_text)


def test_the_copy_has_the_llm_turns_of_the_original(tmp_path: Path) -> None:
    """The turn rule compares exact text: a value the customer typed in another case is not
    what the agent read in a result, so the call that passes it starts a new LLM turn — in the
    copy too (tokens keep their case class)."""
    lines = [
        said(1, "user", "where is my order w123456?"),
        call(1000, "find_order", {"query": "latest"}),
        answer(1100, json.dumps({"order_id": "W123456"}), to=1000),
        call(1200, "get_order", {"order_id": "W123456"}),  # read in that result: a new turn
        answer(1300, json.dumps({"status": "shipped"}), to=1200),
        call(1400, "get_status", {"order_id": "w123456"}),  # typed by the customer: same turn
        answer(1500, "ok", to=1400),
    ]
    sessions, out = tmp_path / "in", tmp_path / "out"
    sessions.mkdir()
    write_log(sessions / "one.jsonl", "one", lines)
    assert redact(sessions, out, "--keep-shared", "0") == 0

    def turns(path: Path) -> list[list[str]]:
        events = read_episode(path).events
        return [[c.name for c in e.calls] for e in events if isinstance(e, Assistant)]

    assert turns(sessions / "one.jsonl") == [["find_order"], ["get_order", "get_status"]]
    assert turns(out / "one.jsonl") == turns(sessions / "one.jsonl")


def test_shared_values_are_kept_unless_named(tmp_path: Path) -> None:
    sessions = tmp_path / "in"
    sessions.mkdir()
    for i in range(4):  # one customer in four sessions: their id is shared
        write_log(
            sessions / f"s{i}.jsonl",
            f"s{i}",
            [
                *TOOLS_LIST,
                said(1, "user", f"I am Ada Lovelace, ticket {i}00{i}7."),
                call(2, "find_user", {"email": "ada@example.com"}),
                answer(2, json.dumps({"user_id": "ada_1", "name": "Ada Lovelace"})),
            ],
        )
    assert redact(sessions, tmp_path / "kept") == 0
    kept = (tmp_path / "kept/s0.jsonl").read_text()
    assert "Ada Lovelace" in kept and "ada_1" in kept
    assert "ada@example.com" not in kept  # shared, but an email: never kept (issue 40)
    assert "1007" not in kept  # one session's ticket: hashed
    assert redact(sessions, tmp_path / "named", "--hash-field", "name,user_id") == 0
    named = (tmp_path / "named/s0.jsonl").read_text()
    assert "Ada" not in named and "Lovelace" not in named and "ada_1" not in named
    assert '"user_id"' in named and '"name"' in named  # keys are kept
    # spaces around the names, and the option repeated, name the same keys
    for i, options in enumerate([["name, user_id"], [" name ", "user_id "], ["name ,user_id"]]):
        out = tmp_path / f"spaced{i}"
        assert redact(sessions, out, *[a for o in options for a in ("--hash-field", o)]) == 0
        assert (out / "s0.jsonl").read_bytes() == (tmp_path / "named/s0.jsonl").read_bytes()


@pytest.mark.parametrize("given", ["name,,user_id", "name,", " ", "", "name, ,user_id"])
def test_an_empty_hash_field_name_is_a_usage_error(tmp_path: Path, given: str, capsys) -> None:
    """An empty name names no key: refused (exit 2) rather than quietly hashing nothing."""
    with pytest.raises(SystemExit) as exited:
        redact(SHOP, tmp_path / "out", "--hash-field", "name", "--hash-field", given)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert f"error: argument --hash-field: {given!r} has an empty field name" in err
    assert not (tmp_path / "out").exists()


def test_the_same_salt_gives_the_same_bytes_and_another_salt_other_tokens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert redact(SHOP, tmp_path / "a") == 0
    assert redact(SHOP, tmp_path / "b") == 0
    monkeypatch.setenv("OTHER_SALT", "pepper")
    assert redact(SHOP, tmp_path / "c", "--salt-env", "OTHER_SALT") == 0
    for log in list_session_logs(tmp_path / "a"):
        a, b, c = (tmp_path / d / log.name for d in "abc")
        assert a.read_bytes() == b.read_bytes()
        assert set(TOKEN.findall(a.read_text())).isdisjoint(TOKEN.findall(c.read_text()))


def test_files_are_private_whole_and_named_by_session(tmp_path: Path, capsys) -> None:
    os.umask(0o022)
    out = tmp_path / "new/copy"
    assert redact(SHOP, out) == 0
    for folder in (tmp_path / "new", out):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted(p.name for p in SHOP.glob("*.jsonl"))
    assert all(stat.S_IMODE((out / n).stat().st_mode) == 0o600 for n in names)
    assert "stretto: redacted 6 session log(s) and 0 flow log(s)" in capsys.readouterr().out
    # the header and every line's time and sender are kept, and the readers read the copy
    for name in names:
        before, after = read_session_log(SHOP / name), read_session_log(out / name)
        assert before.header == after.header
        assert [(w.t_ms, w.sender) for w in before.lines] == [
            (w.t_ms, w.sender) for w in after.lines
        ]


# private-key blocks: every line hashed, however shared ----------------------------------------


def shared_by_five(value: str) -> Pseudonyms:
    """The pseudonyms of a census that saw `value` in five sessions: each of its lines is
    kept for its count (--keep-shared 3), unless something else hashes it."""
    census = Census()
    for session in range(5):
        census.session = session
        Count(census).string(value)
    return Pseudonyms(SALT, census)


def rewritten(value: str, hashed_lines: set[int]) -> str:
    """`value` as its census of five sessions rewrites it, after checking which of its lines
    are hashed (each whole, its surrounding spaces kept) and that the others are kept."""
    pseudonyms = shared_by_five(value)
    lines = value.split("\n")
    got = pseudonyms.string(value).split("\n")
    for i, (line, new) in enumerate(zip(lines, got, strict=True)):
        if i in hashed_lines:
            assert new == line.replace(line.strip(), pseudonyms.token(line.strip())), line
        else:
            assert new == line, line
    return "\n".join(got)


PEM_KINDS = [
    "PRIVATE KEY",
    "RSA PRIVATE KEY",
    "EC PRIVATE KEY",
    "ENCRYPTED PRIVATE KEY",
    "OPENSSH PRIVATE KEY",
    "PGP PRIVATE KEY BLOCK",
]
# a key's body lines, each plain enough to be kept for its count on its own
BODY = ["key material line one", "key material line two"]


@pytest.mark.parametrize("kind", PEM_KINDS)
def test_every_line_of_a_private_key_block_is_hashed(kind: str) -> None:
    block = [f"-----BEGIN {kind}-----", *BODY, f"-----END {kind}-----"]
    value = "\n".join(["before the key", *block, "after the key"])
    assert shared_by_five(BODY[0]).string(BODY[0]) == BODY[0]  # kept, outside a block
    copy = rewritten(value, {1, 2, 3, 4})
    assert not any(line in copy for line in BODY)


@pytest.mark.parametrize("kind", PEM_KINDS)
def test_a_block_without_its_end_is_hashed_to_the_end_of_the_value(kind: str) -> None:
    value = "\n".join(["before the key", f"-----BEGIN {kind}-----", *BODY, "  cut off here"])
    rewritten(value, {1, 2, 3, 4})
    rewritten(value + "\n", {1, 2, 3, 4})  # the last line, empty, stays so


def test_two_blocks_in_one_value_and_the_text_between_them() -> None:
    first = ["-----BEGIN RSA PRIVATE KEY-----", *BODY, "-----END RSA PRIVATE KEY-----"]
    second = ["-----BEGIN OPENSSH PRIVATE KEY-----", "other key material", "", "last line of it"]
    second.append("-----END OPENSSH PRIVATE KEY-----")
    value = "\n".join(["two keys:", *first, "between the keys", *second, "that is all"])
    # lines 1-4 and 6-10, but 8 is blank: a blank line stays blank, wherever it is
    rewritten(value, {1, 2, 3, 4, 6, 7, 9, 10})


def test_text_on_the_marker_lines_is_hashed_with_them() -> None:
    value = "\n".join(
        [
            "the deploy key follows",
            "deploy key: -----BEGIN EC PRIVATE KEY-----",
            "    key material line one",
            "-----END EC PRIVATE KEY----- (rotated monthly)",
            "  the deploy key is above  ",
        ]
    )
    rewritten(value, {1, 2, 3})


def test_a_block_ends_at_its_own_end_marker() -> None:
    """The `private key` rule of stretto.logs.sensitive says where a block ends: another PEM
    object's END marker does not end it, so what follows is hashed to the end."""
    value = "\n".join(
        ["-----BEGIN PRIVATE KEY-----", *BODY, "-----END CERTIFICATE-----", "after the key"]
    )
    rewritten(value, {0, 1, 2, 3, 4})
    rewritten(
        "-----BEGIN CERTIFICATE-----\nkey material line one\n-----END CERTIFICATE-----", set()
    )


# refusals ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["same", "inside"])
def test_an_out_folder_that_is_or_is_inside_the_sessions_is_refused(
    tmp_path: Path, where: str, capsys
) -> None:
    sessions = tmp_path / "logs"
    write_log(sessions.mkdir() or sessions / "one.jsonl", "one", [said(1, "user", "secret words")])
    before = (sessions / "one.jsonl").read_bytes()
    out = sessions if where == "same" else sessions / "redacted"
    assert redact(sessions, out) == 2
    assert "is --sessions or inside it" in capsys.readouterr().err
    assert [p.name for p in sessions.iterdir()] == ["one.jsonl"]
    assert (sessions / "one.jsonl").read_bytes() == before


@pytest.mark.parametrize("value", [None, "", "   "])
def test_a_missing_or_empty_salt_is_refused(
    tmp_path: Path, value: str | None, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    if value is None:
        monkeypatch.delenv("STRETTO_REDACT_SALT")
    else:
        monkeypatch.setenv("STRETTO_REDACT_SALT", value)
    assert redact(SHOP, tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert "STRETTO_REDACT_SALT is " + ("not set" if value is None else "empty") in err
    assert not (tmp_path / "out").exists()


def test_another_salt_variable_that_is_not_set_is_named(tmp_path: Path, capsys) -> None:
    assert redact(SHOP, tmp_path / "out", "--salt-env", "NO_SUCH_SALT_VAR") == 2
    assert "NO_SUCH_SALT_VAR is not set" in capsys.readouterr().err


def test_a_malformed_log_is_refused_before_anything_is_written(tmp_path: Path, capsys) -> None:
    sessions = tmp_path / "logs"
    sessions.mkdir()
    write_log(sessions / "a.jsonl", "a", [said(1, "user", "fine")])
    (sessions / "b.jsonl").write_text(
        '{"stretto_mcp_log":2,"session":"b","started_unix_ms":0}\n{"t_ms":1,"from":"x","raw":""}\n'
    )
    assert redact(sessions, tmp_path / "out") == 1
    assert f"stretto: {sessions}/b.jsonl:2: field `from`" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_two_logs_of_one_session_and_a_negative_keep_shared_are_refused(
    tmp_path: Path, capsys
) -> None:
    sessions = tmp_path / "logs"
    sessions.mkdir()
    for name in ("a", "copy-of-a"):
        write_log(sessions / f"{name}.jsonl", "a", [said(1, "user", "fine")])
    assert redact(sessions, tmp_path / "out") == 1
    assert "are both session 'a'" in capsys.readouterr().err
    assert redact(sessions, tmp_path / "out", "--keep-shared", "-1") == 2
    assert "--keep-shared must be 0 or more" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_an_out_folder_that_cannot_be_made_is_named(tmp_path: Path, capsys) -> None:
    (tmp_path / "a-file").write_text("")
    assert redact(SHOP, tmp_path / "a-file/out") == 1
    assert f"stretto: {tmp_path}/a-file/out: Not a directory" in capsys.readouterr().err


# flow logs -------------------------------------------------------------------------------------


def test_flow_logs_are_redacted_like_their_sessions(tmp_path: Path, capsys) -> None:
    """The reference's served logs: each lookup the flow log records is the proxy's call in
    the session, with the same tokens."""
    out = tmp_path / "out"
    assert redact(SERVED_SHOP, out, "--keep-shared", "0") == 0
    assert "and 2 flow log(s)" in capsys.readouterr().out
    for flow_log in sorted(out.glob("*.flow.jsonl")):
        session = out / flow_log.name.replace(".flow.jsonl", ".jsonl")
        lookups = [
            m["params"]["arguments"]
            for line in read_session_log(session).lines
            if line.sender == "proxy" and isinstance(m := line.message, dict) and "params" in m
        ]
        entries = [json.loads(line) for line in flow_log.read_text().splitlines()]
        original = [
            json.loads(line) for line in (SERVED_SHOP / flow_log.name).read_text().splitlines()
        ]
        bound = [e["arguments"] for e in entries if e.get("action") == "lookup"]
        assert bound and bound == lookups[: len(bound)]
        assert all(TOKEN.fullmatch(v.lstrip("#")) for args in bound for v in args.values())
        for before, after in zip(original, entries, strict=True):  # names and numbers kept
            assert {k: v for k, v in before.items() if k != "arguments"} == {
                k: v for k, v in after.items() if k != "arguments"
            }


# the corpora: learning from the copy, and what is left of the originals -----------------------


def _load_walkthrough():
    spec = importlib.util.spec_from_file_location("walkthrough", ROOT / "scripts/walkthrough.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("walkthrough", module)  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def corpora(tmp_path_factory) -> dict[str, tuple[Path, str]]:
    """Folders of session logs and their domains: the reference's shop logs, walkthrough-like
    sessions recorded through stretto-proxy (five searches and reads, and a sixth served with
    a flow learned from them, so with lookups, an extended answer and a flow log), and a
    τ²-bench results file imported with `stretto import-tau2`."""
    base = tmp_path_factory.mktemp("corpora")
    walkthrough = _load_walkthrough()
    notes = base / "notes"
    workdir = base / "work"
    workdir.mkdir()
    for task in walkthrough.TRAINING[:5]:
        walkthrough.run_session(task, notes, workdir)
    flow = base / "notes.flow.json"
    learn(notes, "notes", flow, base / "home")
    walkthrough.run_session(walkthrough.SERVED, notes, workdir, "--flow", str(flow))
    assert len(list(notes.glob("*.flow.jsonl"))) == 1
    tau2 = base / "tau2"
    args = ["import-tau2", str(TAU2_RETAIL), "--tools", str(TAU2_TOOLS), "--out", str(tau2)]
    assert main(args) == 0
    return {"shop": (SHOP, "shop"), "walkthrough": (notes, "notes"), "tau2": (tau2, "retail")}


@pytest.fixture(scope="module")
def learned(corpora, tmp_path_factory) -> dict[str, dict]:
    base = tmp_path_factory.mktemp("learned")
    return {
        name: learn(folder, domain, base / f"{name}.flow.json", base / "home")
        for name, (folder, domain) in corpora.items()
    }


def comparable(flow: dict, rename: Pseudonyms | None = None) -> dict:
    """The flow without its time; each binding path as its steps, the original's renamed as
    redact renames the keys in it; each shape as what it is of."""
    flow = copy.deepcopy(flow)
    del flow["provenance"]["compiled_unix_ms"]
    for part in ("sources", "lists"):
        for entry in flow["bindings"].get(part, []):
            found = []
            for hit in entry["found"]:
                steps = compile_path(hit["path"])
                if rename is not None:
                    steps = tuple(None if s is None else rename.string(s) for s in steps)
                found.append((hit["source"], steps, hit["count"]))
            entry["found"] = sorted(found, key=repr)
    # a shape describes the values themselves, which redaction replaces: only what it is of
    flow["bindings"]["shapes"] = [
        (e["tool"], e["arg"], e["values"]) for e in flow["bindings"].get("shapes", [])
    ]
    return flow


@pytest.mark.slow  # learns every corpus and each redacted copy of it
@pytest.mark.parametrize("keep_shared", ["3", "0"])
@pytest.mark.parametrize("corpus", ["shop", "walkthrough", "tau2"])
def test_the_copy_learns_the_same_flow(
    corpora, learned, corpus: str, keep_shared: str, tmp_path: Path
) -> None:
    folder, domain = corpora[corpus]
    out = tmp_path / "redacted"
    assert redact(folder, out, "--keep-shared", keep_shared) == 0
    flow = learn(out, domain, tmp_path / "redacted.flow.json", tmp_path / "home")
    original = learned[corpus]
    assert flow["sites"] == original["sites"] and flow["sites"]["next"]
    assert flow["habit"] == original["habit"] and flow["reach"] == original["reach"]
    assert flow["bindings"]["agreed"] == original["bindings"]["agreed"]
    rename = pseudonyms_for(folder, SALT, int(keep_shared))
    assert comparable(flow) == comparable(original, rename)
    assert any(entry["found"] for entry in flow["bindings"]["sources"])


def input_values(folder: Path) -> dict[str, set[str]]:
    """The values of the sessions as the readers see them, of more than 3 characters:
    `values`, each string leaf (and key) of the arguments and of a result that is JSON, each
    line of one that is not, the arguments a flow log records; `texts`, what was said and the
    error texts, whole (when a word in them has more than 3 characters: else it is made of
    short words, kept by design); `words`, the words of those texts."""
    found: dict[str, set[str]] = {"values": set(), "texts": set(), "words": set()}

    def leaves(value: object) -> None:
        if isinstance(value, str):
            found["values"].update(value.split("\n"))
        elif isinstance(value, list):
            for item in value:
                leaves(item)
        elif isinstance(value, dict):
            for key, item in value.items():
                found["values"].add(key)
                leaves(item)

    def text(value: str) -> None:
        words = {re.sub(r"^\W+|\W+$", "", word) for word in value.split()}
        found["words"].update(words)
        if any(len(w) > 3 for w in words):
            found["texts"].add(value)

    for path in list_session_logs(folder):
        for event in read_episode(path).events:
            if isinstance(event, User | Assistant) and event.text:
                text(event.text)
            if isinstance(event, Assistant):
                for call in event.calls:
                    leaves(call.arguments)
            elif isinstance(event, ToolResult):
                try:
                    leaves(json.loads(event.content))
                except ValueError:
                    (text if event.error else leaves)(event.content)
        for line in read_session_log(path).lines:  # the agent's words beside its calls
            message = line.message
            if isinstance(message, dict) and message.get("method") == "tools/call":
                for said_too in message["params"].get("_meta", {}).values():
                    text(said_too)
    for flow_log in folder.glob("*.flow.jsonl"):
        for line in flow_log.read_text().splitlines():
            leaves(json.loads(line).get("arguments"))
    return {kind: {v.strip() for v in vs if len(v.strip()) > 3} for kind, vs in found.items()}


def kept_by_design(folder: Path) -> tuple[str, set[str]]:
    """What redact keeps as it is — headers, initialize and tools/list, tool names — as text,
    and the names the tools declare (tools, schema properties, enum values)."""
    kept, declared = [], set()

    def names(schema: object) -> None:
        if isinstance(schema, dict):
            declared.update(schema.get("properties") or {})
            declared.update(v for v in schema.get("enum") or [] if isinstance(v, str))
            for item in schema.values():
                names(item)
        elif isinstance(schema, list):
            for item in schema:
                names(item)

    for path in list_session_logs(folder):
        lines = path.read_text().splitlines()
        kept.append(lines[0])
        for line in lines[1:]:
            if re.search(r'"method":"(initialize|tools/list)"|"tools":\[', line):
                kept.append(line)
                for tool in json.loads(line)["message"].get("result", {}).get("tools", []):
                    declared.add(tool["name"])
                    names(tool)
        kept += re.findall(r'"name":"([^"]*)","arguments"', path.read_text())
    return fold("\n".join(kept)), {fold(d) for d in declared if len(d) > 3}


def found_whole(value: str, text: str) -> bool:
    """Whether `value` is in `text` (folded) but as part of a longer run of letters, digits
    or _ (an id, a number, a token): as written, or escaped as JSON."""
    for form in {fold(value), fold(json.dumps(value, ensure_ascii=False)[1:-1])}:
        start = text.find(form)
        while start >= 0:
            end = start + len(form)
            before = start == 0 or not (form[0].isalnum() and re.match(r"\w", text[start - 1]))
            after = end == len(text) or not (form[-1].isalnum() and re.match(r"\w", text[end]))
            if before and after:
                return True
            start = text.find(form, start + 1)
    return False


@pytest.mark.parametrize("keep_shared", [0, 3])
@pytest.mark.parametrize("corpus", ["shop", "walkthrough", "tau2"])
def test_no_original_value_is_left(corpora, corpus: str, keep_shared: int, tmp_path) -> None:
    """Every byte of the copy (its tokens and times aside) searched for every value of more
    than 3 characters, case ignored. Left aside: what is kept by design (headers,
    initialize, tools/list, tool names; a word holding a name the tools declare), and with
    --keep-shared N what N sessions or more hold: a value found in fewer files cannot have
    been counted in N sessions (a word: each of its parts; a text: each of its words)."""
    folder, _ = corpora[corpus]
    out = tmp_path / "redacted"
    assert redact(folder, out, "--keep-shared", str(keep_shared)) == 0
    kept, declared = kept_by_design(folder)
    text = "\n".join(p.read_text() for p in sorted(out.iterdir()))
    text = re.sub(r'"t_ms":\d+', "", TOKEN.sub("h_", text))
    text = fold(re.sub(r"\d{15,}", "0", text))  # integer tokens
    found = input_values(folder)
    assert len(found["values"]) > 20 and len(found["words"]) > 10
    words = {w for w in found["words"] if not any(d in fold(w) for d in declared)}
    files = [fold(p.read_text()) for p in list_session_logs(folder)]

    def shared(value: str) -> bool:
        return sum(fold(value.lstrip("#").strip()) in f for f in files) >= keep_shared

    left = []
    for value in found["values"] | words | (found["texts"] if keep_shared == 0 else set()):
        if fold(value) in kept or not found_whole(value, text):
            continue
        parts = re.findall(r"\w{4,}", value) if value in words else [value]
        if keep_shared and all(shared(part) for part in parts):
            continue
        left.append(value)
    assert sorted(left) == []


# secrets and personal identifiers: never kept, however many sessions share them (issue 40) -----

CHECK_TOOLS = [
    _tool("find_account", {"email": STRING}),
    _tool("check_value", {"value": STRING}),
]


def sensitive_session(index: int, values: list[str]) -> list[tuple]:
    """A session that finds an account, then checks each value: the customer says it, the
    agent passes it, the server answers with it (JSON, then lines) and refuses it in an
    error text."""
    lines = [
        (0, "client", {"jsonrpc": "2.0", "id": 0, "method": "tools/list"}),
        (0, "server", {"jsonrpc": "2.0", "id": 0, "result": {"tools": CHECK_TOOLS}}),
        said(1, "user", f"Hello, I am customer {index}."),
        call(2, "find_account", {"email": f"customer{index}@shop.example"}),
        answer(2, json.dumps({"account": f"acct_{index}00{index}"})),
    ]
    for j, value in enumerate(values):
        t = 10 + 10 * j
        lines.append(said(t, "user", f"Please check this for me: {value} thanks"))
        lines.append(call(t + 1, "check_value", {"value": value}))
        if j % 2:
            lines.append(answer(t + 1, json.dumps({"value": value, "state": "active"})))
        else:
            lines.append(answer(t + 1, f"checked\n{value}\nactive"))
        lines.append(call(t + 2, "check_value", {"value": f"{value} (again)"}))
        error = {"code": -32000, "message": f"the value {value} was revoked"}
        lines.append((t + 2, "server", {"jsonrpc": "2.0", "id": t + 2, "error": error}))
    return lines


@pytest.mark.slow  # learns twice
@pytest.mark.parametrize("shared_by", [1, 3, 4])
def test_no_secret_or_personal_identifier_survives_however_shared(
    tmp_path: Path, shared_by: int
) -> None:
    """36 secret shapes and 10 personal identifiers, each in `shared_by` of 4 session logs, in
    arguments, results (JSON and lines), the conversation and error texts: none is found in
    the copy at the default --keep-shared 3, and the copy learns the same flow."""
    from tests.secret_shapes import PERSONAL, SECRETS

    values = [value for _, value, _ in SECRETS + PERSONAL]
    sessions = tmp_path / "in"
    sessions.mkdir()
    for i in range(4):
        lines = sensitive_session(i, values if i < shared_by else [])
        write_log(sessions / f"s{i}.jsonl", f"s{i}", lines)
    out = tmp_path / "out"
    assert redact(sessions, out) == 0
    text = fold("\n".join(p.read_text() for p in sorted(out.iterdir())))
    left = [
        name
        for name, _, leaks in SECRETS + PERSONAL
        for leak in leaks
        if fold(leak) in text or fold(json.dumps(leak)[1:-1]) in text
    ]
    assert left == []
    if shared_by >= 3:
        assert "please check this for me" in text  # the words around them: shared, kept
    original = learn(sessions, "shop", tmp_path / "a.flow.json", tmp_path / "home")
    copy = learn(out, "shop", tmp_path / "b.flow.json", tmp_path / "home")
    assert copy["sites"] == original["sites"] and copy["habit"] == original["habit"]
    assert original["sites"]["next"]
