"""τ²-bench results as session logs: `stretto import-tau2`, `stretto compile`, and the in-memory
path the replays use, on real results files (tests/data/tau2/, the large ones gzip-compressed).

Expectations are counted here from the results files themselves (or written down after
reading them by hand), never from stretto.logs.tau2."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from stretto.logs.episode import Assistant, ToolResult, User, read_episode
from stretto.logs.merged import read_episodes
from stretto.logs.sessionlog import LogError, read_session_log
from stretto.logs.tau2 import episodes_from_results
from stretto.logs.tau2_inputs import read_split
from stretto.model.flow import load_flow
from tests.builders import stretto
from tests.conftest import ORCHESTRA_RETAIL, REFERENCE_HOME, TAU2

TOOLS = TAU2 / "domains" / "tau2_tools.json"
TRACE = TAU2 / "results" / "sierra-tau2_trace"
TRACE_FILES = sorted(TRACE.glob("*.json"))
RETAIL_SPLIT = TAU2 / "domains" / "retail" / "split_tasks.json"
# its 40 tasks are the retail test split's
GPT41_RETAIL = TAU2 / "results/sierra-model_training/gpt-4.1_retail_defautl_gpt-4.1_1trials.json.gz"


def load(path: Path) -> dict:
    data = path.read_bytes()
    return json.loads(gzip.decompress(data) if path.suffix == ".gz" else data)


def agent_turns(messages: list[dict]) -> list[list[str]]:
    """The tool names of each assistant message that made calls of the agent's own."""
    turns = []
    for m in messages:
        if m["role"] == "assistant" and m.get("tool_calls"):
            names = [
                c["name"] for c in m["tool_calls"] if c.get("requestor", "assistant") == "assistant"
            ]
            if names:
                turns.append(names)
    return turns


def wire(log_path: Path) -> list[dict]:
    """The log's lines after the header, as JSON."""
    return [json.loads(line) for line in log_path.read_text().splitlines()[1:]]


