"""Ingest a home in process and hold the warehouse's rows up against the episode reader."""

from __future__ import annotations

import collections
import json
from collections.abc import Callable
from pathlib import Path

from assets.ingest import INGEST_ASSETS
from pipeline.run import materialize, output_metadata
from stretto.logs.episode import Assistant, read_episode
from stretto.logs.steps import episode_steps
from tests.conftest import REFERENCE_HOME
from warehouse import store
from warehouse.counts.learn import learn_flow
from warehouse.layout import Layout

DAY_MS = 86_400_000
# the reference's own shop sessions, moved to other days by put_log
SHOP = sorted((REFERENCE_HOME / "logs/shop").glob("*.jsonl"))


def learned(
    where: Layout | Path, domain: str = "shop", say: Callable[[str], None] | None = None
) -> dict:
    """The flow learned from a warehouse's `domain` alone (`where`: its layout, or a home with
    a local warehouse), stamped at time 0 and passed through JSON: two flows compare whole."""
    layout = where if isinstance(where, Layout) else Layout.at(where)
    flow = learn_flow(layout, domain, only_domain=True, now_ms=0, say=say or (lambda _: None))
    return json.loads(json.dumps(flow, sort_keys=True))


def put_log(source: Path, logs: Path, days_later: int) -> None:
    """The log with its start moved `days_later` days on (so its session lands in that day)."""
    lines = source.read_text().splitlines(keepends=True)
    header = json.loads(lines[0])
    header["started_unix_ms"] += days_later * DAY_MS
    logs.mkdir(parents=True, exist_ok=True)
    (logs / source.name).write_text(json.dumps(header) + "\n" + "".join(lines[1:]))


def ingest(home: Path, wait: float = 30.0) -> dict:
    result = materialize(INGEST_ASSETS, str(home), wait)
    assert result.success
    return output_metadata(result, "sessions")


def rows(home: Path, sql: str) -> list[dict]:
    return store.query(Layout.at(home), sql).to_pylist()


def reader_calls(path: str) -> list[tuple]:
    episode = read_episode(path)
    results = episode.results_by_key()
    out, turn = [], 0
    for event in episode.events:
        if isinstance(event, Assistant):
            for call in event.calls:
                result = results.get(call.key)
                status = "unanswered" if result is None else ("failed" if result.error else "ok")
                out.append(
                    (
                        call.id,
                        call.name,
                        call.arguments,
                        call.by_proxy,
                        turn,
                        status,
                        None if result is None else result.content,
                        episode.sent_after_results[call.id],
                        call.cancelled,
                    )
                )
            turn += 1
    return out


def mismatches(home: Path) -> list[str]:
    """Sessions where the warehouse and the episode reader disagree (calls, turns, steps)."""
    import json

    calls = collections.defaultdict(list)
    for c in rows(home, "SELECT * FROM calls ORDER BY session, sent_seq, sent_sub"):
        calls[c["session"]].append(
            (
                c["call_id"],
                c["tool"],
                json.loads(c["arguments"]),
                c["by_proxy"],
                c["turn"],
                c["status"],
                c["result_text"],
                c["sent_after_results"],
                c["cancelled"],
            )
        )
    steps = collections.defaultdict(list)
    for s in rows(home, "SELECT * FROM steps ORDER BY session, step"):
        steps[s["session"]].append((s["action"], s["outcome"], s["call_id"], s["by_proxy"]))
    bad = []
    for session in rows(home, "SELECT session, file, agent_model, domain FROM sessions"):
        path = home / session["file"]  # stored relative to the home
        episode = read_episode(path)
        if (episode.agent_model, episode.domain) != (session["agent_model"], session["domain"]):
            bad.append(f"{session['session']}: agent model or domain")
        if reader_calls(str(path)) != calls[session["session"]]:
            bad.append(f"{session['session']}: calls")
        mine = [(s.action, s.outcome, s.call_id, s.by_proxy) for s in episode_steps(episode)]
        if mine != steps[session["session"]]:
            bad.append(f"{session['session']}: steps")
    return bad
