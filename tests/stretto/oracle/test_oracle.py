"""Asking with a cache and records: the cache's files, replay, seeded draws, the budget."""

from __future__ import annotations

import json
import stat

import pytest

from stretto.oracle.budget import check_budget, estimate
from stretto.oracle.cache import AnswerCache
from stretto.oracle.errors import BudgetError, Unanswered
from stretto.oracle.oracle import Oracle, draw_key
from stretto.oracle.runners import open_runner
from stretto.oracle.runners.base import Context, RunnerOptions
from tests.builders import KEY, systemone
from tests.stretto.oracle.conftest import options

HABIT = {"get_order_details": 0.6, "get_user_details": 0.1, "respond": 0.3}


def simulated(kind: str, cache=None, log=None) -> Oracle:
    return Oracle(open_runner(f"simulate://{kind}"), cache, log)


def test_answers_are_cached_privately_and_asked_once(
    api, sleeps, request_at_site, tmp_path
) -> None:
    api.route("POST", "/v1/systemone", systemone)
    cache = AnswerCache(tmp_path / "cache")
    runner = open_runner("jev://jev-latest", options(api, sleeps, env={"TYPESAFE_API_KEY": KEY}))
    first = Oracle(runner, cache).ask(request_at_site)
    again = Oracle(runner, cache).ask(request_at_site)
    assert len(api.requests_to("/v1/systemone")) == 1
    assert again.answers == first.answers and again.key == first.key
    assert again.record["cached"] and not first.record["cached"]
    assert again.record["model_version"] == "jev-1.14.0"
    assert again.record["tokens"] == first.record["tokens"] | {
        "estimated": again.record["tokens"]["estimated"]
    }
    path = cache.path(first.key)
    assert path == tmp_path / "cache" / first.key[:2] / f"{first.key}.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "cache").stat().st_mode) == 0o700
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left
    entry = json.loads(path.read_text())
    assert entry["answers"] == first.answers and entry["usage"]["input_tokens"] == 318
    assert "ann@example.com" not in path.read_text()  # the state is never cached


