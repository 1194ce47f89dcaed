"""Versioned flows: commit, log and rollback round-trip byte for byte, and a proxy serving the
flow picks a rollback up at its next session, never mid-session."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from stretto.logs.merged import read_episodes
from stretto.model.flow import FlowError, dumps, load_flow, write_flow
from stretto.offline.lifecycle import versions
from stretto.offline.lifecycle.stage import Stage, commit_if_better
from stretto.stdio_client import StdioClient
from tests.conftest import demo_server, proxy
from tests.stretto.offline.lifecycle.lifecycle import learn_folder

APPENDIX = "--- Also looked up automatically"


@pytest.fixture(scope="module")
def flows(tmp_path_factory) -> dict[str, bytes]:
    """Two flows for the demo server, learned from sessions recorded through the proxy:
    `chains`, whose agent looks up the key each lookup found; `writes`, whose agent updates
    the record after a lookup (so its flow never looks anything up)."""
    base = tmp_path_factory.mktemp("versions")
    out = {}
    for name in ("chains", "writes"):
        logs = base / name
        for n in range(3):
            with StdioClient(proxy("--record", str(logs), server=demo_server())) as agent:
                agent.initialize()
                agent.list_tools()
                for k in range(2):
                    found = agent.call_tool("lookup", {"key": f"k{n}{k}"})
                    value = json.loads(found["result"]["content"][0]["text"])["found"]
                    if name == "chains":
                        agent.call_tool("lookup", {"key": value})
                    else:
                        agent.call_tool("update", {"key": f"k{n}{k}", "value": "v"})
                agent.close()
        flow = learn_folder(logs, base / f"{name}.flow.json", base / "home")
        out[name] = dumps(flow).encode()
    return out


def test_staged_beside_is_the_inverse_of_staged_path(tmp_path) -> None:
    """The console tells a staged flow from a served one by this inverse: it must undo
    `staged_path` for both forms, and say None for every name staging never writes."""
    for flow in ("shop.flow.json", ".flow.json", "shop.staged.flow.json", "notes", "f.json"):
        staged = versions.staged_path(tmp_path / flow)
        assert versions.staged_beside(staged) == tmp_path / flow
    assert versions.staged_beside(tmp_path / "shop.staged.flow.json") == tmp_path / "shop.flow.json"
    for name in ("shop.flow.json", "shop.json", "shop.flow.json.staged", ".staged", "staged"):
        assert versions.staged_beside(tmp_path / name) is None, name


def test_commit_log_and_rollback_round_trip_byte_for_byte(flows, tmp_path) -> None:
    path = tmp_path / "demo.flow.json"
    path.write_bytes(flows["chains"])
    first = versions.commit(path, "learned from the first sessions", now_ms=1000)
    assert first["version"] == 1 and first["parent"] is None and first["review"] == []
    staged = versions.staged_path(path)
    assert staged.name == "demo.staged.flow.json"
    staged.write_bytes(flows["writes"])
    second = versions.commit(path, "the agent now updates", now_ms=2000)
    assert path.read_bytes() == flows["writes"] and not staged.exists()
    assert second["parent"] == 1 and second["other"]  # counts changed; nothing needs review
    assert oct(path.stat().st_mode & 0o777) == "0o600"

    back = versions.rollback(path, now_ms=3000)
    assert path.read_bytes() == flows["chains"]
    assert back["action"] == "rollback" and back["to"] == 1 and back["version"] == 3
    # rolling back to `chains` is a change that needs review: it may look up again
    assert any("a new lookup after lookup: lookup" in r for r in back["review"])
    forward = versions.rollback(path, to=2)
    assert path.read_bytes() == flows["writes"] and forward["to"] == 2
    # the default goes back from the version served, through the commits
    versions.rollback(path)
    assert path.read_bytes() == flows["chains"]
    with pytest.raises(versions.VersionError, match="version 1 is the first"):
        versions.rollback(path)

    entries = versions.log(path)
    assert [(e["version"], e["action"], e.get("to")) for e in entries] == [
        (1, "commit", None),
        (2, "commit", None),
        (3, "rollback", 1),
        (4, "rollback", 2),
        (5, "rollback", 1),
    ]
    assert entries[1]["note"] == "the agent now updates" and entries[1]["unix_ms"] == 2000
    copies = sorted(p.name for p in versions.history_dir(path).glob("*.flow.json"))
    assert copies == sorted(f"{versions.digest(b)}.flow.json" for b in flows.values())
    for entry in entries:
        data = versions.version_bytes(path, entry)
        assert data == flows["chains" if entry.get("to", entry["version"]) == 1 else "writes"]
    text = versions.log_markdown(path)
    assert "| 3 | 1970-01-01 00:00:03 | rollback to 1 |" in text
    assert "Served now: version 5." in text

    with pytest.raises(versions.VersionError, match="already the current version"):
        versions.commit(path, "again")
    with pytest.raises(versions.VersionError, match="no version 9"):
        versions.rollback(path, to=9)
    with pytest.raises(versions.VersionError, match="needs a note"):
        versions.commit(path, " ")


def test_a_flow_served_before_the_first_commit_is_kept_first(flows, tmp_path) -> None:
    path = tmp_path / "demo.flow.json"
    path.write_bytes(flows["chains"])
    versions.staged_path(path).write_bytes(flows["writes"])
    entry = versions.commit(path, "first staged commit")
    assert entry["version"] == 2
    assert versions.log(path)[0]["note"] == "the flow served before the first commit"
    versions.rollback(path)
    assert path.read_bytes() == flows["chains"]


def test_a_changed_copy_and_a_bad_flow_are_refused(flows, tmp_path) -> None:
    path = tmp_path / "demo.flow.json"
    path.write_bytes(flows["chains"])
    versions.commit(path, "one")
    versions.staged_path(path).write_text('{"stretto_flow": 1}')
    with pytest.raises(FlowError, match="demo.staged.flow.json: field"):
        versions.commit(path, "bad")
    versions.staged_path(path).write_bytes(flows["writes"])
    versions.commit(path, "two")
    (copy,) = versions.history_dir(path).glob(f"{versions.digest(flows['chains'])}.flow.json")
    copy.write_bytes(flows["chains"].replace(b'"stretto_flow":1', b'"stretto_flow": 1'))
    with pytest.raises(versions.VersionError, match="do not match its name"):
        versions.rollback(path)
    assert path.read_bytes() == flows["writes"]  # nothing changed


def test_auto_commit_only_when_better(flows, tmp_path) -> None:
    path = tmp_path / "demo.flow.json"
    path.write_bytes(flows["chains"])
    staged = versions.staged_path(path)
    staged.write_bytes(flows["writes"])
    flow = json.loads(flows["chains"])
    tally = {"decisions": 1, "lookups": 1, "used": 0, "detours": 1, "served": 0}
    good = {**tally, "used": 1, "detours": 0}
    same = Stage(flow, staged, flow, [{"committed": {"x": tally}, "staged": {"x": tally}}] * 3, 3)
    assert commit_if_better(path, same) is None and staged.exists()
    better = Stage(flow, staged, flow, [{"committed": {"x": tally}, "staged": {"x": good}}] * 3, 3)
    entry = commit_if_better(path, better)
    assert entry["note"].startswith("auto-commit: used − detours per session +2.00")
    assert entry["comparison"]["better"] is True
    assert path.read_bytes() == flows["writes"]


def _session(record: Path, flow: Path, keys: list[str], between=None) -> tuple[list, list]:
    """One proxy session serving `flow`: a lookup per key (calling `between` after the first);
    the agent's answers and the flow log's decisions."""
    answers = []
    command = proxy("--record", str(record), "--flow", str(flow), server=demo_server())
    with StdioClient(command) as agent:
        agent.initialize()
        agent.list_tools()
        for i, key in enumerate(keys):
            if i == 1 and between is not None:
                between()
            answers.append(agent.call_tool("lookup", {"key": key}))
        agent.close()
    (log,) = record.glob("*.flow.jsonl")
    decisions = [json.loads(line) for line in log.read_text().splitlines()]
    return answers, [d for d in decisions if "address" in d]


def test_a_rollback_reaches_the_next_session_never_a_running_one(flows, tmp_path) -> None:
    path = tmp_path / "flows" / "demo.flow.json"
    path.parent.mkdir()
    path.write_bytes(flows["writes"])
    versions.commit(path, "updates")
    versions.staged_path(path).write_bytes(flows["chains"])
    versions.commit(path, "chains")
    inode = os.stat(path).st_ino

    def roll_back() -> None:
        versions.rollback(path)
        assert path.read_bytes() == flows["writes"] and os.stat(path).st_ino != inode

    answers, decisions = _session(tmp_path / "one", path, ["a1", "a2"], between=roll_back)
    # the running session keeps the flow it started with: after each call it looks up the
    # key the call found, the second time too (after the rollback)
    for answer, key in zip(answers, ["a1", "a2"], strict=True):
        appended = answer["result"]["content"][-1]["text"]
        assert appended.startswith(APPENDIX)
        assert f'lookup {{"key":"value-of-{key}"}}' in appended
    looked = [d for d in decisions if d["action"] == "lookup"]
    assert [d["arguments"] for d in looked[:1]] == [{"key": "value-of-a1"}]
    assert {"key": "value-of-a2"} in [d["arguments"] for d in looked]

    answers, decisions = _session(tmp_path / "two", path, ["b1"])
    # the next session serves the flow rolled back to: it looks nothing up
    assert len(answers[0]["result"]["content"]) == 1
    assert [d["reason"] for d in decisions] == ["no lookups followed here in training"]
    assert load_flow(path) == json.loads(flows["writes"])
    assert read_episodes(tmp_path / "two")[0].calls()[0].name == "lookup"


def test_write_flow_and_a_committed_copy_agree(flows, tmp_path) -> None:
    """The flow file a commit serves is the very bytes `write_flow` writes."""
    path = tmp_path / "demo.flow.json"
    write_flow(json.loads(flows["chains"]), path)
    assert path.read_bytes() == flows["chains"]
