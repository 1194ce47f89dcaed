"""`stretto promote`: scoring as served, the Wilson bar, the written flow, review of it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from stretto.logs.merged import read_episodes
from stretto.model.flow import FlowError, dumps, load_flow
from stretto.offline.lifecycle.promote import Bar, promote, promote_served, score, wilson_lower
from tests.builders import stretto
from tests.conftest import REFERENCE_HOME

Z = 1.6448536

SHOP_TOOLS = [
    {
        "name": "find_user_id_by_email",
        "inputSchema": {
            "type": "object",
            "properties": {"email": {"type": "string"}},
            "required": ["email"],
        },
        "annotations": {"readOnlyHint": True},
    },
    {
        "name": "get_user_details",
        "inputSchema": {
            "type": "object",
            "properties": {"user_id": {"type": "string"}},
            "required": ["user_id"],
        },
        "annotations": {"readOnlyHint": True},
    },
    {
        "name": "get_order_details",
        "inputSchema": {
            "type": "object",
            "properties": {"order_id": {"type": "string"}},
            "required": ["order_id"],
        },
        "annotations": {"readOnlyHint": True},
    },
    {
        "name": "cancel_pending_order",
        "inputSchema": {
            "type": "object",
            "properties": {"order_id": {"type": "string"}, "reason": {"type": "string"}},
            "required": ["order_id", "reason"],
        },
        "annotations": {"readOnlyHint": False},
    },
]


def write_session(folder: Path, session: str, steps: list) -> Path:
    """A session log (version 2) as stretto-proxy writes it. `steps`: ("user", text),
    ("assistant", text), or ("turn", [(tool, arguments, result text), ...]) — one LLM turn,
    its calls sent together, then answered; turns 1 s apart (never one turn by timing)."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = [
        {
            "stretto_mcp_log": 2,
            "session": session,
            "started_unix_ms": 1_790_000_000_000,
            "server_command": ["shop-server"],
            "domain": "shop",
            "agent_model": "hand-made",
        }
    ]
    t, next_id = 0, 1

    def wire(sender: str, message: dict) -> None:
        lines.append({"t_ms": t, "from": sender, "message": message})

    wire("client", {"jsonrpc": "2.0", "id": 0, "method": "tools/list", "params": {}})
    wire("server", {"jsonrpc": "2.0", "id": 0, "result": {"tools": SHOP_TOOLS}})
    for step in steps:
        t += 1000
        if step[0] in ("user", "assistant"):
            wire("context", {"role": step[0], "content": step[1]})
            continue
        ids = []
        for tool, arguments, _ in step[1]:
            params = {"name": tool, "arguments": arguments}
            wire(
                "client",
                {"jsonrpc": "2.0", "id": next_id, "method": "tools/call", "params": params},
            )
            ids.append(next_id)
            next_id += 1
        for call_id, (_, _, text) in zip(ids, step[1], strict=True):
            t += 1
            result = {"content": [{"type": "text", "text": text}], "isError": False}
            wire("server", {"jsonrpc": "2.0", "id": call_id, "result": result})
    path = folder / f"{session}.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def user(n: str, orders: list[str]) -> str:
    return json.dumps({"user_id": f"user_{n}", "orders": orders})


def order(o: str) -> str:
    return json.dumps({"order_id": o, "status": "pending"})


def uses(folder: Path, n: str) -> Path:
    """The agent makes every call the flow would have looked up: find the user, read them,
    read their one order, cancel it."""
    return write_session(
        folder,
        f"20270101T0900{n:0>2}.000Z-1",
        [
            ("user", f"I'm c{n}@example.com, cancel my order"),
            ("turn", [("find_user_id_by_email", {"email": f"c{n}@example.com"}, f"user_{n}")]),
            ("turn", [("get_user_details", {"user_id": f"user_{n}"}, user(n, [f"#W{n}"]))]),
            ("turn", [("get_order_details", {"order_id": f"#W{n}"}, order(f"#W{n}"))]),
            ("assistant", "Cancel it?"),
            ("user", "yes"),
            (
                "turn",
                [
                    (
                        "cancel_pending_order",
                        {"order_id": f"#W{n}", "reason": "no longer needed"},
                        "cancelled",
                    )
                ],
            ),
            ("assistant", "Done."),
        ],
    )


