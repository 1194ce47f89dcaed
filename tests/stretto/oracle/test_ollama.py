"""ollama:// against a local server speaking Ollama's API: /api/show, /api/tags,
/v1/systemone for decision models, /api/chat for chat models."""

from __future__ import annotations

import json

import pytest

from stretto.oracle.errors import ContextTooLong, Malformed, OracleError
from stretto.oracle.oracle import Oracle
from stretto.oracle.questions import site_request
from stretto.oracle.runners import open_runner
from stretto.oracle.runners.base import Context
from stretto.oracle.runners.ollama import context_size, host_url
from tests.stretto.oracle.conftest import DOCS, conversation, options

DIGEST = "sha256:" + "5" * 64


def show(capabilities, context_length):
    def route(seen):
        if seen.body.get("model") not in ("d1-omni:600m", "qwen3:8b"):
            return 404, {}, {"error": f"model '{seen.body.get('model')}' not found"}
        return (
            200,
            {},
            {
                "modelfile": "FROM /models/blob",
                "parameters": "temperature 0.7",
                "template": "{{ .Prompt }}",
                "details": {
                    "format": "gguf",
                    "family": "qwen3",
                    "parameter_size": "8.2B",
                    "quantization_level": "Q4_K_M",
                },
                "model_info": {
                    "general.architecture": "qwen3",
                    "qwen3.context_length": context_length,
                    "qwen3.embedding_length": 4096,
                },
                "capabilities": capabilities,
                "modified_at": "2026-09-01T10:00:00Z",
            },
        )

    return route


def tags(seen):
    return (
        200,
        {},
        {
            "models": [
                {"name": "qwen3:8b", "model": "qwen3:8b", "digest": DIGEST, "size": 5225388164},
                {
                    "name": "d1-omni:600m",
                    "model": "d1-omni:600m",
                    "digest": DIGEST,
                    "size": 402000000,
                },
            ]
        },
    )


def ranked(names):
    """A deterministic answer: the n-th option weighs n."""
    total = sum(range(1, len(names) + 1))
    return {name: (i + 1) / total for i, name in enumerate(names)}


def systemone(seen):
    answers = {}
    for qid, question in seen.body["questions"].items():
        if question["type"] != "choice":
            return 422, {}, {"error": "this model answers choice questions only"}
        probs = ranked(sorted(question["criteria"]))
        best = max(probs, key=probs.get)
        answers[qid] = {
            "type": "choice",
            "choice": best,
            "confidence": probs[best],
            "probabilities": probs,
        }
    return (
        200,
        {},
        {
            "model": seen.body["model"],
            "answers": answers,
            "usage": {"input_tokens": 412, "output_tokens": 4},
        },
    )


def chat_answer(content, prompt_tokens=900, output_tokens=60, done_reason="stop"):
    return {
        "model": "qwen3:8b",
        "created_at": "2026-09-01T10:00:01Z",
        "message": {"role": "assistant", "content": content},
        "done": True,
        "done_reason": done_reason,
        "total_duration": 1_200_000_000,
        "prompt_eval_count": prompt_tokens,
        "eval_count": output_tokens,
    }


def chat(seen):
    schema = seen.body["format"]
    stated = {
        qid: {o: 0.1 * (i + 1) for i, o in enumerate(sorted(q["properties"]))}
        for qid, q in schema["properties"].items()
    }
    return 200, {}, chat_answer(json.dumps(stated))


@pytest.fixture
def ollama(api):
    api.route("GET", "/api/tags", tags)
    api.route("POST", "/v1/systemone", systemone)
    api.route("POST", "/api/chat", chat)
    return api


