"""Serving a flow: the proxy makes the lookups, with the real filesystem server."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from stretto.logs.sessionlog import read_session_log
from stretto.stdio_client import StdioClient
from tests.conftest import notes_flow, proxy, searches_then_reads, served_notes
from tests.warehouse.helpers import ingest, rows

APPENDIX = "--- Also looked up automatically (current results; no need to repeat these calls) ---"
PATTERNS = ["**/2026-08-*", "**/2026-09-*", "**/*beta*", "**/2026-10-2*", "**/*alpha*"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, Path, Path]:
    """Notes, a flow learned from sessions that search and then read what they found."""
    base = tmp_path_factory.mktemp("serve")
    notes = base / "notes"
    notes.mkdir()
    for day in ("08-12", "08-26", "09-03", "09-17", "09-28", "10-05", "10-14", "10-26"):
        (notes / f"2026-{day}.md").write_text(f"# Meeting 2026-{day}\nDecisions of the day.\n")
    (notes / "alpha.md").write_text("# Alpha\nOn track.\n")
    (notes / "beta.md").write_text("# Beta\nAt risk.\n")
    flow = notes_flow(
        base, [searches_then_reads(notes, pattern) for pattern in PATTERNS], folder=notes
    )
    return notes, flow, base


def serve(notes: Path, flow: Path, logs: Path, *options: str, pattern: str = "**/2026-10-*"):
    command = served_notes(notes, flow, logs, *options)
    with StdioClient(command) as agent:
        agent.initialize()
        agent.list_tools()
        answer = agent.call_tool("search_files", {"path": str(notes), "pattern": pattern})
        agent.close()
    (log,) = logs.glob("*[0-9].jsonl")
    flow_log = (
        [json.loads(line) for line in log.with_suffix(".flow.jsonl").read_text().splitlines()]
        if log.with_suffix(".flow.jsonl").exists()
        else []
    )
    return answer, log, flow_log, agent.stderr_text


def test_after_a_search_the_flow_reads_the_found_files_then_hands_back(trained, tmp_path) -> None:
    notes, flow, _ = trained
    answer, log, flow_log, _ = serve(notes, flow, tmp_path / "logs")
    content = answer["result"]["content"]
    assert content[0]["text"].count("2026-10-") == 3  # the server's own answer, unchanged
    appended = content[-1]["text"]
    assert appended.startswith(APPENDIX)
    for day in ("10-05", "10-14", "10-26"):
        assert (
            f'read_text_file {{"path":"{notes}/2026-{day}.md"}}:\n# Meeting 2026-{day}' in appended
        )
    decisions = [d for d in flow_log if "action" in d]
    assert [d["action"] for d in decisions] == ["lookup", "lookup", "lookup", "hand_back"]
    assert decisions[-1]["reason"] == "read_text_file: nothing left to pass as `path`"
    (run,) = [d for d in flow_log if "run" in d]
    assert run["run"]["call"] == "search_files" and run["run"]["surprise"] > 0
    senders = [line.sender for line in read_session_log(log).lines]
    assert senders.count("proxy") == 4  # three lookups and the extended answer


def test_caps_shadow_and_tools(trained, tmp_path) -> None:
    notes, flow, _ = trained
    capped, _, flow_log, _ = serve(notes, flow, tmp_path / "a", "--flow-per-call", "1")
    assert capped["result"]["content"][-1]["text"].count("read_text_file {") == 1

    shadow, log, flow_log, _ = serve(notes, flow, tmp_path / "b", "--flow-shadow")
    assert len(shadow["result"]["content"]) == 1  # the server's answer, nothing appended
    lines = read_session_log(log).lines
    assert not any(line.sender == "proxy" for line in lines)
    assert flow_log[0]["shadow"] is True and flow_log[0]["action"] == "lookup"
    raw = log.read_bytes()
    server_answer = [line for line in lines if line.sender == "server"][-1].message
    assert server_answer["result"] == shadow["result"]
    assert b'"from":"server"' in raw

    none, _, flow_log, _ = serve(notes, flow, tmp_path / "c", "--flow-tools", "directory_tree")
    assert len(none["result"]["content"]) == 1
    assert flow_log[0]["withheld"] == "not in --flow-tools"


def test_a_changed_contract_and_a_write_hint_stop_the_lookup(trained, tmp_path) -> None:
    notes, flow_path, _ = trained
    flow = json.loads(flow_path.read_text())
    flow["contracts"]["read_text_file"] = "path:string!, encoding:string"
    changed = tmp_path / "changed.flow.json"
    changed.write_text(json.dumps(flow))
    answer, _, flow_log, stderr = serve(notes, changed, tmp_path / "a")
    assert len(answer["result"]["content"]) == 1
    assert flow_log[0]["withheld"] == "its input contract changed"
    assert stderr.count("read_text_file's input contract changed") == 1

    flow = json.loads(flow_path.read_text())
    flow["manifest"]["tools"]["write_file"] = "read"  # the flow is wrong; the server knows
    flow["sites"]["next"] = [
        {"after": "search_files", "failed": False, "lookups": {"write_file": 5}}
    ]
    flow["sites"]["reads"] = sorted([*flow["sites"]["reads"], "write_file"])
    flow["bindings"]["args"]["write_file"] = {"calls": 5, "passed": {}}
    writes = tmp_path / "writes.flow.json"
    writes.write_text(json.dumps(flow))
    answer, log, flow_log, _ = serve(notes, writes, tmp_path / "b", "--flow-threshold", "0")
    assert len(answer["result"]["content"]) == 1
    assert not any(line.sender == "proxy" for line in read_session_log(log).lines)
    assert any(d.get("withheld") == "the server marks it readOnlyHint: false" for d in flow_log)


def test_a_served_session_is_learned_from_again_with_lookups_told_apart(trained, tmp_path) -> None:
    notes, flow, _ = trained
    home = tmp_path / "home"
    serve(notes, flow, home / "logs/notes")
    ingest(home)
    assert rows(
        home, "SELECT tool, by_proxy, count(*) AS n FROM calls GROUP BY ALL ORDER BY by_proxy, tool"
    ) == [
        {"tool": "search_files", "by_proxy": False, "n": 1},
        {"tool": "read_text_file", "by_proxy": True, "n": 3},
    ]
    (call,) = rows(home, "SELECT result_text FROM calls WHERE tool = 'search_files'")
    assert APPENDIX not in call["result_text"]  # the server's answer, not the extended one


def test_a_bad_flow_is_refused_before_anything_starts(tmp_path) -> None:
    bad = tmp_path / "bad.flow.json"
    bad.write_text('{"stretto_flow": 1}')
    done = subprocess.run(
        proxy("--record", str(tmp_path / "logs"), "--flow", str(bad), server=["cat"]),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    assert "bad.flow.json: field `(the whole flow)`: 'provenance' is a required property" in (
        done.stderr
    )
    assert not (tmp_path / "logs").exists()


def test_a_failed_lookup_says_error_and_a_long_one_is_cut(trained, tmp_path) -> None:
    notes, flow, _ = trained
    # found by the search, but reading it fails (in the notes themselves: a path elsewhere
    # would not look like the paths passed in training)
    (notes / "2026-10-09.md").mkdir()
    try:
        answer, _, flow_log, _ = serve(notes, flow, tmp_path / "a")
    finally:
        (notes / "2026-10-09.md").rmdir()
    appended = answer["result"]["content"][-1]["text"]
    assert f'read_text_file {{"path":"{notes}/2026-10-09.md"}} (error):\n' in appended
    # nothing followed a failed read in training: the flow hands back after it
    assert appended.count("read_text_file {") == 2
    last = [d for d in flow_log if "action" in d][-1]
    assert (last["site"], last["reason"]) == (
        "read_text_file (error)",
        "no lookups followed here in training",
    )

    small, _, _, _ = serve(notes, flow, tmp_path / "b", "--flow-budget", "400")
    text = small["result"]["content"][-1]["text"]
    assert len(text) <= 400 + 120 and "[... cut:" in text


def test_exploration_is_logged_with_its_propensity(trained, tmp_path) -> None:
    notes, flow, _ = trained
    _, _, flow_log, _ = serve(notes, flow, tmp_path / "a", "--flow-explore", "0.5")
    first = flow_log[0]["explore"]
    # one lookup at this site: nothing else to explore, the rule's choice with propensity 1
    assert first["epsilon"] == 0.5 and first["explored"] is False and first["propensity"] == 1
    assert first["options"][0]["tool"] == "read_text_file"


def test_a_flow_is_served_at_its_own_threshold_unless_one_is_given(trained, tmp_path) -> None:
    """A flow whose `serving` threshold (learn --costs) is above every lookup's score makes
    none; the same flow with --flow-threshold at the default makes the usual three."""
    from stretto.model.decide import serving_part

    notes, flow_path, _ = trained
    wary = tmp_path / "wary.flow.json"
    flow = json.loads(flow_path.read_text())
    wary.write_text(json.dumps({**flow, "serving": serving_part(1, 99)}))  # θ = 0.99
    answer, _, flow_log, _ = serve(notes, wary, tmp_path / "own")
    assert len(answer["result"]["content"]) == 1  # nothing appended
    decisions = [d for d in flow_log if "action" in d]
    assert decisions and all(d["action"] == "hand_back" for d in decisions)
    assert "below 0.99" in decisions[0]["reason"]
    told, _, flow_log, _ = serve(notes, wary, tmp_path / "told", "--flow-threshold", "0.3")
    assert told["result"]["content"][-1]["text"].count("read_text_file {") == 3
    plain, _, _, _ = serve(notes, flow_path, tmp_path / "plain")
    assert told["result"] == plain["result"]
