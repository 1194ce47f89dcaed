"""Learning a flow: the counts, the bindings' sources, the file, and the command."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from stretto.model.flow import FlowError, dumps, habit_model, load_flow, load_manifest, reach_model
from tests.builders import HEADER, LogBuilder, shop_log, write_logs
from tests.builders import learn as learn_cli
from tests.conftest import REFERENCE_HOME
from tests.warehouse.helpers import ingest
from warehouse.counts.learn import learn_flow
from warehouse.layout import Layout

STRETTO = str(Path(sys.executable).parent / "stretto")


def decode_reference(flow: dict) -> dict:
    """The reference's packed symbols as our readable names (formats §3.3)."""
    vocab = ["respond" if v == "Respond" else v["Tool"] for v in flow["vocab"]]

    def name(symbol: int) -> str:
        if symbol == 4294967295:
            return "<start>"
        action, outcome = divmod(symbol // 4096, 4)
        if vocab[action] == "respond":
            return "respond" if outcome == 2 else "respond (end)"
        return vocab[action] + (" (error)" if outcome == 1 else "")

    def levels(levels: list) -> dict:
        return {
            tuple(name(s) for s in history): (
                {vocab[a]: n for a, n in counts["by_action"]},
                counts["total"],
            )
            for level in levels
            for history, counts in level
        }

    return {
        "habit": levels(flow["habit"]["base"]["levels"]),
        "reach": levels(flow["reach"]["levels"]),
    }


def ours(part: dict) -> dict:
    return {
        tuple(e["history"]): (e["counts"], e["total"]) for level in part["levels"] for e in level
    }


def test_the_reference_shop_logs_learn_what_the_reference_learned(tmp_path: Path) -> None:
    out = tmp_path / "shop.flow.json"
    done = learn_cli(REFERENCE_HOME / "logs/shop", out, tmp_path / "home")
    assert done.returncode == 0, done.stderr
    assert (
        done.stdout == f"stretto: learned the shop flow from 6 sessions (4 tools) and wrote {out}\n"
    )
    flow = load_flow(out)
    reference = json.loads((REFERENCE_HOME / "shop.flow.json").read_text())
    decoded = decode_reference(reference)
    assert ours(flow["habit"]) == decoded["habit"]
    assert ours(flow["reach"]) == decoded["reach"]
    assert flow["manifest"]["tools"] == reference["manifest"]["tools"]
    assert flow["contracts"] == reference["contracts"]
    assert {(s["after"], s["failed"]): s["lookups"] for s in flow["sites"]["next"]} == {
        (tool, failed): lookups for (tool, failed), lookups in reference["sites"]["next"]
    }
    assert flow["sites"]["reads"] == reference["sites"]["reads"]
    ref_args = {t: {"calls": c, "passed": p} for t, (c, p) in reference["bindings"]["args"].items()}
    assert flow["bindings"]["args"] == ref_args
    ref_sources = {
        (t, a): (v["values"], sorted((s, p, n) for (s, p), n in v["found"]))
        for (t, a), v in reference["bindings"]["sources"]
    }
    assert {
        (s["tool"], s["arg"]): (
            s["values"],
            [(f["source"], f["path"], f["count"]) for f in s["found"]],
        )
        for s in flow["bindings"]["sources"]
    } == ref_sources
    assert flow["bindings"]["agreed"] == reference["bindings"]["agreed"]
    assert flow["provenance"]["sources"] == ["quickstart"]
    assert flow["provenance"]["habit_episodes"] == 6
    # α from a grid posterior, not the reference's sampler: close, not equal
    assert (
        0.4 < flow["habit"]["alpha"] < 1.2
        and abs(reference["habit"]["base"]["alpha"] - 0.697) < 1e-3
    )


def test_hand_computed_counts(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_logs(home / "logs/shop", [shop_log(i) for i in range(4)])
    ingest(home)
    flow = learn_flow(Layout.at(home), "shop")
    habit, reach = ours(flow["habit"]), ours(flow["reach"])
    assert habit[()] == (
        {
            "close_order": 4.0,
            "find_account": 4.0,
            "get_account": 4.0,
            "get_order": 8.0,
            "respond": 4.0,
        },
        24.0,
    )
    assert habit[("get_order",)] == ({"get_order": 4.0, "respond": 4.0}, 8.0)
    assert habit[("get_order", "respond")] == ({"close_order": 4.0}, 4.0)
    assert habit[("<start>", "<start>")] == ({"find_account": 4.0}, 4.0)
    # per session, the actions from each step up to the write: {find, get_account, get_order,
    # reply}, {get_account, get_order, reply}, {get_order, reply} twice, {reply}, {}
    assert reach[()] == (
        {"find_account": 4.0, "get_account": 8.0, "get_order": 16.0, "respond": 20.0},
        24.0,
    )
    assert reach[("respond",)] == ({}, 4.0)
    assert {(s["after"], s["failed"]): s["lookups"] for s in flow["sites"]["next"]} == {
        ("find_account", False): {"get_account": 4},
        ("get_account", False): {"get_order": 4},
        ("get_order", False): {"get_order": 4},
    }
    sources = {(s["tool"], s["arg"]): s for s in flow["bindings"]["sources"]}
    assert sources[("get_account", "account")]["found"] == [
        {"source": "find_account", "path": "$", "count": 4}
    ]
    assert sources[("get_order", "order")]["found"] == [
        {"source": "get_account", "path": "$.orders[*]", "count": 8}
    ]
    assert sources[("find_account", "email")]["found"] == []  # the user typed it
    # the served models: a distribution over the actions (and the unseen one) sums to 1
    model = habit_model(flow)
    total = sum(model.distribution(flow["actions"] + ["<unseen>"], ["find_account"]).values())
    assert abs(total - 1.0) < 1e-9
    assert model.prob("get_account", ["find_account"]) > 0.9
    assert reach_model(flow).prob("get_order", ["get_account"]) > 0.9


def test_learning_is_counting_and_deterministic(tmp_path: Path) -> None:
    logs = [shop_log(i) for i in range(6)]
    parts = []
    for name, chunk in (("a", logs[:2]), ("b", logs[2:]), ("all", logs)):
        home = tmp_path / name
        write_logs(home / "logs/shop", chunk)
        ingest(home)
        parts.append(learn_flow(Layout.at(home), "shop", now_ms=0))
    a, b, both = parts
    for part in ("habit", "reach"):
        summed = {}
        for flow in (a, b):
            for history, (counts, total) in ours(flow[part]).items():
                into = summed.setdefault(history, ({}, 0.0))
                for action, n in counts.items():
                    into[0][action] = into[0].get(action, 0.0) + n
                summed[history] = (into[0], into[1] + total)
        assert summed == ours(both[part])
    again = tmp_path / "all"
    assert dumps(learn_flow(Layout.at(again), "shop", now_ms=0)).encode() == dumps(both).encode()


def test_a_bad_manifest_and_a_bad_flow_are_refused_by_field(tmp_path: Path) -> None:
    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps({"domain": "shop", "tools": {"a": "read", "b": "sometimes"}}))
    with pytest.raises(
        FlowError, match=r"m\.json: field `tools\.b`: expected read, write or generic"
    ):
        load_manifest(manifest)
    done = learn_cli(
        REFERENCE_HOME / "logs/shop",
        tmp_path / "x.json",
        tmp_path / "home",
        "--manifest",
        str(manifest),
    )
    assert done.returncode == 1 and "field `tools.b`" in done.stderr

    out = tmp_path / "shop.flow.json"
    assert learn_cli(REFERENCE_HOME / "logs/shop", out, tmp_path / "home").returncode == 0
    flow = json.loads(out.read_text())
    flow["habit"]["levels"][1][0]["total"] = -3
    bad = tmp_path / "bad.flow.json"
    bad.write_text(json.dumps(flow))
    with pytest.raises(FlowError, match=r"field `habit\.levels\[1\]\[0\]\.total`"):
        load_flow(bad)
    flow = json.loads(out.read_text())
    flow["program"]["body"] = []
    bad.write_text(json.dumps(flow))
    with pytest.raises(FlowError, match="field `program`: not the standard program"):
        load_flow(bad)


def test_a_manifest_sets_the_kinds(tmp_path: Path) -> None:
    manifest = tmp_path / "m.json"
    manifest.write_text(
        json.dumps(
            {
                "domain": "shop",
                "tools": {
                    "find_user_id_by_email": "read",
                    "get_user_details": "read",
                    "get_order_details": "generic",
                    "cancel_pending_order": "write",
                },
            }
        )
    )
    out = tmp_path / "shop.flow.json"
    done = learn_cli(
        REFERENCE_HOME / "logs/shop", out, tmp_path / "home", "--manifest", str(manifest)
    )
    assert done.returncode == 0, done.stderr
    flow = load_flow(out)
    assert flow["manifest"]["tools"]["get_order_details"] == "generic"
    assert flow["sites"]["reads"] == ["find_user_id_by_email", "get_user_details"]
    # a generic tool is no lookup: nothing follows get_user_details as a site any more
    assert [s["after"] for s in flow["sites"]["next"]] == ["find_user_id_by_email"]


def test_without_habit_only_the_command_says_the_arbiter_is_not_there(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            STRETTO,
            "learn",
            "--sessions",
            str(tmp_path),
            "--domain",
            "x",
            "--out",
            str(tmp_path / "x.json"),
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and "learn needs --oracle URI" in done.stderr
    shutil.rmtree(tmp_path)


def test_constants_and_bare_lookups(tmp_path: Path) -> None:
    builders = []
    for i in range(6):
        b = shop_log(i)
        for line in b.lines:
            params = line.get("message", {}).get("params", {})
            if params.get("name") == "get_order":
                params["arguments"]["fields"] = "status"  # always the same, no digit: a constant
        b.client_call(7000, 9, "list_recent").result(7001, 9, "[]")
        b.client_call(8000, 10, "list_recent", since=f"day {i}").result(8001, 10, "[]")
        b.lines[2]["message"]["result"]["tools"].append(
            {"name": "list_recent", "annotations": {"readOnlyHint": True}}
        )
        builders.append(b)
    logs = write_logs(tmp_path / "logs", builders)
    out = tmp_path / "shop.flow.json"
    done = learn_cli(logs, out, tmp_path / "home", "--constants")
    assert done.returncode == 0, done.stderr
    bindings = load_flow(out)["bindings"]
    assert bindings["constants"] == [{"tool": "get_order", "arg": "fields", "value": "status"}]
    assert bindings["bare"] == {"list_recent": 6}  # called 12 times, 6 of them with nothing

    from stretto.model.binding import Rules, SessionState, chance, pick

    rules = Rules.from_flow(bindings)
    state = SessionState()
    state.add_result("get_account", True, '{"orders": ["X1"]}')
    assert pick(rules, state, "get_order").arguments == {"order": "X1", "fields": "status"}
    bare = pick(rules, state, "list_recent")
    assert bare.arguments == {} and chance(rules, "list_recent", bare) == 7 / 14
    # without --constants there are none
    plain = tmp_path / "plain.flow.json"
    assert learn_cli(logs, plain, tmp_path / "home").returncode == 0
    assert "constants" not in load_flow(plain)["bindings"]


def test_list_arguments(tmp_path: Path) -> None:
    builders = []
    for i in range(4):
        b = shop_log(i)
        b.client_call(2500, 7, "get_orders", orders=[f"X{i}", f"Y{i}"]).result(2501, 7, "[]")
        b.lines[2]["message"]["result"]["tools"].append(
            {"name": "get_orders", "annotations": {"readOnlyHint": True}}
        )
        builders.append(b)
    out = tmp_path / "shop.flow.json"
    done = learn_cli(write_logs(tmp_path / "logs", builders), out, tmp_path / "home")
    assert done.returncode == 0, done.stderr
    bindings = load_flow(out)["bindings"]
    assert bindings["lists"] == [
        {
            "tool": "get_orders",
            "arg": "orders",
            "values": 4,
            "found": [{"source": "get_account", "path": "$.orders[*]", "count": 4}],
        }
    ]

    from stretto.model.binding import Rules, SessionState, pick

    rules = Rules.from_flow(bindings)
    state = SessionState()
    state.add_result("get_account", True, '{"orders": ["A7", "B8", "C9"]}')
    assert pick(rules, state, "get_orders").arguments == {"orders": ["A7", "B8", "C9"]}
    state.add_call("get_orders", {"orders": ["A7", "B8", "C9"]})
    assert pick(rules, state, "get_orders").error == "no list left to pass as `orders`"
    # every item must look like the items passed in training: an injected one stops the pick
    state.add_result("get_account", True, '{"orders": ["A7", "/etc/passwd"]}')
    refused = pick(rules, state, "get_orders")
    assert refused.arguments is None and refused.error is not None
    assert refused.error.startswith("`orders` '/etc/passwd' does not look like the values")
    assert bindings["shapes"][-1] == {
        "tool": "get_orders",
        "arg": "orders",
        "values": 8,
        "classes": ["digit", "upper"],
        "symbols": "",
        "length": [2, 2],
    }


def test_back_off_by_hand_and_lines_as_a_source(tmp_path: Path) -> None:
    home = tmp_path / "home"
    builders = []
    for i in range(3):
        b = LogBuilder()
        b.lines[0] = {**HEADER, "session": f"n-{i}", "started_unix_ms": i, "domain": "notes"}
        b._add(0, "client", {"jsonrpc": "2.0", "id": 0, "method": "tools/list"})
        b._add(
            1,
            "server",
            {
                "jsonrpc": "2.0",
                "id": 0,
                "result": {
                    "tools": [
                        {"name": "search", "annotations": {"readOnlyHint": True}},
                        {"name": "read", "annotations": {"readOnlyHint": True}},
                    ]
                },
            },
        )
        b.client_call(10, 1, "search", pattern="x").result(11, 1, f"/n/a{i}.md\n/n/b{i}.md\n")
        b.client_call(1000, 2, "read", path=f"/n/a{i}.md").result(1001, 2, "text")
        b.client_call(2000, 3, "read", path=f"/n/b{i}.md").result(2001, 3, "text")
        builders.append(b)
    write_logs(home / "logs/notes", builders)
    ingest(home)
    flow = learn_flow(Layout.at(home), "notes")
    (source,) = [s for s in flow["bindings"]["sources"] if s["tool"] == "read"]
    assert source["found"] == [{"source": "search", "path": "$[*]", "count": 6}]
    assert flow["bindings"]["agreed"]["read"] == [[6, 6], [0, 0]]

    # P(read | [search]) through the levels, by hand: actions respond, read, search (+ unseen)
    a, vocab = flow["habit"]["alpha"], 4
    p = 1 / vocab
    p = (6 + a * p) / (9 + a)  # level 0: read 6 of 9 steps
    p = (3 + a * p) / (3 + a)  # [search]: read 3 of 3
    p = (3 + a * p) / (3 + a)  # [<start>, search]: read 3 of 3
    p = (3 + a * p) / (3 + a)  # the group layer applies the longest context once more
    assert habit_model(flow).prob("read", ["search"]) == pytest.approx(p, rel=1e-12)
    # R(read | the start): each session's steps search, read, read reach {search, read},
    # {read}, {read} (no writes): read 9 of 9 at level 0, 3 of 3 after <start>, <start><start>
    r = 1 / vocab
    r = (9 + a * r) / (9 + a)
    r = (3 + a * r) / (3 + a)
    r = (3 + a * r) / (3 + a)
    assert reach_model(flow).prob("read", []) == pytest.approx(r, rel=1e-12)