def leaves(folder: Path, n: str) -> Path:
    """The agent finds the user and stops: the flow's lookup of their details is a detour."""
    return write_session(
        folder,
        f"20270101T1000{n:0>2}.000Z-1",
        [
            ("user", f"I'm c{n}@example.com"),
            ("turn", [("find_user_id_by_email", {"email": f"c{n}@example.com"}, f"user_{n}")]),
            ("assistant", "Found you. Anything else?"),
        ],
    )


def tallies(scored) -> dict:
    return {
        site: (t.decisions, t.lookups, t.used, len(t.tasks)) for site, t in scored.sites.items()
    }


@pytest.fixture
def shop(shop_flow_path: Path) -> dict:
    return load_flow(shop_flow_path)


# --- the Wilson lower bound ---------------------------------------------------------------


def test_wilson_lower_bound_by_hand() -> None:
    z2 = Z * Z
    # all used: p = 1, the margin is z²/2n, so the bound is 1 / (1 + z²/n)
    assert wilson_lower(3, 3) == pytest.approx(1 / (1 + z2 / 3), abs=1e-15)
    assert wilson_lower(3, 3) == pytest.approx(0.5258044340133321, abs=1e-12)  # the reference's
    assert wilson_lower(6, 6) == pytest.approx(1 / (1 + z2 / 6), abs=1e-15)
    # half used of 10: centre 0.5 + z²/20, margin z·sqrt(0.025 + z²/400), over 1 + z²/10
    half = (0.5 + z2 / 20 - Z * math.sqrt(0.025 + z2 / 400)) / (1 + z2 / 10)
    assert wilson_lower(5, 10) == pytest.approx(half, abs=1e-15)
    assert wilson_lower(5, 10) == pytest.approx(0.26928, abs=1e-5)
    # 9 of 10: p = 0.9
    nine = (0.9 + z2 / 20 - Z * math.sqrt(0.09 / 10 + z2 / 400)) / (1 + z2 / 10)
    assert wilson_lower(9, 10) == pytest.approx(nine, abs=1e-15)
    assert wilson_lower(9, 10) == pytest.approx(0.65228, abs=1e-5)
    assert wilson_lower(0, 5) == 0.0 and wilson_lower(0, 0) == 0.0


# --- scoring as served --------------------------------------------------------------------


def test_scoring_counts_the_lookups_the_agent_made_later(shop: dict, tmp_path: Path) -> None:
    uses(tmp_path, "1")
    leaves(tmp_path, "2")
    episodes = read_episodes(tmp_path)
    scored = score(shop, episodes, chains=set(), keep_decisions=True)
    assert tallies(scored) == {
        # looked up in both sessions; the agent read the user only in the first
        "find_user_id_by_email": (2, 2, 1, 2),
        "get_user_details": (1, 1, 1, 1),
        # its one order was read already: nothing left to pass
        "get_order_details": (1, 0, 0, 0),
        "cancel_pending_order": (1, 0, 0, 0),
    }
    first = [d for d in scored.decisions if d["site"] == "find_user_id_by_email"]
    assert [(d["tool"], d["arguments"], d["used"]) for d in first] == [
        ("get_user_details", {"user_id": "user_1"}, True),
        ("get_user_details", {"user_id": "user_2"}, False),
    ]
    hand_back = [d for d in scored.decisions if d["site"] == "get_order_details"]
    assert hand_back[0]["reason"] == "get_order_details: nothing left to pass as `order_id`"