def test_the_record_of_an_answer(api, sleeps, request_at_site, tmp_path) -> None:
    api.route("POST", "/v1/systemone", systemone)
    log = tmp_path / "answers.jsonl"
    runner = open_runner("jev://jev-latest", options(api, sleeps, env={"TYPESAFE_API_KEY": KEY}))
    asked = Oracle(runner, log=log).ask(request_at_site)
    record = json.loads(log.read_text())
    assert record == asked.record
    assert record["runner"] == "jev" and record["model"] == "jev://jev-latest"
    assert record["request"] == json.dumps(request_at_site.wire("jev-latest"), ensure_ascii=False)
    assert record["tokens"]["estimated"] == -(-len(record["request"]) // 4)
    assert (record["choice"], record["confidence"]) == ("get_order_details", 0.7)
    assert record["draw"] is None and record["ms"] >= 0 and record["complete"]
    assert KEY not in log.read_text()
    assert stat.S_IMODE(log.stat().st_mode) == 0o600


def test_the_request_is_recorded_clipped(request_at_site) -> None:
    state = {"customer_request": "z" * 9000}
    from stretto.oracle.request import Request

    asked = simulated("random").ask(Request(state, request_at_site.questions), Context("k/s/0"))
    assert len(asked.record["request"]) == 4000 and asked.record["request"].endswith("…")
    assert asked.record["tokens"]["estimated"] > 2250


def test_an_unreadable_cache_entry_is_noted_and_asked_again(request_at_site, tmp_path) -> None:
    cache = AnswerCache(tmp_path)
    oracle = simulated("habit", cache)
    context = Context("flow/session/3", HABIT)
    first = oracle.ask(request_at_site, context)
    cache.path(first.key).write_text("{not json")
    again = oracle.ask(request_at_site, context)
    assert again.answers == first.answers and not again.record["cached"]
    assert again.record["notes"][0].endswith(
        "is not JSON (Expecting property name enclosed in "
        "double quotes: line 1 column 2 (char 1)); asked again"
    )
    entry = json.loads(cache.path(first.key).read_text())
    entry["answers"]["next"]["cancel_order"] = 1.0  # an answer that does not fit the questions
    cache.path(first.key).write_text(json.dumps(entry))
    third = oracle.ask(request_at_site, context)
    assert "does not fit the questions" in third.record["notes"][0]


def test_replay_answers_only_from_the_cache(request_at_site, tmp_path) -> None:
    cache = AnswerCache(tmp_path)
    asked = simulated("habit", cache).ask(request_at_site, Context("f/s/0", HABIT))
    replay = Oracle(open_runner("replay", replayed="simulate://habit"), cache)
    again = replay.ask(request_at_site, Context("f/s/0", HABIT))
    assert again.answers == asked.answers and again.record["cached"]
    assert again.record["draw"] == asked.record["draw"]
    with pytest.raises(Unanswered, match="replay: no cached answer of simulate://habit"):
        replay.ask(request_at_site, Context("f/s/1", HABIT))


def test_draws_are_seeded_by_flow_session_and_decision(request_at_site) -> None:
    oracle = simulated("habit")
    one = oracle.ask(request_at_site, Context(draw_key("f", "s", 0), HABIT))
    same = oracle.ask(request_at_site, Context(draw_key("f", "s", 0), HABIT))
    assert json.dumps(one.answers) == json.dumps(same.answers)
    assert one.record["draw"] == {"key": "f/s/0", "u": same.record["draw"]["u"]}
    nexts = {
        json.dumps(oracle.ask(request_at_site, Context(draw_key("f", "s", i), HABIT)).answers)
        for i in range(40)
    }
    assert len(nexts) > 1
    drawn = [
        oracle.ask(request_at_site, Context(f"f/s/{i}", HABIT)).record["choice"] for i in range(400)
    ]
    # the draw follows the habit: half of each answer is on the drawn option
    assert drawn.count("get_order_details") / 400 == pytest.approx(0.6, abs=0.08)
    answer = one.answers
    assert answer["go_on"]["yes"] == pytest.approx(1 - answer["next"]["respond"])
    assert sum(answer["next"].values()) == pytest.approx(1.0)


def test_random_answers_are_distributions(request_at_site) -> None:
    asked = simulated("random").ask(request_at_site, Context("f/s/0"))
    for answer in asked.answers.values():
        assert sum(answer.values()) == pytest.approx(1.0) and min(answer.values()) > 0
    assert asked.complete


def test_the_budget_refuses_before_asking(api, sleeps, request_at_site, tmp_path) -> None:
    api.route("POST", "/v1/systemone", systemone)
    cache = AnswerCache(tmp_path)
    runner = open_runner("jev://jev-latest", options(api, sleeps, env={"TYPESAFE_API_KEY": KEY}))
    oracle = Oracle(runner, cache)
    requests = [(request_at_site, Context())] * 1000
    found = estimate(oracle, requests)
    assert found.uncached == 1000 and found.output_tokens == 0
    assert found.dollars == pytest.approx(found.input_tokens * 0.042 / 1e6)
    with pytest.raises(
        BudgetError,
        match=r"jev://jev-latest: the 1000 uncached question sets "
        r"\(of 1000\) could cost \$0\.0\d",
    ):
        check_budget(oracle, requests, budget=0.001)
    assert api.seen == []
    oracle.ask(request_at_site)
    assert check_budget(oracle, requests, budget=0.0).uncached == 0


def test_a_price_can_be_given(request_at_site) -> None:
    runner = open_runner(
        "openai://m", RunnerOptions(base_url="http://127.0.0.1:9", price=(1.0, 2.0))
    )
    found = estimate(Oracle(runner), [(request_at_site, Context())])
    assert found.dollars == pytest.approx((found.input_tokens * 1.0 + 10 * 4 * 2.0) / 1e6)
