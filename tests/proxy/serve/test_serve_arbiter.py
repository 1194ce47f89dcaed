"""Serving an arbiter: a flow learned with `stretto learn --oracle openai://…` from sessions
recorded over the demo MCP server, the model a local server speaking the OpenAI
chat-completions API; then stretto-proxy serving it over the same server — answering, hanging,
answering garbage, down — and twice from the same cache, decision for decision the same."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stretto.cli.main import main
from stretto.stdio_client import StdioClient
from tests.conftest import demo_server, free_port, proxy
from tests.stretto.oracle.apiserver import HANG, ApiServer, look_up_first, openai_chat

# learns an arbiter from a model server, serves it end to end
pytestmark = pytest.mark.slow

MODEL = "openai://demo-model"
APPENDIX = "--- Also looked up automatically (current results; no need to repeat these calls) ---"


def record_sessions(logs: Path, n: int = 8) -> None:
    """n sessions: look a key up, look up the value it points to, then change it."""
    for i in range(n):
        with StdioClient(
            proxy("--record", str(logs), "--domain", "demo", server=demo_server())
        ) as agent:
            agent.initialize()
            agent.list_tools()
            agent.call_tool("lookup", {"key": f"k{i}"})
            agent.call_tool("lookup", {"key": f"value-of-k{i}"})
            agent.call_tool("update", {"key": f"value-of-k{i}", "value": "done"})
            agent.close()


@pytest.fixture(scope="module")
def api():
    with ApiServer() as server:
        server.route("POST", "/chat/completions", openai_chat(look_up_first))
        yield server


@pytest.fixture(scope="module")
def learned(api, tmp_path_factory) -> tuple[Path, Path, str]:
    base = tmp_path_factory.mktemp("arbiter")
    logs, flow, cache = base / "logs", base / "demo.flow.json", base / "cache"
    record_sessions(logs)
    status = main(
        [
            "learn",
            "--sessions",
            str(logs),
            "--domain",
            "demo",
            "--oracle",
            MODEL,
            "--oracle-base-url",
            api.url,
            "--oracle-cache",
            str(cache),
            "--out",
            str(flow),
            "--home",
            str(base / "home"),
        ]
    )
    assert status == 0
    return flow, cache, api.url


def test_learn_asks_the_openai_compatible_server_and_writes_the_arbiter(learned, api) -> None:
    flow_path, cache, _ = learned
    flow = json.loads(flow_path.read_text())
    arbiter = flow["arbiter"]
    assert arbiter["model"] == MODEL and arbiter["tasks"] == 2  # 30% of 8 sessions, rounded
    assert flow["provenance"]["habit_episodes"] == 6
    asked = api.requests_to("/chat/completions")
    # two decisions per held-out session: after each lookup (the site offers lookup again)
    assert len(asked) == arbiter["cases"] == 4
    body = asked[0].body
    assert body["model"] == "demo-model" and body["response_format"]["type"] == "json_schema"
    schema = body["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["next"]["enum"] == ["lookup", "respond"]
    assert len(list(cache.rglob("*.json"))) == 4  # every answer cached


def serve(flow: Path, logs: Path, *options: str, key: str = "z"):
    """One session over the demo server: the agent looks `key` up. Its answer, the flow log."""
    command = proxy(
        "--record",
        str(logs),
        "--domain",
        "demo",
        "--flow",
        str(flow),
        "--flow-per-call",
        "1",
        *options,
        server=demo_server(),
    )
    with StdioClient(command) as agent:
        agent.initialize()
        agent.list_tools()
        answer = agent.call_tool("lookup", {"key": key})
        agent.close()
    (flow_log,) = logs.glob("*.flow.jsonl")
    return answer, [json.loads(line) for line in flow_log.read_text().splitlines()]


def test_the_proxy_asks_the_model_and_makes_the_lookup(learned, tmp_path) -> None:
    flow, cache, url = learned
    answer, flow_log = serve(
        flow, tmp_path / "logs", "--oracle-base-url", url, "--oracle-cache", str(cache)
    )
    appended = answer["result"]["content"][-1]["text"]
    assert appended.startswith(APPENDIX)
    assert 'lookup {"key":"value-of-z"}:' in appended
    decision = flow_log[0]
    assert decision["decider"] == "arbiter" and decision["action"] == "lookup"
    assert decision["oracle"] == {"lookup": 1.0, "respond": 0.0}
    assert len(decision["key"]) == 64 and (cache / decision["key"][:2]).is_dir()
    assert sum(decision["probs"].values()) <= 1.0 + 1e-9


@pytest.mark.parametrize(
    "trouble, reason",
    [
        ("hang", "the System-One model failed: openai://demo-model: no answer within 300 ms"),
        ("garbage", "the System-One model failed: openai://demo-model: the answer is not JSON"),
        ("down", "the System-One model failed: openai://demo-model: cannot reach"),
    ],
)
def test_a_troubled_oracle_never_holds_the_agents_answer(
    learned, tmp_path, trouble, reason
) -> None:
    flow, _, _ = learned
    with ApiServer() as model:
        model.script(
            "POST", "/chat/completions", HANG if trouble == "hang" else (200, {}, "<html>")
        )
        url = model.url if trouble != "down" else f"http://127.0.0.1:{free_port()}"
        answer, flow_log = serve(
            flow,
            tmp_path / "logs",
            "--oracle-base-url",
            url,
            "--oracle-cache",
            str(tmp_path / "cache"),
            "--oracle-timeout",
            "300",
        )
        if trouble == "hang":  # the agent has its answer; the model has still not answered
            assert model.answered == [] and len(model.requests_to("/chat/completions")) == 1
    assert answer["result"]["content"][-1]["text"] != APPENDIX  # the server's answer as is
    assert not any(APPENDIX in c["text"] for c in answer["result"]["content"])
    (decision,) = [line for line in flow_log if "action" in line]
    assert decision["action"] == "hand_back" and decision["reason"].startswith(reason)
    assert decision["key"] is not None and decision["oracle"] == {}


def test_served_decisions_are_the_same_from_the_same_cache(learned, tmp_path) -> None:
    """Served live into a cache, then from that cache alone (`--oracle replay`): the same
    decisions, byte for byte (the run lines' `ms` aside)."""
    flow, _, url = learned
    cache = str(tmp_path / "cache")

    def decisions(name: str, *oracle: str) -> str:
        _, flow_log = serve(flow, tmp_path / name, *oracle, "--oracle-cache", cache, key="q")
        return json.dumps([{k: v for k, v in line.items() if k != "ms"} for line in flow_log])

    live = decisions("live", "--oracle-base-url", url)
    assert decisions("replayed", "--oracle", "replay") == live
    assert '"action": "lookup"' in live and '"key": "' in live


def test_a_flow_without_an_arbiter_is_refused_for_the_arbiter_decider(learned, tmp_path) -> None:
    import subprocess

    flow, _, _ = learned
    plain = json.loads(flow.read_text())
    del plain["arbiter"]
    path = tmp_path / "plain.flow.json"
    path.write_text(json.dumps(plain))
    done = subprocess.run(
        proxy(
            "--record",
            str(tmp_path / "logs"),
            "--flow",
            str(path),
            "--flow-decider",
            "arbiter",
            server=["cat"],
        ),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    assert "--flow-decider arbiter: this flow has no arbiter" in done.stderr
    assert not (tmp_path / "logs").exists()


def test_exploring_arbiter_logs_are_evaluated_with_the_arbiter_target(
    learned, tmp_path, capsys
) -> None:
    """Sessions served exploring (shadow: nothing looked up) log the arbiter's probabilities:
    `stretto evaluate` takes the arbiter as a target there, and refuses reach."""
    flow, cache, url = learned
    logs = tmp_path / "explored"
    for key in ("a", "b", "c"):
        command = proxy(
            "--record",
            str(logs),
            "--domain",
            "demo",
            "--flow",
            str(flow),
            "--flow-shadow",
            "--flow-explore",
            "0.5",
            "--oracle-base-url",
            url,
            "--oracle-cache",
            str(cache),
            server=demo_server(),
        )
        with StdioClient(command) as agent:
            agent.initialize()
            agent.list_tools()
            agent.call_tool("lookup", {"key": key})
            agent.call_tool("lookup", {"key": f"value-of-{key}"})  # what the flow would do
            agent.close()
    flow_logs = sorted(logs.glob("*.flow.jsonl"))
    lines = [json.loads(line) for f in flow_logs for line in f.read_text().splitlines()]
    decisions = [line for line in lines if "address" in line]
    assert decisions and all(d["decider"] == "arbiter" and d["explore"] for d in decisions)
    argv = ["evaluate", "--sessions", str(logs), "--flow", str(flow), "--bootstrap", "0"]
    argv += ["--min-ess", "0", "--json", "--out", str(tmp_path / "report")]
    assert main([*argv, "--decider", "arbiter", "--decider", "habit"]) == 0
    results = json.loads(capsys.readouterr().out)
    assert [r["target"]["name"] for r in results] == ["arbiter@0.3", "habit@0.3"]
    assert {r["settings"]["logging_decider"] for r in results} == {"arbiter"}
    assert results[0]["total"]["decisions"] == len(decisions)
    assert main([*argv, "--decider", "reach"]) == 1
    assert "the logs were made with the arbiter decider" in capsys.readouterr().err