def test_chains_answer_a_used_lookup_with_the_agents_result(shop: dict, tmp_path: Path) -> None:
    uses(tmp_path, "1")
    episodes = read_episodes(tmp_path)
    # after find_user: get_user_details (used), then on its result get_order_details (used),
    # then nothing left to pass; after get_user_details the same chain from there; after
    # get_order_details nothing left
    assert tallies(score(shop, episodes)) == {
        "find_user_id_by_email": (1, 1, 1, 1),
        "get_user_details": (2, 2, 2, 1),
        "get_order_details": (3, 0, 0, 0),
        "cancel_pending_order": (1, 0, 0, 0),
    }
    only_first = score(shop, episodes, chains={"find_user_id_by_email"})
    assert tallies(only_first)["get_user_details"] == (2, 2, 2, 1)
    assert tallies(only_first)["get_order_details"] == (1, 0, 0, 0)  # no chain past get_user


def test_extra_arguments_count_as_used_and_different_ones_do_not(
    shop: dict, tmp_path: Path
) -> None:
    found = ("find_user_id_by_email", {"email": "c7@example.com"}, "user_7")
    write_session(
        tmp_path,
        "20270101T110000.000Z-1",
        [("turn", [found]), ("turn", [("get_user_details", {"user_id": "user_7", "x": 1}, "{}")])],
    )
    write_session(
        tmp_path,
        "20270101T110100.000Z-1",
        [("turn", [found]), ("turn", [("get_user_details", {"user_id": "user_8"}, "{}")])],
    )
    scored = score(shop, read_episodes(tmp_path), chains=set())
    assert tallies(scored)["find_user_id_by_email"] == (2, 2, 1, 2)


def test_a_call_already_sent_in_the_turn_is_never_looked_up(shop: dict, tmp_path: Path) -> None:
    # the host sent both calls before either answered: the proxy knows get_user_details is on
    # its way when find_user_id_by_email answers, and does not look it up
    write_session(
        tmp_path,
        "20270101T120000.000Z-1",
        [
            (
                "turn",
                [
                    ("find_user_id_by_email", {"email": "c9@example.com"}, "user_9"),
                    ("get_user_details", {"user_id": "user_9"}, user("9", [])),
                ],
            ),
            ("assistant", "ok"),
        ],
    )
    scored = score(shop, read_episodes(tmp_path), chains=set(), keep_decisions=True)
    first = scored.decisions[0]
    assert first["site"] == "find_user_id_by_email" and first["action"] == "hand_back"
    assert first["reason"] == "get_user_details: nothing left to pass as `user_id`"


# --- the bar --------------------------------------------------------------------------------


def test_the_bar_wants_enough_tasks_and_enough_used(shop: dict, tmp_path: Path) -> None:
    for n in ("1", "2"):
        uses(tmp_path, n)
    two = promote_served(shop, read_episodes(tmp_path))
    # nothing promoted, so the last round chained through no site, as the flow would serve
    assert two.rounds == 2
    assert two.record["sites"]["get_user_details"]["used"] == 2
    assert not two.record["sites"]["get_user_details"]["promoted"]  # 2 tasks, 3 wanted
    assert not promote_served(shop, read_episodes(tmp_path), Bar(min_tasks=3)).record["sites"][
        "find_user_id_by_email"
    ]["promoted"]
    assert promote_served(shop, read_episodes(tmp_path), Bar(min_tasks=2, min_lower=0.3)).record[
        "sites"
    ]["find_user_id_by_email"]["promoted"]

    uses(tmp_path, "3")
    three = promote_served(shop, read_episodes(tmp_path))
    sites = three.record["sites"]
    assert sites["find_user_id_by_email"] == {
        "decisions": 3,
        "lookups": 3,
        "used": 3,
        "tasks": 3,
        "lower": pytest.approx(wilson_lower(3, 3)),
        "promoted": True,
    }
    assert sites["get_user_details"]["promoted"] and not sites["get_order_details"]["promoted"]
    assert three.record["bar"] == {
        "threshold": 0.3,
        "min_used": 0.7,
        "min_lower": 0.5,
        "min_tasks": 3,
    }

    for n in ("4", "5"):
        leaves(tmp_path, n)
    # find_user: 3 of 5 used (60%) is below 70%; the lower bound is below 0.5 too
    five = promote_served(shop, read_episodes(tmp_path)).record["sites"]
    assert (five["find_user_id_by_email"]["used"], five["find_user_id_by_email"]["lookups"]) == (
        3,
        5,
    )
    assert not five["find_user_id_by_email"]["promoted"]
    assert five["get_user_details"]["promoted"]  # its lookups were all made
    lenient = promote_served(shop, read_episodes(tmp_path), Bar(min_used=0.6, min_lower=0.2))
    assert lenient.record["sites"]["find_user_id_by_email"]["promoted"]


