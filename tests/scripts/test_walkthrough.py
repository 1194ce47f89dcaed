"""The walkthrough, as `make run` runs it: the whole loop on the real filesystem server, leaving
everything where stretto keeps it under the home."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from stretto.logs.episode import read_episodes
from stretto.model.flow import load_flow
from tests.conftest import PYTHON, REFERENCE_HOME, ROOT
from tests.scripts.conftest import Walked, newcomer_env
from tests.warehouse.helpers import mismatches, rows

# the walkthrough end to end, as `make run` runs it
pytestmark = pytest.mark.slow


def test_the_walkthrough_runs_the_whole_loop(walked: Walked) -> None:
    out = walked.out
    assert "FAILED" not in out
    for step in (
        f"1. Recording 8 sessions of the scripted agent into {walked.home}/logs/notes",
        "2. Learning a flow",
        "3. Reviewing it",
        "4. Auditing it on 3 sessions it never saw",
        "5. Serving it",
        "6. Replaying the 3 held-out sessions",
        "7. Serving it in shadow mode",
        "8. Serving it exploring",
        f"9. Learning again from every session in {walked.home}/logs/notes",
        "10. Ingesting",
    ):
        assert step in out
    assert f"wrote {walked.home}/flows/notes.flow.json" in out
    assert "ok  the agent made 1 call where it makes 4: the flow read the 3 notes for it" in out
    assert "ok  the flow would have saved every turn a read-only speculator could" in out
    assert "ok  shadow mode earned search_files its promotion" in out
    assert "ok  evaluate estimated both thresholds from the exploring sessions" in out
    assert "learned the notes flow from 12 sessions" in out
    assert "ok  flow-diff exits 0" in out
    assert "ok  the warehouse holds the 12 sessions and the agent's 30 calls" in out


def test_it_leaves_everything_where_the_readme_says(walked: Walked) -> None:
    home = walked.home
    episodes = read_episodes(home / "logs/notes")
    assert len(episodes) == 12  # 8 learned from, 1 served, 3 held out
    assert all(e.agent_model == "scripted-notes-agent" and e.domain == "notes" for e in episodes)
    september = next(e for e in episodes if e.events[0].text == "Summarize the September meetings.")
    assert [c.name for c in september.calls()] == ["search_files"] + ["read_text_file"] * 3
    served = [e for e in episodes if any(c.by_proxy for c in e.calls())]
    assert len(served) == 1 and len(list((home / "logs/notes").glob("*.flow.jsonl"))) == 1
    for folder in ("shadow/notes", "explore/notes"):
        assert len(read_episodes(home / folder)) == 3
        assert len(list((home / folder).glob("*.flow.jsonl"))) == 3
    flows = {p.name: load_flow(p) for p in (home / "flows").iterdir()}
    assert set(flows) == {"notes.flow.json", "notes.promoted.flow.json", "notes.new.flow.json"}
    assert flows["notes.flow.json"]["provenance"]["habit_episodes"] == 8
    assert flows["notes.new.flow.json"]["provenance"]["habit_episodes"] == 12
    reports = sorted(p.name.split("-")[0] for p in (home / "reports/notes").iterdir())
    assert reports == ["audit", "evaluation"]
    assert not list(ROOT.glob("*.flow.json")), "nothing is written into the repository"

    # what our proxy recorded agrees with the reader, in the warehouse
    assert mismatches(home) == []
    reads = rows(home, "SELECT count(*) AS n FROM steps WHERE action = 'read_text_file'")
    assert reads == [{"n": sum(len(e.calls()) - 1 for e in episodes)}]


def test_it_refuses_a_home_holding_sessions_of_your_own(tmp_path: Path) -> None:
    logs = tmp_path / ".stretto/logs/notes"
    logs.mkdir(parents=True)
    mine = logs / "mine.jsonl"
    shutil.copy(min((REFERENCE_HOME / "logs/shop").glob("*.jsonl")), mine)  # another agent's
    done = subprocess.run(
        [PYTHON, str(ROOT / "scripts/walkthrough.py")],
        capture_output=True,
        text=True,
        env=newcomer_env(tmp_path),
    )
    assert done.returncode == 2
    assert f"walkthrough: {mine} is not the walkthrough's" in done.stderr
    assert "make run STRETTO_HOME=DIR" in done.stderr
    assert json.loads(mine.read_text().splitlines()[0])["session"]  # left as it was
    assert sorted(p.name for p in tmp_path.joinpath(".stretto").rglob("*")) == [
        "logs",
        "mine.jsonl",
        "notes",
    ]
