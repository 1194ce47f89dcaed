"""The walkthrough: stretto's loop on the official filesystem MCP server, end to end.

A scripted agent (no LLM, no key) answers questions about a folder of notes through
stretto-proxy, which records each session into $STRETTO_HOME/logs/notes/. Every outcome is
checked; the script exits non-zero if one is not what it should be.

    .venv/bin/python scripts/walkthrough.py [--home DIR]

Today it records the sessions and ingests them into the warehouse; learning, serving and
auditing join as they are built.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOTES = ROOT / "scripts" / "notes"
FILESYSTEM_SERVER = ROOT / "node" / "node_modules" / ".bin" / "mcp-server-filesystem"
PROXY = Path(sys.executable).parent / "stretto-proxy"
STRETTO = Path(sys.executable).parent / "stretto"
AGENT_MODEL = "scripted-notes-agent"

sys.path.insert(0, str(ROOT))
from stretto.episode import read_episode  # noqa: E402
from stretto.stdio_client import StdioClient, result_text  # noqa: E402


@dataclass(frozen=True)
class Task:
    question: str
    pattern: str  # what the agent searches for
    reads: int  # how many of the found files it reads


# The training sessions: each a search, then reading what was found.
TRAINING = [
    Task("What's the status of project alpha?", "**/*alpha*", 1),
    Task("Summarize the September meetings.", "**/2026-09-*", 3),
    Task("What's the status of project beta?", "**/*beta*", 1),
    Task("Summarize the August meetings.", "**/2026-08-*", 2),
    Task("Who owns project gamma?", "**/*gamma*", 1),
    Task("What is on the roadmap?", "**/*roadmap*", 1),
    Task("What did we decide on 2026-09-17?", "**/2026-09-17*", 1),
    Task("Who is on the team?", "**/team*", 1),
]


def home_dir(given: str | None) -> Path:
    home = given or os.environ.get("STRETTO_HOME") or "~/.stretto"
    return Path(home).expanduser().resolve()


def run_session(task: Task, logs: Path, workdir: Path) -> Path:
    """One session of the scripted agent through stretto-proxy; the path of its log."""
    context = workdir / f"context-{len(list(workdir.iterdir()))}.jsonl"
    context.write_text("")
    before = set(logs.glob("*.jsonl")) if logs.exists() else set()
    command = [
        str(PROXY),
        "--record",
        str(logs),
        "--domain",
        "notes",
        "--agent-model",
        AGENT_MODEL,
        "--context",
        str(context),
        "--",
        "node",
        str(FILESYSTEM_SERVER),
        str(NOTES),
    ]
    with StdioClient(command, context_file=context) as agent:
        agent.initialize()
        agent.list_tools()
        agent.say("user", task.question)
        found = agent.call_tool("search_files", {"path": str(NOTES), "pattern": task.pattern})
        paths = sorted(line for line in result_text(found).splitlines() if line.startswith("/"))
        summaries = []
        for path in paths[: task.reads]:
            text = result_text(agent.call_tool("read_text_file", {"path": path}))
            summaries.append(text.strip().splitlines()[-1])
        agent.say("assistant", " ".join(summaries) or "I found nothing on that.")
        status = agent.close()
    if status != 0:
        raise SystemExit(f"walkthrough: stretto-proxy exited with {status}:\n{agent.stderr_text}")
    (log,) = set(logs.glob("*.jsonl")) - before
    return log


def check(condition: bool, what: str) -> None:
    if not condition:
        raise SystemExit(f"walkthrough: FAILED: {what}")
    print(f"  ok  {what}")


def record(home: Path) -> list[Path]:
    logs = home / "logs" / "notes"
    print(f"Recording {len(TRAINING)} sessions of the scripted agent into {logs}")
    recorded = []
    with tempfile.TemporaryDirectory(prefix="stretto-walkthrough-") as tmp:
        for task in TRAINING:
            log = run_session(task, logs, Path(tmp))
            episode = read_episode(log)
            calls = [c.name for c in episode.calls()]
            expected = ["search_files"] + ["read_text_file"] * task.reads
            check(calls == expected, f"{task.question!r}: {len(calls)} calls, as planned")
            recorded.append(log)
    return recorded


def stretto(home: Path, *args: str) -> str:
    done = subprocess.run(
        [str(STRETTO), *args, "--home", str(home)], capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"walkthrough: stretto {args[0]} failed:\n{done.stderr}")
    return done.stdout


def ingest(home: Path, logs: list[Path]) -> None:
    print(f"\nIngesting the logs into the warehouse under {home / 'warehouse'}")
    print("  " + stretto(home, "ingest").strip())
    query = (
        "SELECT count(DISTINCT session) AS sessions, count(*) AS calls, "
        "count(*) FILTER (WHERE tool = 'read_text_file') AS reads FROM calls "
        f"WHERE session IN ({', '.join(repr(p.stem) for p in logs)})"
    )
    (counts,) = json.loads(stretto(home, "sql", query, "--format", "json"))
    planned_reads = sum(task.reads for task in TRAINING)
    check(
        counts
        == {"sessions": len(logs), "calls": len(logs) + planned_reads, "reads": planned_reads},
        f"the warehouse holds the {len(logs)} sessions and their {counts['calls']} calls",
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", help="STRETTO_HOME (default $STRETTO_HOME, else ~/.stretto)")
    args = parser.parse_args()
    if not FILESYSTEM_SERVER.exists():
        print(f"walkthrough: {FILESYSTEM_SERVER} is missing; run `make setup`", file=sys.stderr)
        return 2
    home = home_dir(args.home)
    logs = record(home)
    print(f"\nstretto: recorded {len(logs)} sessions in {logs[0].parent}")
    for log in logs:
        print(f"  {log}")
    ingest(home, logs)
    print(f'\nQuery them: {STRETTO} sql --home {home} "SELECT * FROM calls LIMIT 5"')
    return 0


if __name__ == "__main__":
    sys.exit(main())