def test_promote_directly_from_tallies() -> None:
    from stretto.offline.lifecycle.promote import SiteTally

    tallies = {
        "a": SiteTally(10, 10, 9, {"s1", "s2", "s3"}),
        "b": SiteTally(10, 10, 9, {"s1", "s2"}),
        "c": SiteTally(4, 0, 0, set()),
    }
    record = promote(tallies, Bar())
    assert record["sites"]["a"]["promoted"] and record["sites"]["a"]["lower"] == pytest.approx(
        0.65228, abs=1e-5
    )
    assert not record["sites"]["b"]["promoted"]  # two tasks
    assert record["sites"]["c"] == {
        "decisions": 4,
        "lookups": 0,
        "used": 0,
        "tasks": 0,
        "lower": 0.0,
        "promoted": False,
    }


def test_a_promoted_flows_own_record_is_ignored_when_scoring(shop: dict, tmp_path: Path) -> None:
    for n in ("1", "2", "3"):
        uses(tmp_path, n)
    episodes = read_episodes(tmp_path)
    plain = promote_served(shop, episodes).record
    already = dict(shop, promoted={"bar": plain["bar"], "sites": {}})  # promotes nothing
    assert promote_served(already, episodes).record == plain


# --- the command ----------------------------------------------------------------------------


def test_the_command_writes_a_flow_that_loads_and_flow_diff_reviews_it(
    shop_flow_path: Path, tmp_path: Path
) -> None:
    shadow = REFERENCE_HOME / "shadow/shop"
    strict, promoted = tmp_path / "strict.flow.json", tmp_path / "promoted.flow.json"
    flow_args = ["--flow", str(shop_flow_path), "--shadow", str(shadow)]
    done = stretto("promote", *flow_args, "--min-tasks", "4", "--out", str(strict))
    assert done.returncode == 0, done.stderr
    assert "promoted 0 of 4 sites" in done.stderr
    done = stretto(
        "promote", "--flow", str(shop_flow_path), "--shadow", str(shadow), "--out", str(promoted)
    )
    assert done.returncode == 0, done.stderr
    report = done.stdout
    assert report.startswith("# Promotion\n\nScored as served with the reach decider")
    assert (
        "| After | Decisions | Lookups it would make | Made by the agent later | Lower bound "
        "| Tasks | Promoted |" in report
    )
    assert "| find_user_id_by_email | 3 | 3 | 3 (100%) | 0.53 | 3 | yes |" in report
    assert "| cancel_pending_order | 2 | 0 | 0 (—) | 0.00 | 0 | no |" in report

    flow = load_flow(promoted)
    assert {s for s, e in flow["promoted"]["sites"].items() if e["promoted"]} == {
        "find_user_id_by_email",
        "get_user_details",
        "get_order_details",
    }
    assert promoted.read_text() == dumps(flow)  # one line, keys sorted, as flows are written
    source = load_flow(shop_flow_path)
    assert {k: v for k, v in flow.items() if k != "promoted"} == source  # nothing else changed

    # a site that now acts where it did not needs review
    diff = stretto("flow-diff", str(strict), str(promoted))
    assert diff.returncode == 1, diff.stdout + diff.stderr
    assert "- a site promoted: find_user_id_by_email (the agent later made 3 of the 3" in (
        diff.stdout
    )
    assert "- a site promoted: get_user_details" in diff.stdout
    # from a flow without a record, promotion only takes action away: listed, no review
    diff = stretto("flow-diff", str(shop_flow_path), str(promoted))
    assert diff.returncode == 0, diff.stdout
    assert "promotion: no promotion record (acts at every site) -> 3 of 4 sites" in diff.stdout
    # and flow-show says which sites act
    show = stretto("flow-show", str(promoted))
    assert show.returncode == 0, show.stderr
    assert "**Promotion.** 3 of 4 sites promoted" in show.stdout
    assert "Promoted: the agent later made 3 of the 3 lookups it would make" in show.stdout

    # in place
    in_place = tmp_path / "in-place.flow.json"
    in_place.write_text(shop_flow_path.read_text())
    done = stretto("promote", "--flow", str(in_place), "--shadow", str(shadow))
    assert done.returncode == 0 and load_flow(in_place)["promoted"] == flow["promoted"]