@pytest.fixture(scope="module")
def imported(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tau2") / "logs"
    done = stretto("import-tau2", *map(str, TRACE_FILES), "--tools", str(TOOLS), "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("stretto: imported 4 file(s)"), done.stdout
    # airline 1 call; retail 5; telecom 6 + 8, with 1 + 9 of the customer's own calls left out
    assert "4 episodes, 20 calls" in done.stdout
    assert "telecom: 2 file(s), 2 episodes, 14 calls (10 customer-side calls left out)" in (
        done.stdout
    )
    return out


def log_of(folder: Path, results: Path) -> Path:
    """The one log imported from a one-simulation results file."""
    sim = load(results)["simulations"][0]["id"]
    (found,) = [p for p in folder.glob("*.jsonl") if p.name.endswith(f"-{sim}.jsonl")]
    return found


def test_each_simulation_becomes_one_log_with_its_task_trial_and_reward(imported: Path) -> None:
    assert len(list(imported.glob("*.jsonl"))) == 4
    for results in TRACE_FILES:
        data = load(results)
        (sim,) = data["simulations"]
        log = read_session_log(log_of(imported, results))
        header = log.header
        assert header.version == 2
        assert header.domain == data["info"]["environment_info"]["domain_name"]
        assert header.agent_model == data["info"]["agent_info"]["llm"] == "gpt-4.1-mini"
        assert header.session.startswith(f"tau2-{header.domain}-")
        assert header.extra["task_id"] == sim["task_id"]
        assert header.extra["trial"] == 0  # these files say `"trial": null`
        assert header.extra["reward"] == sim["reward_info"]["reward"]
        episode = read_episode(log.path)
        assert (episode.task_id, episode.trial, episode.reward) == (
            sim["task_id"],
            0,
            sim["reward_info"]["reward"],
        )
    adversarial = read_episode(log_of(imported, TRACE / "e2e_telecom_adversarial.json"))
    assert adversarial.reward == 0.0 and not adversarial.succeeded


def test_calls_are_grouped_into_the_turns_of_the_assistant_messages(imported: Path) -> None:
    for results in TRACE_FILES:
        messages = load(results)["simulations"][0]["messages"]
        episode = read_episode(log_of(imported, results))
        turns = [[c.name for c in e.calls] for e in episode.events if isinstance(e, Assistant)]
        assert [t for t in turns if t] == agent_turns(messages)
    # by hand: calls and LLM turns with calls per file
    counted = {}
    for results in TRACE_FILES:
        episode = read_episode(log_of(imported, results))
        tool_turns = [e for e in episode.events if isinstance(e, Assistant) and e.calls]
        counted[results.stem] = (len(episode.calls()), len(tool_turns))
    assert counted == {
        "e2e_airline_baseline": (1, 1),
        "e2e_retail_baseline": (5, 5),
        "e2e_telecom_adversarial": (6, 6),
        "e2e_telecom_baseline": (8, 7),
    }


def test_parallel_calls_are_sent_together_before_any_result(imported: Path) -> None:
    # e2e_telecom_baseline: one assistant message calls get_details_by_id for L1002 and D1002
    path = log_of(imported, TRACE / "e2e_telecom_baseline.json")
    episode = read_episode(path)
    (parallel,) = [e for e in episode.events if isinstance(e, Assistant) and len(e.calls) > 1]
    assert [(c.name, c.arguments) for c in parallel.calls] == [
        ("get_details_by_id", {"id": "L1002"}),
        ("get_details_by_id", {"id": "D1002"}),
    ]
    lines = wire(path)
    ids = {c.id for c in parallel.calls}
    sent = [i for i, x in enumerate(lines) if x["message"].get("id") in ids]
    calls, answers = sent[:2], sent[2:]
    assert [lines[i]["from"] for i in sent] == ["client", "client", "server", "server"]
    assert calls == [answers[0] - 2, answers[0] - 1]  # both calls, then both answers
    assert lines[calls[0]]["t_ms"] == lines[calls[1]]["t_ms"]
    times = [x["t_ms"] for x in lines]
    assert times == sorted(times)  # t_ms never decreases


def test_the_greeting_is_dropped_and_the_words_are_context_lines(imported: Path) -> None:
    for results in TRACE_FILES:
        messages = load(results)["simulations"][0]["messages"]
        greeting = messages[0]
        assert greeting["role"] == "assistant" and greeting["cost"] == 0.0
        assert not greeting["tool_calls"]
        said = [
            {"role": m["role"], "content": m["content"]}
            for m in messages[1:]
            if m["role"] in ("user", "assistant")
            and m.get("content")
            and not (m["role"] == "assistant" and m.get("tool_calls"))
        ]
        lines = wire(log_of(imported, results))
        context = [x["message"] for x in lines if x["from"] == "context"]
        assert context == said
        assert greeting["content"] not in [c["content"] for c in context]
    # The one assistant message that speaks and calls (adversarial) is one turn, not a reply
    # and a turn: its words go with its call.
    messages = load(TRACE / "e2e_telecom_adversarial.json")["simulations"][0]["messages"]
    (both,) = [m for m in messages if m["role"] == "assistant" and m["content"] and m["tool_calls"]]
    lines = wire(log_of(imported, TRACE / "e2e_telecom_adversarial.json"))
    (call,) = [
        x
        for x in lines
        if x["from"] == "client" and x["message"].get("id") == both["tool_calls"][0]["id"]
    ]
    assert call["message"]["params"]["_meta"] == {"tau2/content": both["content"]}


def test_the_customers_own_tool_calls_are_left_out(imported: Path) -> None:
    messages = load(TRACE / "e2e_telecom_baseline.json")["simulations"][0]["messages"]
    user_calls = [c for m in messages for c in (m.get("tool_calls") or []) if m["role"] == "user"]
    assert len(user_calls) == 9 and all(c["requestor"] == "user" for c in user_calls)
    user_ids = {c["id"] for c in user_calls}
    user_results = [m["content"] for m in messages if m["role"] == "tool" and m["id"] in user_ids]
    assert len(user_results) == 9
    text = log_of(imported, TRACE / "e2e_telecom_baseline.json").read_text()
    lines = wire(log_of(imported, TRACE / "e2e_telecom_baseline.json"))
    assert not user_ids & {x["message"].get("id") for x in lines}
    assert "check_status_bar" not in text and "run_speed_test" not in text
    answers = [x["message"]["result"] for x in lines if x["from"] == "server"]
    texts = [a["content"][0]["text"] for a in answers if "content" in a]
    assert len(texts) == 8 and not set(texts) & set(user_results)
    episode = read_episode(log_of(imported, TRACE / "e2e_telecom_baseline.json"))
    assert len(episode.calls()) == 8
    # words of a customer message that also ran a phone tool are kept
    spoken = [m["content"] for m in messages if m["role"] == "user" and m["content"]]
    assert [e.text for e in episode.events if isinstance(e, User)] == spoken


def test_results_are_matched_to_their_calls_by_id(imported: Path) -> None:
    for results in TRACE_FILES:
        messages = load(results)["simulations"][0]["messages"]
        agent_ids = {
            c["id"]
            for m in messages
            if m["role"] == "assistant"
            for c in (m.get("tool_calls") or [])
            if c.get("requestor", "assistant") == "assistant"
        }
        expected = {m["id"]: m["content"] for m in messages if m["role"] == "tool"}
        episode = read_episode(log_of(imported, results))
        got = {r.call_id: r.content for r in episode.events if isinstance(r, ToolResult)}
        assert got == {i: expected[i] for i in agent_ids}
        names = {c.id: c.name for c in episode.calls()}
        assert all(r.name == names[r.call_id] for r in episode.events if isinstance(r, ToolResult))


def test_error_results_are_flagged() -> None:
    data = load(GPT41_RETAIL)
    episodes = episodes_from_results([GPT41_RETAIL], TOOLS)
    assert len(episodes) == len(data["simulations"]) == 40
    for sim, episode in zip(data["simulations"], episodes, strict=True):
        failed = {m["id"] for m in sim["messages"] if m["role"] == "tool" and m["error"]}
        flagged = {r.call_id for r in episode.events if isinstance(r, ToolResult) and r.error}
        assert flagged == failed
        assert episode.task_id == sim["task_id"] and episode.reward == sim["reward_info"]["reward"]
    # by hand: simulation 26 (task 62) has three failed calls
    assert sum(isinstance(r, ToolResult) and r.error for r in episodes[26].events) == 3
    assert sum(r.error for e in episodes for r in e.events if isinstance(r, ToolResult)) == 12


def test_the_tool_kinds_come_from_the_tools_file(imported: Path) -> None:
    domains = load(TOOLS)["domains"]
    for results in TRACE_FILES:
        episode = read_episode(log_of(imported, results))
        entries = [t for t in domains[episode.domain]["tools"] if t["requestor"] == "assistant"]
        assert {n: t.kind for n, t in episode.tools.items()} == {
            t["name"]: t["type"] for t in entries
        }
    retail = read_episode(log_of(imported, TRACE / "e2e_retail_baseline.json"))
    assert retail.tools["get_order_details"].contract == "order_id:string!"
    assert retail.tools["exchange_delivered_order_items"].kind == "write"


def test_sessions_reads_the_imported_folder(imported: Path) -> None:
    done = stretto("sessions", str(imported))
    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in done.stdout.splitlines()[1:]]
    assert [r[1:] for r in rows] == [
        # domain, agent model, calls, lookups, turns, user messages; turns are the agent's
        # LLM turns, its replies too: the results' assistant messages but the scripted greeting
        ["airline", "gpt-4.1-mini", "1", "0", "4", "4"],
        ["retail", "gpt-4.1-mini", "5", "0", "11", "7"],
        ["telecom", "gpt-4.1-mini", "8", "0", "18", "14"],
        ["telecom", "gpt-4.1-mini", "6", "0", "14", "9"],
    ]
    assert "4 session(s)" in done.stderr


def test_importing_again_writes_the_same_files(imported: Path, tmp_path: Path) -> None:
    again = tmp_path / "again"
    done = stretto(
        "import-tau2", *map(str, TRACE_FILES), "--tools", str(TOOLS), "--out", str(again)
    )
    assert done.returncode == 0, done.stderr
    first = {p.name: p.read_bytes() for p in imported.glob("*.jsonl")}
    assert {p.name: p.read_bytes() for p in again.glob("*.jsonl")} == first


def test_the_in_memory_path_reads_the_same_episodes(imported: Path) -> None:
    from_files = {e.id: e for e in read_episodes(imported)}
    in_memory = episodes_from_results(TRACE_FILES, TOOLS)
    assert sorted(e.id for e in in_memory) == sorted(from_files)
    for episode in in_memory:
        twin = from_files[episode.id]
        assert episode.events == twin.events
        assert episode.tools == twin.tools
        assert (episode.task_id, episode.trial, episode.reward) == (
            twin.task_id,
            twin.trial,
            twin.reward,
        )
    # without a tools file there is no tool list, and nothing else changes
    (bare,) = episodes_from_results([TRACE / "e2e_retail_baseline.json"])
    twin = from_files[bare.id]
    assert bare.tools == {}
    assert [(c.id, c.name, c.arguments, c.sent_ms) for c in bare.calls()] == [
        (c.id, c.name, c.arguments, c.sent_ms) for c in twin.calls()
    ]
    assert [(r.call_id, r.content) for r in bare.results().values()] == [
        (r.call_id, r.content) for r in twin.results().values()
    ]


@pytest.mark.parametrize(
    ("path", "why"),
    [
        (TOOLS, "not a τ²-bench results file: it has no `simulations` list"),
        (TAU2 / "domains/retail/tasks.json", "not a τ²-bench results file: expected an object"),
    ],
)
def test_a_file_that_is_not_a_results_file_is_refused(path: Path, why: str, tmp_path) -> None:
    out = tmp_path / "out"
    done = stretto("import-tau2", str(path), "--tools", str(TOOLS), "--out", str(out))
    assert done.returncode == 1
    assert done.stderr.startswith(f"stretto: {path}: {why}")
    assert len(done.stderr.splitlines()) == 1
    assert not out.exists()
    with pytest.raises(LogError, match="not a τ²-bench results file"):
        episodes_from_results([path])


def test_a_gzip_compressed_results_file_is_read_as_the_json_it_holds(
    imported: Path, tmp_path: Path
) -> None:
    """The same sessions, named the same, from `runs.json.gz` as from `runs.json`; a file that
    starts as gzip but is cut short is refused with its path."""
    packed = tmp_path / "e2e_retail_baseline.json.gz"
    packed.write_bytes(gzip.compress((TRACE / "e2e_retail_baseline.json").read_bytes()))
    out = tmp_path / "logs"
    done = stretto("import-tau2", str(packed), "--tools", str(TOOLS), "--out", str(out))
    assert done.returncode == 0, done.stderr
    (log,) = out.glob("*.jsonl")
    twin = log_of(imported, TRACE / "e2e_retail_baseline.json")
    assert log.name == twin.name
    header, *lines = log.read_text().splitlines()
    twin_header, *twin_lines = twin.read_text().splitlines()
    assert lines == twin_lines
    assert json.loads(header) | {"tau2_file": None} == json.loads(twin_header) | {"tau2_file": None}
    torn = tmp_path / "torn.json.gz"
    torn.write_bytes(packed.read_bytes()[:40])
    done = stretto("import-tau2", str(torn), "--tools", str(TOOLS), "--out", str(tmp_path / "o"))
    assert done.returncode == 1
    assert done.stderr.startswith(f"stretto: {torn}: not a readable gzip file")


def test_a_results_file_of_another_domain_is_refused(tmp_path: Path) -> None:
    airline = TRACE / "e2e_airline_baseline.json"
    done = stretto(
        "import-tau2", str(airline), "--tools", str(TOOLS), "--out", str(tmp_path / "o"),
        "--domain", "retail",
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr == f"stretto: {airline}: a results file of the airline domain, not retail\n"
    done = stretto(
        "compile", "--results", str(airline), "--domain", "retail", "--split", str(RETAIL_SPLIT),
        "--out", str(tmp_path / "f.json"), "--home", str(tmp_path / "home"),
    )  # fmt: skip
    assert done.returncode == 1 and "a results file of the airline domain, not retail" in (
        done.stderr
    )


def test_read_split() -> None:
    split = read_split(RETAIL_SPLIT)
    assert len(split["train"]) == 74 and len(split["test"]) == 40
    assert not split["train"] & split["test"]
    assert "0" in split["train"] and "5" in split["test"]
    with pytest.raises(LogError, match="field `train`: missing"):
        read_split(TOOLS)


def successful_training_episodes(*files: Path) -> int:
    train = set(load(RETAIL_SPLIT)["train"])
    return sum(
        1
        for f in files
        for s in load(f)["simulations"]
        if s["task_id"] in train and s["reward_info"]["reward"] >= 1
    )


def test_compile_learns_from_the_successful_training_episodes(tmp_path: Path) -> None:
    out = tmp_path / "retail.flow.json"
    done = stretto(
        "compile", "--results", str(ORCHESTRA_RETAIL), str(GPT41_RETAIL), "--domain", "retail",
        "--split", str(RETAIL_SPLIT), "--out", str(out), "--home", str(tmp_path / "home"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    expected = successful_training_episodes(ORCHESTRA_RETAIL, GPT41_RETAIL)
    assert expected == 62  # of 74 training-task episodes, all in the ToolOrchestra file
    assert successful_training_episodes(GPT41_RETAIL) == 0  # its 40 tasks are the test split
    flow = load_flow(out)
    assert flow["provenance"]["habit_episodes"] == expected
    assert flow["provenance"]["sources"] == ["gpt-4.1-mini-2025-04-14"]
    assert f"from {expected} successful training episodes (of 74 training-task episodes" in (
        done.stdout
    )
    retail = load(TOOLS)["domains"]["retail"]["tools"]
    kinds = flow["manifest"]["tools"]
    writes = {t["name"] for t in retail if t["type"] == "write"}
    assert len(writes) == 7 and {n for n, k in kinds.items() if k == "write"} == writes
    assert kinds == {t["name"]: t["type"] for t in retail}
    # the tools file is found beside the split by default, and compiling again gives the same
    again = tmp_path / "again.flow.json"
    done = stretto(
        "compile", "--results", str(ORCHESTRA_RETAIL), str(GPT41_RETAIL), "--domain", "retail",
        "--split", str(RETAIL_SPLIT), "--out", str(again), "--home", str(tmp_path / "home"),
        "--tools", str(TOOLS),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    second = load_flow(again)
    for flow_ in (flow, second):
        flow_["provenance"].pop("compiled_unix_ms")
    assert second == flow


def test_compile_refuses_files_without_training_episodes(tmp_path: Path) -> None:
    done = stretto(
        "compile", "--results", str(GPT41_RETAIL), "--domain", "retail",
        "--split", str(RETAIL_SPLIT), "--out", str(tmp_path / "f.json"),
        "--home", str(tmp_path / "home"),
    )  # fmt: skip
    assert done.returncode == 1
    assert "no episode of the files given is of a training task" in done.stderr
    assert not (tmp_path / "f.json").exists()


def learn(sessions: Path, out: Path, home: Path) -> dict:
    done = stretto(
        "learn", "--sessions", str(sessions), "--domain", "retail", "--habit-only",
        "--out", str(out), "--home", str(home),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    flow = load_flow(out)
    flow["provenance"].pop("compiled_unix_ms")
    return flow


@pytest.mark.slow  # imports two result files and learns three flows
def test_failed_episodes_are_not_learned_from(tmp_path: Path) -> None:
    # one successful retail episode, and one that failed (reward 0) with calls of its own
    base = tmp_path / "base"
    done = stretto(
        "import-tau2", str(TRACE / "e2e_retail_baseline.json"), "--tools", str(TOOLS),
        "--out", str(base),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    every = tmp_path / "every"
    done = stretto("import-tau2", str(GPT41_RETAIL), "--tools", str(TOOLS), "--out", str(every))
    assert done.returncode == 0, done.stderr
    failed = [p for p in sorted(every.glob("*.jsonl")) if read_episode(p).reward == 0.0]
    assert failed
    failed_log = failed[0]
    assert read_episode(failed_log).calls()

    with_failed = tmp_path / "with-failed"
    shutil.copytree(base, with_failed)
    shutil.copy(failed_log, with_failed)
    as_success = tmp_path / "as-success"
    shutil.copytree(base, as_success)
    lines = failed_log.read_text().split("\n", 1)
    header = json.loads(lines[0]) | {"reward": 1.0}
    (as_success / failed_log.name).write_text(json.dumps(header) + "\n" + lines[1])

    alone = learn(base, tmp_path / "a.json", tmp_path / "home")
    assert alone["provenance"]["habit_episodes"] == 1
    assert learn(with_failed, tmp_path / "b.json", tmp_path / "home") == alone
    # the control: the same episode, marked successful, is learned from
    counted = learn(as_success, tmp_path / "c.json", tmp_path / "home")
    assert counted["provenance"]["habit_episodes"] == 2 and counted["habit"] != alone["habit"]


def test_the_warehouse_keeps_the_reward(imported: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    shutil.copytree(imported, home / "logs" / "tau2")
    shutil.copytree(REFERENCE_HOME / "logs" / "shop", home / "logs" / "shop")
    assert stretto("ingest", "--home", str(home)).returncode == 0
    done = stretto(
        "sql", "SELECT session, reward FROM sessions ORDER BY session", "--home", str(home),
        "--format", "json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rewards = {r["session"]: r["reward"] for r in json.loads(done.stdout)}
    proxy = {k: v for k, v in rewards.items() if not k.startswith("tau2-")}
    assert len(proxy) == 6 and set(proxy.values()) == {None}  # recorded: no reward
    imported_rewards = sorted(v for k, v in rewards.items() if k.startswith("tau2-"))
    assert imported_rewards == [0.0, 1.0, 1.0, 1.0]


def test_a_reward_that_is_not_a_number_is_refused(tmp_path: Path) -> None:
    (tmp_path / "s.jsonl").write_text(
        '{"stretto_mcp_log":2,"session":"s","started_unix_ms":0,"reward":"high"}\n'
    )
    done = stretto("sessions", str(tmp_path))
    assert done.returncode == 1
    assert f"{tmp_path}/s.jsonl:1: field `reward`: expected a number or null" in done.stderr
    # the warehouse quarantines it (rather than learning from it as a successful session)
    home = tmp_path / "home"
    (home / "logs").mkdir(parents=True)
    shutil.copy(tmp_path / "s.jsonl", home / "logs")
    assert stretto("ingest", "--home", str(home)).returncode == 0
    done = stretto("sql", "SELECT error FROM quarantine", "--home", str(home), "--format", "csv")
    assert done.stdout.splitlines()[1:] == ["line 1: field `reward`: expected a number or null"]


def test_recorded_sessions_without_a_reward_are_learned_from(shop_flow_path: Path) -> None:
    logs = list((REFERENCE_HOME / "logs" / "shop").glob("*.jsonl"))
    assert load_flow(shop_flow_path)["provenance"]["habit_episodes"] == len(logs) == 6
    episode = read_episode(logs[0])
    assert (episode.task_id, episode.trial, episode.reward) == ("", 0, None)
    assert episode.succeeded  # no reward: a recorded session, successful


def test_the_flow_asset_skips_a_domain_with_only_failed_sessions(
    imported: Path, tmp_path: Path
) -> None:
    from assets.ingest import INGEST_ASSETS
    from assets.learn import flow
    from pipeline.run import materialize

    logs = tmp_path / "home" / "logs"
    logs.mkdir(parents=True)
    for results in (TRACE / "e2e_retail_baseline.json", TRACE / "e2e_telecom_adversarial.json"):
        shutil.copy(log_of(imported, results), logs)  # retail succeeded; telecom failed
    result = materialize([*INGEST_ASSETS, flow], str(tmp_path / "home"), 30.0)
    assert result.success
    assert sorted(p.name for p in (tmp_path / "home" / "flows").iterdir()) == ["retail.flow.json"]