def test_a_decision_model_is_asked_one_choice_question_per_question(
    ollama, sleeps, request_at_site
) -> None:
    ollama.route("POST", "/api/show", show(["decision"], 32768))
    runner = open_runner("ollama://d1-omni:600m", options(ollama, sleeps))
    oracle = Oracle(runner)
    asked = oracle.ask(request_at_site)
    [sent] = ollama.requests_to("/v1/systemone")
    assert sent.body["model"] == "d1-omni:600m"
    assert sent.body["state"] == request_at_site.state
    assert {q["type"] for q in sent.body["questions"].values()} == {"choice"}
    assert sent.body["questions"]["go_on"]["criteria"] == {
        "yes": "It calls one more read-only tool right away.",
        "no": "It replies, asks the customer, or makes a change first.",
    }
    assert asked.answers["go_on"] == {"no": pytest.approx(1 / 3), "yes": pytest.approx(2 / 3)}
    assert asked.answers["next"]["respond"] == pytest.approx(3 / 6)
    assert asked.complete
    assert asked.record["model_version"] == f"d1-omni:600m@{DIGEST}"
    assert asked.record["tokens"]["input"] == 412
    assert asked.record["choice"] == "respond" and asked.record["confidence"] == 0.5
    oracle.ask(request_at_site)
    assert len(ollama.requests_to("/api/show")) == 1  # what the model is, asked once


def test_a_chat_model_is_asked_through_api_chat_with_the_answers_schema(
    ollama, sleeps, request_at_site
) -> None:
    ollama.route("POST", "/api/show", show(["completion", "tools", "thinking"], 40960))
    runner = open_runner("ollama://qwen3:8b", options(ollama, sleeps))
    reply = runner.ask(request_at_site, Context())
    [sent] = ollama.requests_to("/api/chat")
    assert sent.body["think"] is False and sent.body["stream"] is False
    assert sent.body["options"] == {"num_ctx": 8192, "temperature": 0, "seed": 0}
    next_schema = sent.body["format"]["properties"]["next"]
    assert next_schema["required"] == ["get_order_details", "get_user_details", "respond"]
    assert next_schema["additionalProperties"] is False
    assert [m["role"] for m in sent.body["messages"]] == ["system", "user"]
    assert (
        '"customer_request": "Hi, my email is ann@example.com'
        in sent.body["messages"][1]["content"]
    )
    # stated 0.1, 0.2, 0.3: normalized
    assert reply.answers["next"] == pytest.approx(
        {"get_order_details": 1 / 6, "get_user_details": 2 / 6, "respond": 3 / 6}
    )
    assert (reply.input_tokens, reply.output_tokens) == (900, 60)


def big_request(chars: int):
    state = conversation().slice()
    state["customer_request"] = "x" * chars  # (a real slice is clipped; this tests the sizing)
    return site_request(state, ["get_order_details"], DOCS)


def test_num_ctx_grows_in_powers_of_two_to_fit_the_request(ollama, sleeps) -> None:
    ollama.route("POST", "/api/show", show(["completion"], 131072))
    runner = open_runner("ollama://qwen3:8b", options(ollama, sleeps))
    runner.ask(big_request(60_000), Context())
    assert ollama.requests_to("/api/chat")[0].body["options"]["num_ctx"] == 32768


def test_a_request_past_the_models_context_is_refused_before_asking(ollama, sleeps) -> None:
    ollama.route("POST", "/api/show", show(["completion"], 16384))
    runner = open_runner("ollama://qwen3:8b", options(ollama, sleeps))
    with pytest.raises(
        ContextTooLong,
        match=r"ollama://qwen3:8b: the request needs about \d+ "
        r"tokens, more than the model's context of 16384",
    ):
        runner.ask(big_request(60_000), Context())
    assert ollama.requests_to("/api/chat") == []


def test_num_ctx_never_passes_the_models_context() -> None:
    assert context_size(1500, 4096) == 4096
    assert context_size(1500, 40960) == 8192
    assert context_size(9000, 40960) == 16384
    assert context_size(33000, 40960) == 40960
    with pytest.raises(ContextTooLong):
        context_size(50000, 40960)


def test_an_answer_that_filled_the_context_is_refused(ollama, sleeps, request_at_site) -> None:
    ollama.route("POST", "/api/show", show(["completion"], 40960))
    ollama.script("POST", "/api/chat", (200, {}, chat_answer("{}", prompt_tokens=8192)))
    runner = open_runner("ollama://qwen3:8b", options(ollama, sleeps))
    with pytest.raises(ContextTooLong, match="filled the context of 8192 tokens"):
        runner.ask(request_at_site, Context())