def test_the_command_refuses_bad_input(shop_flow_path: Path, tmp_path: Path) -> None:
    shadow = str(REFERENCE_HOME / "shadow/shop")
    flow = str(shop_flow_path)
    cases = [
        (["--flow", flow, "--shadow", str(tmp_path / "none")], "not a directory of session logs"),
        (["--flow", flow, "--shadow", str(tmp_path)], "no session logs (*.jsonl) to score"),
        (["--flow", flow, "--shadow", shadow, "--min-used", "1.5"], "--min-used wants a share"),
        (["--flow", flow, "--shadow", shadow, "--min-tasks", "-1"], "--min-tasks wants a count"),
        (["--flow", str(tmp_path / "no.flow.json"), "--shadow", shadow], "cannot read"),
    ]
    for args, message in cases:
        done = stretto("promote", *args)
        assert done.returncode == 1, (args, done.stderr)
        assert message in done.stderr, (args, done.stderr)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"stretto_mcp_log": 9, "session": "x"}\n')
    done = stretto("promote", "--flow", flow, "--shadow", str(tmp_path))
    assert done.returncode == 1 and "unknown session-log version 9" in done.stderr
    assert not list(tmp_path.glob("*.flow.json"))  # nothing written


def test_the_loader_checks_the_promoted_record(shop_flow_path: Path, tmp_path: Path) -> None:
    flow = json.loads(shop_flow_path.read_text())
    flow["promoted"] = {"bar": Bar().as_dict(), "sites": {"x": {"decisions": 1}}}
    path = tmp_path / "bad.flow.json"
    path.write_text(json.dumps(flow))
    with pytest.raises(FlowError, match="promoted.sites.x"):
        load_flow(path)


# --- the reference's shadow sessions --------------------------------------------------------


def test_the_reference_shadow_sessions_score(shop: dict) -> None:
    episodes = read_episodes(REFERENCE_HOME / "shadow/shop")
    without_chains = score(shop, episodes, chains=set())
    # the same evidence as the reference's promoted fixture (scored there without chains)
    reference = json.loads((REFERENCE_HOME / "shop.promoted.flow.json").read_text())["promoted"]
    assert {
        site: (e["decisions"], e["lookups"], e["used"], e["tasks"])
        for site, e in reference["sites"].items()
    } == tallies(without_chains)
    promotion = promote_served(shop, episodes)
    assert promotion.rounds == 2 and promotion.decider == "reach"
    record = promotion.record
    assert {s for s, e in record["sites"].items() if e["promoted"]} == {
        s for s, e in reference["sites"].items() if e["promoted"]
    }
    assert [(s, e["lookups"], e["used"]) for s, e in sorted(record["sites"].items())] == [
        ("cancel_pending_order", 0, 0),
        ("find_user_id_by_email", 3, 3),
        ("get_order_details", 9, 9),
        ("get_user_details", 6, 6),
    ]


