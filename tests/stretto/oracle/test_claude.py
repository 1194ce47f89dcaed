"""claude:// against a local server speaking Anthropic's Messages API."""

from __future__ import annotations

import pytest

from stretto.oracle.errors import HttpError, Malformed, MissingKey, RateLimited
from stretto.oracle.oracle import Oracle
from stretto.oracle.runners import open_runner
from stretto.oracle.runners.base import Context
from tests.stretto.oracle.conftest import options

KEY = "sk-ant-test-0123456789abcdef"
MODEL = "claude-haiku-4-5"


def error(kind, message):
    return {"type": "error", "error": {"type": kind, "message": message}}


def message(content, stop_reason="tool_use"):
    return {
        "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
        "type": "message",
        "role": "assistant",
        "model": "claude-haiku-4-5-20251001",
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": 812, "output_tokens": 95},
    }


def messages(seen):
    if seen.headers.get("x-api-key") != KEY:
        return 401, {}, error("authentication_error", "invalid x-api-key")
    if seen.headers.get("anthropic-version") != "2023-06-01":
        return 400, {}, error("invalid_request_error", "anthropic-version header is required")
    [tool] = seen.body["tools"]
    stated = {
        qid: {o: 0.2 for o in q["properties"]}
        for qid, q in tool["input_schema"]["properties"].items()
    }
    stated["next"]["respond"] = 0.4  # stated 2:1:1, summing to 0.8 -> normalized
    return (
        200,
        {},
        message(
            [
                {"type": "text", "text": "Answering."},
                {
                    "type": "tool_use",
                    "id": "toolu_01A09q90qw90lq917835lq9",
                    "name": tool["name"],
                    "input": stated,
                },
            ]
        ),
    )


@pytest.fixture
def claude(api):
    api.route("POST", "/v1/messages", messages)
    api.route(
        "GET",
        f"/v1/models/{MODEL}",
        lambda seen: (
            200,
            {},
            {
                "type": "model",
                "id": "claude-haiku-4-5-20251001",
                "display_name": "Claude Haiku 4.5",
                "created_at": "2025-10-01T00:00:00Z",
            },
        ),
    )
    return api


def runner(api, sleeps, key=KEY, **http):
    return open_runner(
        f"claude://{MODEL}", options(api, sleeps, env={"ANTHROPIC_API_KEY": key}, **http)
    )


def test_the_answer_is_forced_through_a_tool(claude, sleeps, request_at_site) -> None:
    reply = runner(claude, sleeps).ask(request_at_site, Context())
    [sent] = claude.requests_to("/v1/messages")
    assert sent.body["model"] == MODEL and sent.body["temperature"] == 0
    assert sent.body["tool_choice"] == {"type": "tool", "name": "answer"}
    schema = sent.body["tools"][0]["input_schema"]
    assert schema["required"] == ["next", "go_on", "tool", "pred_list_pending"]
    assert schema["properties"]["go_on"]["required"] == ["no", "yes"]
    assert sent.body["messages"][0]["role"] == "user" and isinstance(sent.body["system"], str)
    assert reply.answers["next"] == pytest.approx(
        {"get_order_details": 0.25, "get_user_details": 0.25, "respond": 0.5}
    )
    assert reply.answers["go_on"] == {"no": 0.5, "yes": 0.5}
    assert reply.model_version == "claude-haiku-4-5-20251001"
    assert (reply.input_tokens, reply.output_tokens) == (812, 95)


def test_rate_limits_and_overload_are_waited_out(claude, sleeps, request_at_site) -> None:
    claude.script(
        "POST",
        "/v1/messages",
        (
            429,
            {"retry-after": "4"},
            error("rate_limit_error", "Number of requests has exceeded your rate limit"),
        ),
        (529, {}, error("overloaded_error", "Overloaded")),
    )
    reply = runner(claude, sleeps).ask(request_at_site, Context())
    assert reply.answers["next"]["respond"] == 0.5
    assert sleeps == [4.0, 1.0]


def test_rate_limited_for_good(claude, sleeps, request_at_site) -> None:
    claude.script(
        "POST",
        "/v1/messages",
        *[(429, {"retry-after": "1"}, error("rate_limit_error", "slow down"))] * 2,
    )
    with pytest.raises(
        RateLimited,
        match=r"claude://claude-haiku-4-5: .* answered 429 "
        r"\(slow down\) 2 times",
    ):
        runner(claude, sleeps, retries=1).ask(request_at_site, Context())


def test_no_key(claude, sleeps, request_at_site) -> None:
    with pytest.raises(
        MissingKey, match="claude://claude-haiku-4-5: no API key; set ANTHROPIC_API_KEY"
    ):
        runner(claude, sleeps, key="").ask(request_at_site, Context())
    assert claude.seen == []


def test_a_wrong_key_is_reported_and_never_printed(
    claude, sleeps, request_at_site, tmp_path
) -> None:
    log = tmp_path / "answers.jsonl"
    oracle = Oracle(runner(claude, sleeps, key="sk-ant-wrong-secret"), log=log)
    with pytest.raises(HttpError, match="answered 401: invalid x-api-key") as caught:
        oracle.ask(request_at_site)
    assert "sk-ant-wrong-secret" not in str(caught.value)
    assert "sk-ant-wrong-secret" not in log.read_text()
    assert '"error": "claude://claude-haiku-4-5:' in log.read_text()


@pytest.mark.parametrize(
    "content, stop, problem",
    [
        (
            [{"type": "text", "text": "The agent will probably respond."}],
            "end_turn",
            "does not use the `answer` tool",
        ),
        (
            [
                {
                    "type": "tool_use",
                    "id": "t",
                    "name": "answer",
                    "input": {"next": {"respond": "high"}},
                }
            ],
            "tool_use",
            'next.respond: expected a probability, got "high"',
        ),
        (
            [{"type": "tool_use", "id": "t", "name": "answer", "input": {}}],
            "max_tokens",
            "cut at max_tokens",
        ),
    ],
)
def test_malformed_answers_are_refused(
    claude, sleeps, request_at_site, content, stop, problem
) -> None:
    claude.script("POST", "/v1/messages", (200, {}, message(content, stop)))
    with pytest.raises(Malformed, match=problem):
        runner(claude, sleeps).ask(request_at_site, Context())


def test_check_and_price(claude, sleeps) -> None:
    assert runner(claude, sleeps).check().endswith("model claude-haiku-4-5-20251001 present")
    assert runner(claude, sleeps).price() == (1.0, 5.0)
    assert open_runner("claude://claude-opus-4-1").price() == (15.0, 75.0)
