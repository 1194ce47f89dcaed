"""`stretto ingest --redact` (a warehouse without its values), the personal-data tags of the
warehouse's columns, and `stretto ingest --retain-days` (old data out, in one commit)."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.builders import HEADER, LogBuilder, stretto
from tests.warehouse.helpers import learned, rows
from warehouse.layout import PERSONAL_COMMENT, PERSONAL_DATA

SALT = {"STRETTO_REDACT_SALT": "a secret salt"}
TOOLS = {
    "tools": [
        {
            "name": name,
            "annotations": {"readOnlyHint": hint},
            "inputSchema": {"type": "object", "properties": {a: {"type": "string"} for a in args}},
        }
        for name, args, hint in [
            ("find_customer", ["email"], True),
            ("get_ticket", ["ticket_id"], True),
            ("reply_ticket", ["ticket_id", "text"], False),
        ]
    ]
}
PEOPLE = [
    ("Margarethe Vandersloot", "margarethe.v@example.org", "TCK-99812", "dishwasher"),
    ("Oluwaseun Abernathy", "seun.abernathy@example.net", "TCK-41177", "refrigerator"),
    ("Bartholomew Quixley", "bq1957@mailbox.example", "TCK-23005", "microwave"),
]


def support_log(index: int, started_ms: int = 0) -> LogBuilder:
    """A support session: a user says who they are, the agent finds them and their ticket,
    a failed lookup, a server notification, and a reply."""
    name, email, ticket, appliance = PEOPLE[index]
    customer = f"CUST-{55821 + index * 7919}"
    b = LogBuilder()
    b.lines[0] = {**HEADER, "session": f"s-{index}", "started_unix_ms": started_ms}
    b.lines[0]["domain"] = "support"
    b._add(0, "client", {"jsonrpc": "2.0", "id": 0, "method": "tools/list"})
    b._add(1, "server", {"jsonrpc": "2.0", "id": 0, "result": TOOLS})
    b.say(2, "user", f"Hello, I am {name}, email {email}; ticket {ticket} about my {appliance}.")
    b.client_call(10, 1, "find_customer", email=email)
    found = {"customer": customer, "name": name, "phone": "+44 7700 9001", "ticket": ticket}
    b.result(11, 1, json.dumps(found))
    b.client_call(900, 2, "get_ticket", ticket_id=ticket)
    b.result(901, 2, json.dumps({"subject": f"{appliance} leaking", "owner": customer}))
    b.client_call(1900, 3, "get_ticket", ticket_id=f"{ticket}-OLD")
    b.result(1901, 3, f"Ticket {ticket}-OLD not found for {name}", error=True)
    b._add(
        2000,
        "server",
        {
            "jsonrpc": "2.0",
            "method": "notifications/message",
            "params": {"level": "info", "data": f"indexed {customer} profile"},
        },
    )
    b.say(2500, "assistant", f"Thanks {name.split()[0]}, a technician visits Thursday.")
    b.client_call(3000, 4, "reply_ticket", ticket_id=ticket, text=f"Dear {name}, see you.")
    b.result(3001, 4, "sent")
    return b


def write_home(home: Path, builders: list[LogBuilder]) -> None:
    folder = home / "logs" / "support"
    folder.mkdir(parents=True, exist_ok=True)
    for b in builders:
        name = f"{b.lines[0]['session']}.jsonl"
        (folder / name).write_text("".join(json.dumps(x) + "\n" for x in b.lines))


def _strings(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def input_values(builders: list[LogBuilder]) -> set[str]:
    """Every value the sessions carry (arguments, results and their JSON leaves, errors,
    notifications, the conversation; free text whole and word by word), longer than 3
    characters — but the names the tool list declares (tools, arguments): the structure
    redaction keeps, not values."""
    declared = {t["name"] for t in TOOLS["tools"]}
    declared |= {a for t in TOOLS["tools"] for a in t["inputSchema"]["properties"]}
    found: list[str] = []
    free: list[str] = []
    for b in builders:
        for line in b.lines[1:]:
            message = line["message"]
            if line["from"] == "context":
                free.append(message["content"])
            elif message.get("method") == "tools/call":
                found += _strings(message["params"]["arguments"])
            elif message.get("method") == "notifications/message":
                free.append(message["params"]["data"])
            elif "result" in message and message["id"] != 0:
                for item in message["result"]["content"]:
                    try:
                        found += _strings(json.loads(item["text"]))
                    except ValueError:
                        free.append(item["text"])
    words = [w.strip(".,;:") for text in found + free for w in text.split()]
    return {v for v in found + free + words if len(v) > 3 and v not in declared}


def leaked(values: set[str], out: str) -> list[str]:
    """The values found in `out` as themselves, not inside a longer name (`sent` is not in
    the column name `sent_seq`)."""
    return [
        v
        for v in sorted(values)
        if re.search(rf"(?<![A-Za-z0-9_]){re.escape(v)}(?![A-Za-z0-9_])", out)
    ]


def output_text(home: Path) -> str:
    """Every byte the warehouse holds, as text: each Parquet file's values (decoded: its
    pages are compressed), every other file as it is."""
    parts = []
    for path in sorted((home / "warehouse").rglob("*")):
        if not path.is_file():
            continue
        if path.suffix == ".parquet":
            parts.append(json.dumps(pq.read_table(path).to_pylist(), default=str))
            parts.append(
                json.dumps(pq.read_table(path).to_pylist(), default=str, ensure_ascii=False)
            )
        else:
            parts.append(path.read_bytes().decode("utf-8", "replace"))
    return "\n".join(parts)


def test_ingest_redact_leaves_no_original_value(tmp_path: Path) -> None:
    home = tmp_path / "home"
    builders = [support_log(i) for i in range(3)]
    write_home(home, builders)
    env = {**os.environ, **SALT}
    done = stretto("ingest", "--redact", "--keep-shared", "0", "--home", home, env=env)
    assert done.returncode == 0, done.stderr
    values = input_values(builders)
    assert "margarethe.v@example.org" in values and "Vandersloot" in values  # what is looked for
    out = output_text(home) + done.stdout + done.stderr
    assert leaked(values, out) == []
    assert leaked({"sent"}, '"sent"') == ["sent"]  # the search finds what is there
    # still a warehouse to learn from: sessions, tool names, calls and their turns
    assert len(rows(home, "SELECT * FROM sessions")) == 3
    calls = rows(home, "SELECT tool, status FROM calls ORDER BY session, sent_seq")
    assert [c["tool"] for c in calls[:4]] == [
        "find_customer",
        "get_ticket",
        "get_ticket",
        "reply_ticket",
    ]
    assert [c["status"] for c in calls[:4]] == ["ok", "ok", "failed", "ok"]
    # the same value, the same token: the customer id find_customer found is the ticket's owner
    found, ticket = (
        set(json.loads(r["result_text"]).values())
        for r in rows(
            home,
            "SELECT result_text FROM calls WHERE session = 's-0' AND status = 'ok' "
            "ORDER BY sent_seq LIMIT 2",
        )
    )
    assert len(found & ticket) == 1

    # a redacted home stays so: the originals are refused, and so is another salt's absence
    again = stretto("ingest", "--home", home, env=env)
    assert again.returncode == 1 and "holds redacted sessions only" in again.stderr
    unsalted = {k: v for k, v in env.items() if k != "STRETTO_REDACT_SALT"}
    again = stretto("ingest", "--redact", "--home", home, env=unsalted)
    assert again.returncode == 1 and "STRETTO_REDACT_SALT is not set" in again.stderr


@pytest.mark.slow  # two warehouses, two learns
def test_a_redacted_warehouse_learns_the_same_flow(tmp_path: Path) -> None:
    """The same sites, counts and binding sources from the redacted warehouse as from the
    recorded one (stretto redact's promise, kept through ingest)."""
    builders = [support_log(i) for i in range(3)]
    flows = []
    for name, options in (("plain", []), ("redacted", ["--redact"])):
        home = tmp_path / name
        write_home(home, builders)
        done = stretto("ingest", *options, "--home", home, env={**os.environ, **SALT})
        assert done.returncode == 0, done.stderr
        flows.append(learned(home, "support"))
    plain, redacted = flows
    assert plain["bindings"]["sources"], "nothing to compare"
    for flow in flows:  # pseudonyms have shapes of their own: the same arguments, as often
        flow["bindings"]["shapes"] = [
            (e["tool"], e["arg"], e["values"]) for e in flow["bindings"].get("shapes", [])
        ]
    for part in ("manifest", "habit", "reach", "sites", "bindings"):
        assert redacted[part] == plain[part], part


def test_a_recorded_warehouse_is_not_redacted_later(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_home(home, [support_log(0)])
    assert stretto("ingest", "--home", home).returncode == 0
    done = stretto("ingest", "--redact", "--home", home, env={**os.environ, **SALT})
    assert done.returncode == 1 and "needs a home of its own" in done.stderr


def test_columns_that_can_hold_personal_data_are_tagged(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_home(home, [support_log(0)])
    assert stretto("ingest", "--home", home).returncode == 0
    tagged = rows(
        home,
        "SELECT table_name, column_name FROM duckdb_columns() "
        f"WHERE comment = '{PERSONAL_COMMENT}' ORDER BY ALL",
    )
    expected = sorted((t, c) for t, columns in PERSONAL_DATA.items() for c in columns)
    assert [(r["table_name"], r["column_name"]) for r in tagged] == expected
    assert ("calls", "result_text") in expected and ("context", "content") in expected


@pytest.mark.parametrize("option", ["--keep-shared", "--salt-env", "--hash-field"])
def test_redaction_options_go_with_redact(tmp_path: Path, option: str) -> None:
    done = stretto("ingest", option, "1", "--home", tmp_path)
    assert done.returncode == 2 and "go with --redact" in done.stderr


def test_hash_field_names_are_stripped_of_spaces(tmp_path: Path) -> None:
    """`--hash-field "email, name"` names `name` (as `stretto redact` reads it): the name all
    three sessions share is hashed, while the team they share, under no named key, is kept."""
    builders = []
    for index in range(3):
        b = support_log(index)
        b.client_call(4000, 5, "find_customer", email="desk@example.org")
        b.result(4001, 5, json.dumps({"name": "Winifred Ashcombe", "team": "Returns Desk"}))
        builders.append(b)
    home = tmp_path / "home"
    write_home(home, builders)
    env = {**os.environ, **SALT}
    done = stretto("ingest", "--redact", "--hash-field", "email, name", "--home", home, env=env)
    assert done.returncode == 0, done.stderr
    out = output_text(home)
    assert leaked({"Winifred", "Ashcombe"}, out) == []
    assert "Returns Desk" in out


@pytest.mark.parametrize("given", ["email,,name", "email,", " ", ""])
def test_an_empty_hash_field_name_is_a_usage_error(tmp_path: Path, given: str) -> None:
    done = stretto("ingest", "--redact", "--hash-field", given, "--home", tmp_path)
    assert done.returncode == 2
    assert f"argument --hash-field: {given!r} has an empty field name" in done.stderr
    assert not (tmp_path / "warehouse").exists()


# --- ingest --retain-days --------------------------------------------------------------


@pytest.mark.slow  # several ingest runs
def test_ingest_retain_days_drops_old_sessions_in_one_commit(tmp_path: Path) -> None:
    home = tmp_path / "home"
    now_ms = int(time.time() * 1000)
    day_ms = 86_400_000
    old, recent = support_log(0, now_ms - 40 * day_ms), support_log(1, now_ms - 2 * day_ms)
    write_home(home, [old, recent])
    assert stretto("ingest", "--home", home).returncode == 0
    parquet = home / "warehouse" / "parquet"
    before = {p for p in parquet.rglob("*.parquet")}
    old_day = time.strftime("%Y-%m-%d", time.gmtime((now_ms - 40 * day_ms) / 1000))
    old_files = {p for p in before if f"day={old_day}" in str(p)}
    assert old_files

    done = stretto("ingest", "--retain-days", "30", "--home", home)
    assert done.returncode == 0, done.stderr
    said = re.search(
        r"--retain-days 30: dropped (\d+) session\(s\) that started before", done.stderr
    )
    assert said and said.group(1) == "1"
    assert [r["session"] for r in rows(home, "SELECT session FROM sessions")] == ["s-1"]
    assert {r["session"] for r in rows(home, "SELECT session FROM calls")} == {"s-1"}
    assert {r["session"] for r in rows(home, "SELECT session FROM steps")} == {"s-1"}
    assert {p for p in parquet.rglob("*.parquet")} == before - old_files  # the files are gone

    # the old log is still there, but not ingested again; nothing more to drop
    done = stretto("ingest", "--retain-days", "30", "--home", home)
    assert done.returncode == 0 and "dropped 0 session(s)" in done.stderr
    assert [r["session"] for r in rows(home, "SELECT session FROM sessions")] == ["s-1"]


def test_ingest_redact_keeps_no_shared_secret_or_personal_identifier(tmp_path: Path) -> None:
    """At the default --keep-shared 3, a secret or an email all three sessions share is still
    hashed: in `calls.arguments`, the results, the conversation (issue 40, item 2)."""
    from tests.secret_shapes import PERSONAL, SECRETS

    shared = [value for _, value, _ in SECRETS + PERSONAL]
    builders = []
    for index in range(3):
        b = support_log(index)
        for j, value in enumerate(shared):
            b.say(5000 + 10 * j, "user", f"my value is {value} ok")
            b.client_call(5001 + 10 * j, 10 + j, "get_ticket", ticket_id=value)
            b.result(5002 + 10 * j, 10 + j, json.dumps({"subject": value}))
        builders.append(b)
    home = tmp_path / "home"
    write_home(home, builders)
    done = stretto("ingest", "--redact", "--home", home, env={**os.environ, **SALT})
    assert done.returncode == 0, done.stderr
    out = output_text(home)
    left = [
        name
        for name, _, leaks in SECRETS + PERSONAL
        for leak in leaks
        if leak in out or json.dumps(leak)[1:-1] in out
    ]
    assert left == []
    arguments = rows(home, "SELECT arguments FROM calls WHERE tool = 'get_ticket'")
    assert len(arguments) == 3 * (2 + len(shared))
