"""`stretto-proxy --flow-surprise`: the surprise gate served, with the real filesystem server.
An agent that keeps its habit is served to the end; one that wanders off it has the flow hand
back after the window, with the gate's reason in the flow log."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from stretto.stdio_client import StdioClient
from tests.conftest import (
    PROXY,
    notes_flow,
    searches_then_reads,
    served_notes,
)

APPENDIX = "--- Also looked up automatically"
DAYS = ("08-12", "08-26", "09-03", "09-17", "09-28", "10-05")
PATTERNS = ["**/2026-08-*", "**/2026-09-*", "**/2026-10-*", "**/*alpha*", "**/*beta*"]
GATE = {"window": 2, "threshold": 3.0, "quantile": 0.9, "sessions": 6}


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> tuple[Path, Path]:
    """Notes, and a flow (with a gate) learned from sessions that search, read what they
    found, and search again."""
    base = tmp_path_factory.mktemp("gate-serve")
    notes = base / "notes"
    notes.mkdir()
    for day in DAYS:
        (notes / f"2026-{day}.md").write_text(f"# Meeting 2026-{day}\n")
    (notes / "alpha.md").write_text("# Alpha\n")
    (notes / "beta.md").write_text("# Beta\n")
    agents = [searches_then_reads(notes, *PATTERNS[k % 2 :], *PATTERNS[: k % 2]) for k in range(6)]
    flow = notes_flow(base, agents, folder=notes)
    learned = json.loads(flow.read_text())
    learned["surprise"] = GATE
    flow.write_text(json.dumps(learned))
    return notes, flow


def serve(notes: Path, flow: Path, logs: Path, wander: bool, *options: str):
    """Five searches; a wandering agent lists a folder after each instead of searching on.
    The answers, the session log and the flow log."""
    command = served_notes(notes, flow, logs, *options)
    answers = []
    with StdioClient(command) as agent:
        agent.initialize()
        agent.list_tools()
        for pattern in PATTERNS:
            answers.append(
                agent.call_tool("search_files", {"path": str(notes), "pattern": pattern})
            )
            if wander:
                agent.call_tool("list_directory", {"path": str(notes)})
        agent.close()
    (log,) = logs.glob("*[0-9].jsonl")
    flow_log = [
        json.loads(line) for line in log.with_suffix(".flow.jsonl").read_text().splitlines()
    ]
    return answers, log, flow_log


def extended(answers: list[dict]) -> list[bool]:
    return [answer["result"]["content"][-1]["text"].startswith(APPENDIX) for answer in answers]


def test_an_agent_that_keeps_its_habit_is_served_to_the_end(served, tmp_path) -> None:
    notes, flow = served
    answers, _, flow_log = serve(notes, flow, tmp_path / "logs", wander=False)
    assert extended(answers) == [True] * len(PATTERNS)
    assert not [line for line in flow_log if "gate" in line]


def test_an_agent_that_wanders_has_the_flow_hand_back_after_the_window(served, tmp_path) -> None:
    notes, flow = served
    answers, _, flow_log = serve(notes, flow, tmp_path / "logs", wander=True)
    # the first search is served; two wandering steps close the gate; the rest hand back
    served_now = extended(answers)
    assert served_now[0] and not any(served_now[2:]), served_now
    gated = [line for line in flow_log if "gate" in line]
    assert gated and all(line["action"] == "hand_back" for line in gated)
    assert gated[0]["reason"].startswith("the agent left its habit: ")
    assert gated[0]["reason"].endswith("nats per step over its last 2 steps, above 3")
    assert not any("run" in line for line in flow_log[flow_log.index(gated[0]) :])
    # closed at the second scored step: the two wandering ones, far above 3 nats each
    assert gated[0]["gate"]["closed_at"] == 2 and gated[0]["gate"]["mean"] > 3.0
    # closed as the second list_directory was sent: its result and every later one hand back
    assert len(gated) == len(PATTERNS) * 2 - 3


def test_off_keeps_serving_and_a_low_threshold_hands_back_sooner(served, tmp_path) -> None:
    notes, flow = served
    answers, _, flow_log = serve(notes, flow, tmp_path / "a", True, "--flow-surprise", "off")
    assert extended(answers) == [True] * len(PATTERNS)
    assert not [line for line in flow_log if "gate" in line]

    answers, _, flow_log = serve(notes, flow, tmp_path / "b", False, "--flow-surprise", "0")
    gated = [line for line in flow_log if "gate" in line]
    assert gated and gated[0]["gate"]["threshold"] == 0.0 and gated[0]["gate"]["window"] == 2
    assert not all(extended(answers))


@pytest.mark.parametrize("value", ["sometimes", "-1", "nan", "inf"])
def test_a_bad_threshold_is_a_usage_error(value: str, tmp_path) -> None:
    done = subprocess.run(
        [
            PROXY,
            "--flow",
            "f.json",
            "--record",
            str(tmp_path),
            "--flow-surprise",
            value,
            "--",
            "cat",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert "--flow-surprise wants off or a number of nats ≥ 0" in done.stderr
