"""The Decider's hook: an arbiter decision asks, then judges — or hands back saying why."""

from __future__ import annotations

import json

import pytest

from stretto.oracle.arbiter import ArbiterError, arbiter_file, new_arbiter, take_arbiter
from stretto.oracle.fit import fit_folds
from stretto.oracle.judge import INCOMPLETE, ArbiterJudge
from stretto.oracle.oracle import open_oracle, parse_price
from stretto.oracle.questions import probe_request
from stretto.oracle.runners.base import Context
from tests.builders import KEY, small_flow, synthetic_cases, systemone
from tests.stretto.oracle.conftest import conversation

HABIT = {"get_order": 0.5, "get_user": 0.2}


@pytest.fixture
def flow() -> dict:
    flow = small_flow()
    arbiter = new_arbiter(model="jev://jev-latest", folds=fit_folds(synthetic_cases(2, 300), []))
    flow["arbiter"] = arbiter.to_json()
    return flow


@pytest.fixture(autouse=True)
def key(monkeypatch) -> None:
    monkeypatch.setenv("TYPESAFE_API_KEY", KEY)


def judge(flow, api, tmp_path, **options):
    oracle = open_oracle("jev://jev-latest", cache=tmp_path / "cache", base_url=api.url, **options)
    return ArbiterJudge(flow, oracle, session="s1")


def decide(judged):
    return judged(
        site="get_user",
        prev="get_user",
        lookups=["get_order", "get_user"],
        habit=HABIT,
        conversation=conversation(),
        index=0,
    )


def test_an_answered_decision_is_judged(flow, api, tmp_path) -> None:
    api.route("POST", "/v1/systemone", systemone)
    judgement = decide(judge(flow, api, tmp_path))
    assert judgement.reason is None
    assert set(judgement.probs) == {"get_order", "get_user", "respond"}
    assert judgement.oracle == {"get_order": 0.7, "get_user": 0.15, "respond": 0.15}
    assert judgement.key == judgement.record["key"] and len(judgement.key) == 64


def test_an_incomplete_answer_hands_back(flow, api, tmp_path) -> None:
    api.script("POST", "/v1/systemone", (200, {}, {"model": "jev-1.14.0", "answers": {}}))
    judgement = decide(judge(flow, api, tmp_path))
    assert judgement.reason == INCOMPLETE and judgement.probs == {}


@pytest.mark.parametrize(
    "reply, reason",
    [
        (
            (500, {}, {"error": {"message": "upstream exploded"}}),
            "the System-One model failed: jev://jev-latest: http://127.0.0.1:",
        ),
        (
            (200, {}, "<html>"),
            "the System-One model failed: jev://jev-latest: the answer is not JSON",
        ),
        (
            (429, {"retry-after": "1"}, {"error": "slow down"}),
            "the System-One model failed: jev://jev-latest: ",
        ),
    ],
)
def test_a_failing_oracle_hands_back_at_once(flow, api, tmp_path, reply, reason) -> None:
    api.script("POST", "/v1/systemone", reply)
    api.route("POST", "/v1/systemone", systemone)
    judgement = decide(judge(flow, api, tmp_path, timeout=2.0, retries=0))
    assert judgement.reason.startswith(reason) and judgement.probs == {}
    assert len(api.requests_to("/v1/systemone")) == 1  # serving does not retry


def test_prices_and_probe(tmp_path) -> None:
    assert parse_price("3,15") == (3.0, 15.0) and parse_price("0.042") == (0.042, 0.0)
    with pytest.raises(ValueError, match=r"--oracle-price 'cheap': expected dollars per million"):
        parse_price("cheap")
    oracle = open_oracle("simulate://random", cache=tmp_path)
    assert oracle.ask(probe_request(), Context("doctor/probe/0")).complete


def test_an_arbiter_is_taken_from_a_file_or_a_flow(flow) -> None:
    exported = json.loads(json.dumps(arbiter_file(flow["arbiter"], "shop")))
    taken = take_arbiter(exported, "shop.arbiter.json")
    assert taken.sources == ["arbiter (shop): shop.arbiter.json"]
    assert take_arbiter(flow, "shop.flow.json").sources == ["arbiter: shop.flow.json"]
    crossed = {
        **flow["arbiter"],
        "folds": [f.to_json() for f in fit_folds(synthetic_cases(3, 300), [], pooled=False)],
    }
    with pytest.raises(ArbiterError, match="cross-fitted"):
        arbiter_file(crossed, "shop")
    with pytest.raises(ArbiterError, match="shop.flow.json: the flow has no arbiter"):
        take_arbiter(small_flow(), "shop.flow.json")


def test_serving_an_arbiter_imports_nothing_heavy() -> None:
    """The proxy will judge with this package: it must start without numpy and friends."""
    import subprocess

    from tests.conftest import PYTHON

    code = (
        "import sys, stretto.oracle.judge, stretto.oracle.oracle, stretto.oracle.runners\n"
        "from stretto.oracle.runners import runner_class\n"
        "for scheme in ('ollama', 'claude', 'openai', 'jev', 'simulate'): runner_class(scheme)\n"
        "print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    done = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(done.stdout.split())
    assert "stretto" in loaded
    assert not loaded & {"numpy", "dagster", "duckdb", "polars", "pyarrow", "jsonschema"}


def test_a_deadline_gives_up_on_a_hanging_oracle_but_not_on_the_cache(flow, api, tmp_path) -> None:
    from tests.stretto.oracle.apiserver import HANG

    api.script("POST", "/v1/systemone", HANG)
    api.route("POST", "/v1/systemone", systemone)
    judged = judge(flow, api, tmp_path, timeout=5.0, retries=0)
    hung = judged(
        site="get_user",
        prev="get_user",
        lookups=["get_order", "get_user"],
        habit=HABIT,
        conversation=conversation(),
        within=0.2,
    )
    assert hung.reason == "the System-One model failed: jev://jev-latest: no answer within 200 ms"
    assert api.answered == [] and hung.key is not None  # given up on, not answered
    assert judged.asked == 1  # the next decision has the next index
    api.release.set()  # the hung request ends; ask the same question again, answered this time
    answered = decide_at(judged, index=0, within=5.0)
    assert answered.reason is None and answered.key == hung.key
    spent = decide_at(judged, index=0, within=0.0)  # no time left, but the answer is cached
    assert spent.reason is None and spent.probs == answered.probs
    other = decide_at(judged, index=0, within=0.0, lookups=["get_order"])
    assert other.reason == (
        "the System-One model failed: jev://jev-latest: no time left for questions in this run"
    )


def decide_at(judged, *, index, within, lookups=("get_order", "get_user")):
    return judged(
        site="get_user",
        prev="get_user",
        lookups=list(lookups),
        habit=HABIT,
        conversation=conversation(),
        index=index,
        within=within,
    )
