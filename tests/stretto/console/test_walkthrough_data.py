"""The console's API on a copy of the walkthrough's home (logs/notes, shadow/notes,
explore/notes, flows/, reports/notes, the warehouse): its figures agree with the rest of
stretto — "used later" with evaluate's labels, what a flow would look up with flow-show's
review, each session counted once."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from stretto.offline.evaluate.labelling import label_folder
from tests.conftest import Walked
from tests.stretto.console.conftest import AUTH, client_for

# reads the walkthrough's home: runs `make run`'s walkthrough first
pytestmark = pytest.mark.slow

FLOWS = ["flows/notes.flow.json", "flows/notes.new.flow.json", "flows/notes.promoted.flow.json"]


@pytest.fixture(scope="module")
def client(walkthrough_home: Path):
    return client_for(walkthrough_home)


def test_used_later_is_the_label_evaluate_gives(client, walkthrough_home: Path):
    """The one rule (agent_made), asked as evaluate asks it: the console's label of each
    decision the exploring sessions logged is evaluate's label of the option it took."""
    labelled = label_folder(walkthrough_home / "explore/notes", progress=False)
    expected = {
        (row["session"], row["line"]): row["labels"][row["taken"]]["used"]
        for row in labelled.rows
        if row["taken"] is not None
    }
    shown = {}
    for session in {row["session"] for row in labelled.rows}:
        items = client.get(f"/api/sessions/{session}/timeline", headers=AUTH).json()["items"]
        for item in items:
            if item["kind"] == "decision" and item["action"] == "lookup":
                shown[(session, item["flow_log_line"])] = item["used"]
                assert item["label"] == ("used later" if item["used"] else "detour")
    assert shown == expected and len(shown) == 4


def _wire(t_ms: int, sender: str, message: dict) -> str:
    return json.dumps({"t_ms": t_ms, "from": sender, "message": message}) + "\n"


def _call(t_ms: int, call_id: int, tool: str, arguments: dict) -> list[str]:
    """An agent's call and its answer, as the proxy records them."""
    params = {"name": tool, "arguments": arguments}
    answer = {"content": [{"type": "text", "text": "done"}]}
    return [
        _wire(
            960,
            "client",
            {"jsonrpc": "2.0", "id": call_id, "method": "tools/call", "params": params},
        ),
        _wire(t_ms, "server", {"jsonrpc": "2.0", "id": call_id, "result": answer}),
    ]


def test_used_later_cuts_at_the_next_write_and_not_made_already(walked: Walked, tmp_path):
    """An exploring session whose first decision looks up a note the agent then reads (used
    later), changed two ways: the agent read that note before (made already), or wrote a
    file before reading it (cut at the next write). Both are detours, for evaluate and for
    the console alike."""
    source = min((walked.home / "explore/notes").glob("*[0-9].jsonl"))
    lines = source.read_text().splitlines(keepends=True)
    search = next(i for i, line in enumerate(lines) if '"name": "search_files"' in line)
    (decision, *_) = source.with_suffix(".flow.jsonl").read_text().splitlines()
    looked_up = json.loads(decision)["arguments"]  # the note the agent reads next
    folder = tmp_path / "data" / "explore" / "changed"
    folder.mkdir(parents=True)
    changed = {
        "as-recorded": lines,
        "made-already": lines[:search]
        + _call(957, 90, "read_text_file", looked_up)
        + lines[search:],
        "after-a-write": lines[: search + 2]
        + _call(987, 91, "write_file", {"path": "/tmp/x.md", "content": "x"})
        + lines[search + 2 :],
    }
    for n, (name, text) in enumerate(changed.items()):
        header = json.loads(text[0]) | {"session": f"20261201T000000.000Z-{n:05d}"}
        (folder / f"{name}.jsonl").write_text(json.dumps(header) + "\n" + "".join(text[1:]))
        shutil.copy(source.with_suffix(".flow.jsonl"), folder / f"{name}.flow.jsonl")
    labelled = {r["file"]: r for r in label_folder(folder, progress=False).rows if r["line"] == 1}
    client = client_for(tmp_path / "data")
    used = {}
    for name in changed:
        session = client.get(f"/api/sessions?q={name}", headers=AUTH).json()["items"][0]["key"]
        items = client.get(f"/api/sessions/{session}/timeline", headers=AUTH).json()["items"]
        first = next(i for i in items if i["kind"] == "decision" and i["flow_log_line"] == 1)
        assert labelled[str(folder / f"{name}.flow.jsonl")]["labels"][0]["used"] == first["used"]
        used[name] = first["label"]
    assert used == {
        "as-recorded": "used later",
        "made-already": "detour",
        "after-a-write": "detour",
    }


@pytest.mark.parametrize("threshold", [0.05, 0.3, 0.6, 1.5])
def test_what_a_flow_would_look_up_is_the_review_s(client, threshold: float):
    for name in FLOWS:
        flow = client.get(f"/api/flows/{name}?threshold={threshold}", headers=AUTH).json()
        lookups = [(s["site"], lk) for s in flow["summary"]["sites"] for lk in s["lookups"]]
        assert lookups
        for _, lookup in lookups:
            assert lookup["looks_up"] == lookup["verdict"].startswith("looks up"), lookup
        edges = {e["id"]: e["looks_up"] for e in flow["graph"]["edges"]}
        assert edges == {f"{site}->{lk['tool']}": lk["looks_up"] for site, lk in lookups}
        made = sorted(f"{site} → {lk['tool']}" for site, lk in lookups if lk["looks_up"])
        assert flow["looked_up"] == made


def test_a_site_not_promoted_looks_nothing_up(client):
    flow = client.get("/api/flows/flows/notes.promoted.flow.json", headers=AUTH).json()
    sites = {s["site"]: s for s in flow["summary"]["sites"]}
    (held_back,) = sites["read_text_file"]["lookups"]
    assert held_back["verdict"].startswith("hands back: not promoted; in shadow, looks up")
    assert held_back["looks_up"] is False
    assert flow["looked_up"] == ["search_files → read_text_file"]


def test_the_overview_counts_each_session_once(client):
    listed = client.get("/api/sessions", headers=AUTH).json()
    overview = client.get("/api/overview", headers=AUTH).json()
    assert overview["source"] == "logs" and not overview["problems"]
    # 12 in logs/notes (all in the warehouse: not stale), 3 in shadow/notes, 3 in explore/notes
    assert overview["totals"]["sessions"] == listed["total"] == 18
    assert overview["warehouse"]["held"] == 12 and not overview["warehouse"]["stale"]
    assert overview["totals"]["calls"] == sum(s["calls"] for s in listed["items"])
    assert overview["totals"]["lookups"] == 3  # the served session's
    (notes,) = overview["by_domain"]
    assert notes["flow"] == "flows/notes.flow.json"  # the served one, not the newest
    assert notes["replay"]["episodes"] == 11  # the recorded sessions: logs/notes, less 1 served
