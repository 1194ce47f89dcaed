"""openai:// against a local server speaking the OpenAI chat-completions API (as OpenAI,
vLLM, llama.cpp's server and LM Studio do), with and without token log-probabilities."""

from __future__ import annotations

import json
import math

import pytest

from stretto.oracle.errors import Malformed, MissingKey, OracleError
from stretto.oracle.oracle import Oracle
from stretto.oracle.runners import open_runner
from stretto.oracle.runners.base import Context, RunnerOptions
from tests.stretto.oracle.conftest import options

ANSWER = {
    "next": "get_order_details",
    "go_on": "yes",
    "tool": "get_order_details",
    "pred_list_pending": "no",
}
CONTENT = json.dumps(ANSWER, separators=(",", ":"))


def token(text, p, *alternatives):
    top = [(text, p), *alternatives]
    return {
        "token": text,
        "logprob": math.log(p),
        "bytes": list(text.encode()),
        "top_logprobs": [
            {"token": t, "logprob": math.log(q), "bytes": list(t.encode())} for t, q in top
        ],
    }


def tokens():
    """CONTENT as a tokenizer might cut it, with alternatives where the answers begin."""
    sure = 0.999
    return [
        token('{"', sure),
        token("next", sure),
        token('":"', sure),
        token("get", 0.7, ("respond", 0.2), ("res", 0.05), ("cancel", 0.05)),
        token("_order", 0.9, ("_user", 0.1)),
        token("_details", sure),
        token('","', sure),
        token("go", sure),
        token("_on", sure),
        token('":', sure),
        token('"yes', 0.7, ('"no', 0.3)),
        token('","', sure),
        token("tool", sure),
        token('":"', sure),
        token("get", sure),
        token("_order", 0.6, ("_user", 0.4)),
        token("_details", sure),
        token('","', sure),
        token("pred", sure),
        token("_list", sure),
        token("_pending", sure),
        token('":"', sure),
        token('no"}', 0.9, ('yes"}', 0.1)),
    ]


def completion(content=CONTENT, logprobs=True, finish="stop", refusal=None):
    if logprobs:
        assert "".join(t["token"] for t in tokens()) == content
    return {
        "id": "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT",
        "object": "chat.completion",
        "created": 1790000000,
        "model": "gpt-4o-mini-2024-07-18",
        "system_fingerprint": "fp_44709d6fcb",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content, "refusal": refusal},
                "logprobs": {"content": tokens(), "refusal": None} if logprobs else None,
                "finish_reason": finish,
            }
        ],
        "usage": {"prompt_tokens": 640, "completion_tokens": 23, "total_tokens": 663},
    }


@pytest.fixture
def openai(api):
    api.route("POST", "/chat/completions", lambda seen: (200, {}, completion()))
    api.route(
        "GET",
        "/models",
        lambda seen: (
            200,
            {},
            {
                "object": "list",
                "data": [
                    {
                        "id": "gpt-4o-mini",
                        "object": "model",
                        "created": 1721172741,
                        "owned_by": "system",
                    }
                ],
            },
        ),
    )
    return api


def runner(api, sleeps, env=None):
    return open_runner("openai://gpt-4o-mini", options(api, sleeps, env=env))


def test_probabilities_come_from_the_token_log_probabilities(
    openai, sleeps, request_at_site
) -> None:
    reply = runner(openai, sleeps, {"OPENAI_API_KEY": "sk-test"}).ask(request_at_site, Context())
    [sent] = openai.requests_to("/chat/completions")
    assert sent.headers["authorization"] == "Bearer sk-test"
    assert sent.body["logprobs"] is True and sent.body["top_logprobs"] == 20
    assert sent.body["temperature"] == 0
    fmt = sent.body["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["strict"] is True
    assert fmt["json_schema"]["schema"]["properties"]["next"] == {
        "type": "string",
        "enum": ["get_order_details", "get_user_details", "respond"],
    }
    # `get` (0.7) begins both get_ lookups; `respond` and `res` (0.25) begin respond; `cancel`
    # begins no option
    assert reply.answers["next"] == pytest.approx(
        {"get_order_details": 0.35 / 0.95, "get_user_details": 0.35 / 0.95, "respond": 0.25 / 0.95}
    )
    assert reply.answers["go_on"] == pytest.approx({"no": 0.3, "yes": 0.7})
    assert reply.answers["tool"] == pytest.approx(
        {"get_order_details": 0.5, "get_user_details": 0.5}
    )
    assert reply.answers["pred_list_pending"] == pytest.approx({"no": 0.9, "yes": 0.1})
    assert reply.model_version == "gpt-4o-mini-2024-07-18 (fp_44709d6fcb)"
    assert (reply.input_tokens, reply.output_tokens) == (640, 23)
    assert reply.notes == []


def test_without_log_probabilities_the_pick_gets_one(openai, sleeps, request_at_site) -> None:
    openai.script("POST", "/chat/completions", (200, {}, completion(logprobs=False)))
    asked = Oracle(runner(openai, sleeps)).ask(request_at_site)
    assert asked.answers["next"] == {
        "get_order_details": 1.0,
        "get_user_details": 0.0,
        "respond": 0.0,
    }
    assert asked.record["notes"] == ["no token probabilities: the picked options get 1"]
    assert "authorization" not in openai.seen[0].headers  # a local server without a key


def test_openais_own_server_needs_a_key(sleeps, request_at_site) -> None:
    hosted = open_runner("openai://gpt-4o-mini", RunnerOptions(env={}))
    with pytest.raises(MissingKey, match="openai://gpt-4o-mini: no API key; set OPENAI_API_KEY"):
        hosted.ask(request_at_site, Context())
    assert hosted.price() == (2.5, 10.0)


@pytest.mark.parametrize(
    "response, problem",
    [
        (completion(refusal="I can't help with that."), "the model refused: I can't help"),
        (completion(finish="length"), "cut at its length limit"),
        (
            completion(content='{"next":"cancel_order"}', logprobs=False),
            '"cancel_order" is not one of the options',
        ),
        (completion(content="next: respond", logprobs=False), "the answer is not JSON"),
        ({"object": "chat.completion", "choices": []}, "the answer has no choices"),
    ],
)
def test_malformed_answers_are_refused(openai, sleeps, request_at_site, response, problem) -> None:
    openai.script("POST", "/chat/completions", (200, {}, response))
    with pytest.raises(Malformed, match=problem):
        runner(openai, sleeps).ask(request_at_site, Context())


def test_check_lists_the_model(openai, sleeps) -> None:
    assert runner(openai, sleeps).check().endswith("lists gpt-4o-mini")
    other = open_runner("openai://llama-3-70b", options(openai, sleeps))
    with pytest.raises(OracleError, match="does not list the model llama-3-70b"):
        other.check()