def test_a_model_the_server_does_not_have(ollama, sleeps, request_at_site) -> None:
    ollama.route("POST", "/api/show", show(["completion"], 40960))
    runner = open_runner("ollama://llama9:1t", options(ollama, sleeps))
    with pytest.raises(OracleError, match=r"has no model llama9:1t \(ollama pull llama9:1t\)"):
        runner.ask(request_at_site, Context())
    with pytest.raises(OracleError, match="has no model"):
        runner.check()


def test_a_model_that_neither_decides_nor_chats(ollama, sleeps, request_at_site) -> None:
    ollama.route("POST", "/api/show", show(["embedding"], 8192))
    runner = open_runner("ollama://qwen3:8b", options(ollama, sleeps))
    with pytest.raises(
        OracleError,
        match=r"neither a decision nor a chat model \(capabilities: "
        r"embedding\)",
    ):
        runner.ask(request_at_site, Context())


def test_a_failed_digest_lookup_is_noted_and_the_answer_stands(
    ollama, sleeps, request_at_site
) -> None:
    ollama.route("POST", "/api/show", show(["decision"], 32768))
    ollama.script("GET", "/api/tags", (500, {}, {"error": "internal"}), (500, {}, {"error": "x"}))
    runner = open_runner("ollama://d1-omni:600m", options(ollama, sleeps, retries=1))
    asked = Oracle(runner).ask(request_at_site)
    assert asked.complete and asked.record["model_version"] is None
    [note] = asked.record["notes"]
    assert note.startswith("the model's digest could not be looked up: ollama://d1-omni:600m:")


@pytest.mark.parametrize(
    "content, message",
    [
        ("I think the agent will look up the order.", "the answer is not JSON"),
        (
            '{"next": {"respond": 1.7, "get_order_details": 0, "get_user_details": 0}}',
            "next.respond: 1.7 is not a probability",
        ),
        ('{"next": {"cancel_order": 1}}', "`cancel_order` is not one of the options offered"),
        (
            '{"next": {"respond": 0, "get_order_details": 0, "get_user_details": 0}}',
            "every option has probability 0",
        ),
        ('["respond"]', "not a JSON object"),
    ],
)
def test_malformed_chat_answers_are_refused(
    ollama, sleeps, request_at_site, content, message
) -> None:
    ollama.route("POST", "/api/show", show(["completion"], 40960))
    ollama.script("POST", "/api/chat", (200, {}, chat_answer(content)))
    runner = open_runner("ollama://qwen3:8b", options(ollama, sleeps))
    with pytest.raises(Malformed, match=message):
        runner.ask(request_at_site, Context())


def test_a_cut_answer_is_refused(ollama, sleeps, request_at_site) -> None:
    ollama.route("POST", "/api/show", show(["completion"], 40960))
    ollama.script("POST", "/api/chat", (200, {}, chat_answer('{"next": {', done_reason="length")))
    runner = open_runner("ollama://qwen3:8b", options(ollama, sleeps))
    with pytest.raises(Malformed, match="cut at its length limit"):
        runner.ask(request_at_site, Context())


def test_a_decision_model_answering_the_wrong_type_is_refused(
    ollama, sleeps, request_at_site
) -> None:
    ollama.route("POST", "/api/show", show(["decision"], 32768))
    ollama.script(
        "POST",
        "/v1/systemone",
        (
            200,
            {},
            {
                "model": "d1",
                "answers": {"next": {"type": "score", "score": 2.0, "probabilities": {}}},
            },
        ),
    )
    runner = open_runner("ollama://d1-omni:600m", options(ollama, sleeps))
    with pytest.raises(Malformed, match="answers.next: expected a choice answer, got type 'score'"):
        runner.ask(request_at_site, Context())


def test_the_host_comes_from_ollama_host(ollama, sleeps, request_at_site) -> None:
    ollama.route("POST", "/api/show", show(["decision"], 32768))
    opts = options(ollama, sleeps, env={"OLLAMA_HOST": ollama.url.removeprefix("http://")})
    opts.base_url = None
    runner = open_runner("ollama://d1-omni:600m", opts)
    assert runner.check().endswith("has d1-omni:600m (decision model, context 32768)")
    assert host_url("0.0.0.0") == "http://127.0.0.1:11434"
    assert host_url("https://ollama.example.com") == "https://ollama.example.com:443"