def test_served_sessions_are_scored_with_a_warning(shop_flow_path: Path, tmp_path: Path) -> None:
    done = stretto(
        "promote",
        "--flow",
        str(shop_flow_path),
        "--shadow",
        str(REFERENCE_HOME / "served/shop"),
        "--out",
        str(tmp_path / "out.flow.json"),
    )
    assert done.returncode == 0, done.stderr
    assert "warning: 2 of 2 sessions" in done.stderr and "hold a flow's own lookups" in done.stderr
    assert "| find_user_id_by_email | 2 | 2 | 0 (0%) | 0.00 | 2 | no |" in done.stdout


def test_flow_diff_lists_promotions_and_demotions(shop: dict) -> None:
    from stretto.offline.lifecycle.flowdiff import diff
    from stretto.offline.lifecycle.flowshow import summary

    def entry(promoted: bool) -> dict:
        lower = wilson_lower(3, 3)
        return dict(decisions=3, lookups=3, used=3, tasks=3, lower=lower, promoted=promoted)

    def with_record(**sites: bool) -> dict:
        record = {"bar": Bar().as_dict(), "sites": {s: entry(p) for s, p in sites.items()}}
        return dict(shop, promoted=record)

    old = with_record(get_user_details=True, get_order_details=False)
    new = with_record(get_user_details=False, get_order_details=True)
    review, other = diff(old, new)
    assert review == [
        "a site promoted: get_order_details (the agent later made 3 of the 3 lookups it would "
        "make (100%), lower bound 0.53, 3 tasks)"
    ]
    assert "a site not promoted: get_user_details (the agent later made 3 of the 3" in other[0]
    assert other[1].startswith("promotion: 1 of 2 sites promoted (get_user_details)")
    # every site the old record did not promote acts again when the record goes
    review, _ = diff(old, shop)
    assert review == [
        "a site acts again (the promotion record was removed): find_user_id_by_email",
        "a site acts again (the promotion record was removed): get_order_details",
    ]
    assert diff(old, old) == ([], [])
    # flow-show: a site the record does not list is not promoted, and hands back
    shown = {s["site"]: s for s in summary(old)["sites"]}
    assert shown["find_user_id_by_email"]["promotion"] == {"promoted": False, "evidence": None}
    assert shown["find_user_id_by_email"]["lookups"][0]["verdict"].startswith(
        "hands back: not promoted; in shadow, looks up get_user_details: 0.99 × 0.88"
    )
    assert shown["get_user_details"]["promotion"]["promoted"] is True
    assert summary(shop)["sites"][0]["promotion"] is None


def test_the_decider_decides_in_shadow_at_a_site_not_promoted(shop: dict) -> None:
    from stretto.model.binding import SessionState
    from stretto.model.decide import Decider

    state = SessionState()
    state.add_call("find_user_id_by_email", {"email": "c1@example.com"})
    state.add_result("find_user_id_by_email", True, "user_1")
    history, last = ["find_user_id_by_email"], ("find_user_id_by_email", False)
    acting = Decider(shop).decide(history, last, state)
    record = {"bar": Bar().as_dict(), "sites": {}}
    shadow = Decider(dict(shop, promoted=record)).decide(history, last, state)
    assert acting.looks_up and not acting.shadow
    # the same decision, made and marked shadow: it is logged, never acted on
    assert shadow.shadow and not shadow.looks_up
    assert (shadow.action, shadow.tool) == ("lookup", "get_user_details")
    assert shadow.arguments == acting.arguments == {"user_id": "user_1"}
    assert (shadow.prob, shadow.binding) == (acting.prob, acting.binding)
    record["sites"]["find_user_id_by_email"] = dict(
        decisions=1, lookups=1, used=1, tasks=1, lower=0.2, promoted=True
    )
    promoted = Decider(dict(shop, promoted=record)).decide(history, last, state)
    assert promoted.looks_up and not promoted.shadow
