"""The replay rules on hand-made episodes (../shared/spec/results.md §2.2–2.4), with a flow
learned by the real pipeline from hand-made shop sessions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stretto.logs.episode import read_episode
from stretto.model.decide import Decider
from stretto.model.flow import load_flow
from stretto.offline.reports.replay import calibration, ceiling_turns, replay, replay_episode
from tests.builders import HEADER, SHOP_TOOLS, LogBuilder, stretto


@pytest.fixture
def shop(hand_made_shop_flow: Path) -> Path:
    """The flow learned from four hand-made shop sessions (tests/conftest.py)."""
    return hand_made_shop_flow


def episode(tmp_path: Path, name: str, build) -> object:
    b = LogBuilder()
    b.lines[0] = {**HEADER, "session": name, "domain": "shop"}
    b._add(0, "client", {"jsonrpc": "2.0", "id": 0, "method": "tools/list"})
    b._add(1, "server", {"jsonrpc": "2.0", "id": 0, "result": SHOP_TOOLS})
    b.say(2, "user", "I'm c9@example.com")
    build(b)
    path = tmp_path / f"{name}.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in b.lines))
    return read_episode(path)


def check(flow_path: Path, ep, decider: str = "reach", **options):
    flow = load_flow(flow_path)
    return replay_episode(ep, Decider(flow, decider, 0.3), **options)


def test_used_next_saves_its_turn(shop: Path, tmp_path: Path) -> None:
    def build(b: LogBuilder) -> None:
        b.client_call(10, 1, "find_account", email="c9@example.com").result(11, 1, "acct_9")
        b.client_call(1000, 2, "get_account", account="acct_9")
        b.result(1001, 2, json.dumps({"orders": ["X9"]}))
        b.say(2000, "assistant", "You have one order.")

    c = check(shop, episode(tmp_path, "next", build))
    # after find_account the flow reads acct_9 (the agent's own next call answers it)
    assert (c.turns, c.tool_turns, c.calls) == (3, 2, 2)
    assert (c.turns_saved, c.calls_skipped, c.used_next, c.used_later) == (1, 1, 1, 0)
    # it goes on to order X9, which the agent never reads: a stand-in, so a detour
    assert c.flow_lookups == 2 and c.detours == 1


def test_used_later_counts_a_call_in_between(shop: Path, tmp_path: Path) -> None:
    def build(b: LogBuilder) -> None:
        b.client_call(10, 1, "find_account", email="c9@example.com").result(11, 1, "acct_9")
        b.client_call(1000, 2, "find_account", email="c9@example.com").result(1001, 2, "acct_9")
        b.client_call(2000, 3, "get_account", account="acct_9")
        b.result(2001, 3, json.dumps({"orders": ["X9"]}))

    c = check(shop, episode(tmp_path, "later", build), per_call=1)
    # the repeated find_account is made again (the agent's own repeats are not savings)
    assert c.calls == 3 and c.calls_skipped == 1
    assert (c.used_next, c.used_later, c.turns_saved) == (0, 1, 1)


def test_a_write_ends_a_lookups_reach(shop: Path, tmp_path: Path) -> None:
    def build(b: LogBuilder) -> None:
        b.client_call(10, 1, "find_account", email="c9@example.com").result(11, 1, "acct_9")
        b.client_call(1000, 2, "close_order", order="X9").result(1001, 2, "closed")
        b.client_call(2000, 3, "get_account", account="acct_9")
        b.result(2001, 3, json.dumps({"orders": []}))

    c = check(shop, episode(tmp_path, "stale", build), per_call=1)
    # the agent read the account only after a write: the lookup could not stand for it
    assert c.flow_lookups == 1 and c.calls_skipped == 0
    assert c.detours == 1 and c.turns_saved == 0


def test_a_turn_is_saved_only_when_all_its_calls_were_answered(shop: Path, tmp_path: Path) -> None:
    def build(b: LogBuilder) -> None:
        b.client_call(10, 1, "find_account", email="c9@example.com").result(11, 1, "acct_9")
        # one LLM turn, two calls: the flow can answer the account, not the second search
        b.client_call(1000, 2, "get_account", account="acct_9")
        b.client_call(1001, 3, "find_account", email="other@example.com")
        b.result(1002, 2, json.dumps({"orders": ["X9"]})).result(1003, 3, "acct_10")

    c = check(shop, episode(tmp_path, "partial", build), per_call=1)
    assert (c.tool_turns, c.calls, c.calls_skipped, c.used_next) == (2, 3, 1, 1)
    assert c.turns_saved == 0


def test_no_lookups_above_one_threshold(shop: Path, tmp_path: Path) -> None:
    def build(b: LogBuilder) -> None:
        b.client_call(10, 1, "find_account", email="c9@example.com").result(11, 1, "acct_9")
        b.client_call(1000, 2, "get_account", account="acct_9").result(1001, 2, "{}")

    flow = load_flow(shop)
    c = replay_episode(episode(tmp_path, "high", build), Decider(flow, "reach", 1.01))
    assert c.flow_lookups == 0 and c.turns_saved == 0 and c.ceiling == 1


def test_the_ceiling_counts_read_turns_copied_from_results(shop: Path, tmp_path: Path) -> None:
    def build(b: LogBuilder) -> None:
        # turn 1: the first call — nothing came back yet, so not in the ceiling
        b.client_call(10, 1, "find_account", email="c9@example.com").result(11, 1, "acct_9")
        # turn 2: reads, arguments copied from a result — in the ceiling
        b.client_call(1000, 2, "get_account", account="acct_9")
        b.result(1001, 2, json.dumps({"orders": ["X9", "Y9"]}))
        # turn 3: two reads in parallel, both copied — in the ceiling (one turn)
        b.client_call(2000, 3, "get_order", order="X9").client_call(
            2001, 4, "get_order", order="Y9"
        )
        b.result(2002, 3, "{}").result(2003, 4, "{}")
        # turn 4: a read with a value nobody returned — the LLM made it up: not in the ceiling
        b.client_call(3000, 5, "get_order", order="Z1").result(3001, 5, "{}")
        # turn 5: a write — never in a read-only ceiling
        b.client_call(4000, 6, "close_order", order="X9").result(4001, 6, "closed")
        # turn 6: a reply
        b.say(5000, "assistant", "Done.")

    ep = episode(tmp_path, "ceiling", build)
    kinds = load_flow(shop)["manifest"]["tools"]
    assert ceiling_turns(ep, kinds) == 2
    c = check(shop, ep)
    assert c.turns == 6 and c.ceiling == 2


def test_calibration_rows_and_measures(shop: Path) -> None:
    flow = load_flow(shop)
    ep = read_episode(next((shop.parent / "sessions").glob("*.jsonl")))
    result = replay(flow, [ep], decider="reach", explore=0.0)
    rows = result.episodes[0].options
    assert rows and all(0 <= r["score"] <= 1 for r in rows)
    measures = calibration(rows)
    assert measures["options"] == len(rows)
    assert measures["brier"] == pytest.approx(
        sum((r["score"] - r["used"]) ** 2 for r in rows) / len(rows)
    )


def test_replay_cli_markdown_and_json(shop: Path, tmp_path: Path) -> None:
    sessions = shop.parent / "sessions"
    done = stretto(
        "replay",
        "--flow",
        shop,
        "--sessions",
        sessions,
        "--format",
        "json",
        "--explore",
        "0",
        "--out",
        tmp_path / "tables",
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    total = data["total"]
    assert total["episodes"] == 4 and total["turns_saved"] <= total["ceiling"]
    assert total["detours"] == total["flow_lookups"] - total["calls_skipped"]
    assert data["calibration"]["options"] > 0
    assert {p.name for p in (tmp_path / "tables").iterdir()} == {
        "episodes.parquet",
        "totals.parquet",
        "options.parquet",
        "calibration.parquet",
        "reliability.png",
    }
    markdown = stretto("replay", "--flow", shop, "--sessions", sessions)
    assert markdown.returncode == 0 and "Turns saved:" in markdown.stdout
    missing = stretto("replay", "--flow", shop, "--sessions", tmp_path / "nowhere")
    assert missing.returncode == 1 and "nowhere" in missing.stderr
