"""The walkthrough, as `make run` runs it: the whole loop on the real filesystem server, leaving
everything where stretto keeps it under the home."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from stretto.logs.merged import read_episodes
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


def _as_documented(text: str, walked: Walked) -> str:
    """What the walkthrough printed with docs/walkthrough.md's paths and flow-show's time."""
    text = text.replace(str(walked.home), "~/.stretto").replace(str(ROOT), "/path/to/stretto")
    return re.sub(r" on \d{4}-\d\d-\d\d \d\d:\d\d UTC;", " on DATE UTC;", text)


def test_the_walkthrough_doc_shows_what_it_prints(walked: Walked) -> None:
    """Every `text` block of docs/walkthrough.md is what the walkthrough printed (with the
    home as `~/.stretto` and the repository as /path/to/stretto), and its `markdown` block is
    how `stretto flow-show` of the first flow starts."""
    doc = _as_documented((ROOT / "docs/walkthrough.md").read_text(), walked)
    printed = _as_documented(walked.out, walked)
    blocks = re.findall(r"```text\n(.*?)```", doc, re.S)
    assert len(blocks) == 10  # one per step
    for block in blocks:
        missing = [line for line in block.splitlines() if line not in printed.splitlines()]
        assert block in printed, missing or block
    (shown,) = re.findall(r"```markdown\n(.*?)```", doc, re.S)
    done = subprocess.run(
        [
            str(Path(PYTHON).parent / "stretto"),
            "flow-show",
            str(walked.home / "flows/notes.flow.json"),
        ],
        capture_output=True,
        text=True,
    )
    assert _as_documented(done.stdout, walked).startswith(shown)


def test_running_it_again_starts_the_story_afresh(walked: Walked, tmp_path: Path) -> None:
    """A second `make run` in the same home: the warehouse holds the 12 sessions of this run
    (not 24), the reports are this run's, the doctor counts 12."""
    user = tmp_path / "user"
    shutil.copytree(walked.user_home, user, symlinks=True)
    home = user / ".stretto"
    first = {r["session"] for r in rows(home, "SELECT session FROM sessions")}
    done = subprocess.run(
        [PYTHON, str(ROOT / "scripts/walkthrough.py")],
        capture_output=True,
        text=True,
        env=newcomer_env(user),
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok  the warehouse holds the 12 sessions and the agent's 30 calls" in done.stdout
    now = {r["session"] for r in rows(home, "SELECT session FROM sessions")}
    logs = {p.stem for p in (home / "logs/notes").glob("*[0-9].jsonl")}
    assert now == logs and len(now) == 12 and not now & first
    assert mismatches(home) == []
    reports = sorted(p.name.split("-")[0] for p in (home / "reports/notes").iterdir())
    assert reports == ["audit", "evaluation"]
    doctor = subprocess.run(
        [str(Path(PYTHON).parent / "stretto"), "doctor"],
        capture_output=True,
        text=True,
        env=newcomer_env(user),
    )
    assert f"{home}/warehouse/stretto.duckdb: 12 sessions, " in doctor.stdout
