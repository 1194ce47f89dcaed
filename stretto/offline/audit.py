"""`stretto audit`: how well a flow predicts sessions it never saw (../shared/spec/algorithms.md
§9), and how well its served scores are calibrated.

Two measures over the same decision points (the last result of each batch of results that
something followed):

- **Next step**: the decider's probabilities over the site's options, plus `other`, scored
  against what the agent did next: agreement (the likeliest option was it) and nats per
  decision (−mean log-probability).
- **Served score**: the score the proxy would act on (probability × binding chance of the
  lookup it would choose, with its real binding) against whether the agent made that very
  call before its next write: ECE and Brier, and a reliability table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from stretto.logs.episode import Assistant, Episode, ToolResult, User
from stretto.logs.steps import episode_steps
from stretto.model.binding import SessionState, value_text
from stretto.model.decide import Decider

FLOOR = 1e-6
OTHER = "other"


@dataclass
class Audit:
    decider: str
    episodes: int = 0
    decisions: list[dict] = field(default_factory=list)  # next-step scoring, one per decision
    served: list[dict] = field(default_factory=list)  # served score vs used, one per lookup

    def totals(self) -> dict:
        n = len(self.decisions)
        log_prob = sum(d["log_prob"] for d in self.decisions)
        return {
            "episodes": self.episodes,
            "decisions": n,
            "log_prob": log_prob,
            "nats_per_decision": -log_prob / n if n else 0.0,
            "agreement": sum(d["hit"] for d in self.decisions) / n if n else 0.0,
            "expected_agreement": sum(d["p_actual"] for d in self.decisions) / n if n else 0.0,
            "served": len(self.served),
            "ece": ece(self.served),
            "brier": brier(self.served),
        }

    def sites(self) -> list[dict]:
        by: dict[str, list[dict]] = {}
        for d in self.decisions:
            by.setdefault(d["site"], []).append(d)
        rows = [
            {
                "site": site,
                "decisions": len(ds),
                "agreement": sum(d["hit"] for d in ds) / len(ds),
                "nats_per_decision": -sum(d["log_prob"] for d in ds) / len(ds),
            }
            for site, ds in by.items()
        ]
        return sorted(rows, key=lambda r: (-r["decisions"], r["site"]))


def reliability(served: list[dict], bins: int = 10) -> list[dict]:
    """Per tenth of the served score: how many, their mean score, how often used."""
    rows = []
    for b in range(bins):
        inside = [s for s in served if min(bins - 1, int(s["score"] * bins)) == b]
        if inside:
            rows.append(
                {
                    "from": b / bins,
                    "decisions": len(inside),
                    "mean_score": sum(s["score"] for s in inside) / len(inside),
                    "used": sum(s["used"] for s in inside) / len(inside),
                }
            )
    return rows


def ece(served: list[dict]) -> float:
    n = len(served)
    return (
        sum(r["decisions"] / n * abs(r["mean_score"] - r["used"]) for r in reliability(served))
        if n
        else 0.0
    )


def brier(served: list[dict]) -> float:
    return sum((s["score"] - s["used"]) ** 2 for s in served) / len(served) if served else 0.0


def audit(flow: dict, episodes: list[Episode], decider: str = "habit") -> Audit:
    scorer = Decider(flow, decider)
    server = Decider(flow, None)  # what the proxy would serve: reach when the flow has it
    kinds = flow["manifest"]["tools"]
    result = Audit(scorer.kind, episodes=len(episodes))
    for episode in episodes:
        _audit_episode(episode, scorer, server, kinds, result)
    return result


def _audit_episode(
    episode: Episode, scorer: Decider, server: Decider, kinds: dict, out: Audit
) -> None:
    names = {s.call_id: s.name() for s in episode_steps(episode) if s.call_id}
    events = episode.events
    state, history = SessionState(), []
    for i, event in enumerate(events):
        if isinstance(event, User):
            state.add_user(event.text)
        elif isinstance(event, Assistant):
            for call in event.calls:
                state.add_call(call.name, call.arguments)
                history.append(names.get(call.id, call.name))
            if not event.calls:
                history.append("respond")
        elif isinstance(event, ToolResult):
            state.add_result(event.name, not event.error, event.content)
            following = events[i + 1] if i + 1 < len(events) else None
            if following is None or isinstance(following, ToolResult):
                continue
            last = (event.name, event.error)
            actual = _agents_step(following)
            probs = scorer.probabilities(history, last)
            if probs:
                out.decisions.append(_score(episode.id, scorer, probs, actual, last, kinds))
            decision = server.decide(list(history), last, state)
            if decision.tool and decision.binding is not None and decision.prob is not None:
                out.served.append(
                    {
                        "episode": episode.id,
                        "site": decision.site,
                        "tool": decision.tool,
                        "score": decision.prob * decision.binding,
                        "used": _used_before_write(
                            events[i + 1 :], decision.tool, decision.arguments or {}, kinds
                        ),
                    }
                )


def _agents_step(event) -> str | None:
    if isinstance(event, Assistant) and event.calls:
        return event.calls[0].name
    return None  # a reply, or the customer speaking


def _score(session: str, scorer: Decider, probs: dict, actual: str | None, last, kinds) -> dict:
    options = sorted(probs)
    if actual in options:
        label = actual
    elif actual is not None and kinds.get(actual) == "read":
        label = OTHER
    else:
        label = "respond"
    full = dict(probs)
    full[OTHER] = max(0.0, 1.0 - sum(probs.values()))
    floored = {k: max(v, FLOOR) for k, v in full.items()}
    total = sum(floored.values())
    normed = {k: v / total for k, v in floored.items()}
    top = max([*options, OTHER], key=lambda k: normed[k])  # first of equals
    site = last[0] + (" (error)" if last[1] else "")
    return {
        "episode": session,
        "site": site,
        "actual": label,
        "top": top,
        "p_top": normed[top],
        "p_actual": normed[label],
        "hit": top == label,
        "log_prob": math.log(normed[label]),
    }


def _used_before_write(rest: list, tool: str, arguments: dict, kinds: dict) -> bool:
    """Did the agent make this very call before its next write?"""
    wanted = {k: value_text(v) for k, v in arguments.items()}
    for event in rest:
        if isinstance(event, Assistant):
            for call in event.calls:
                if (
                    call.name == tool
                    and not call.by_proxy
                    and all(value_text(call.arguments.get(k)) == v for k, v in wanted.items())
                ):
                    return True
                if kinds.get(call.name) == "write":
                    return False
    return False


def markdown(result: Audit) -> str:
    t = result.totals()
    out = [
        f"# Audit ({result.decider} decider)",
        "",
        f"{t['episodes']} episodes, {t['decisions']} decisions scored.",
        "",
        f"- Agreement: {t['agreement']:.1%} (expected {t['expected_agreement']:.1%})",
        f"- Surprise: {t['nats_per_decision']:.3f} nats per decision "
        f"(total log-probability {t['log_prob']:.2f})",
        f"- Served scores: {t['served']} lookups the proxy would make; ECE {t['ece']:.3f}, "
        f"Brier {t['brier']:.3f}",
        "",
        "## Sites",
        "",
        "| site | decisions | agreement | nats per decision |",
        "|---|---|---|---|",
    ]
    out += [
        f"| {r['site']} | {r['decisions']} | {r['agreement']:.1%} | {r['nats_per_decision']:.3f} |"
        for r in result.sites()
    ]
    out += [
        "",
        "## Calibration of the served score",
        "",
        "| score from | lookups | mean score | used before the next write |",
        "|---|---|---|---|",
    ]
    out += [
        f"| {r['from']:.1f} | {r['decisions']} | {r['mean_score']:.2f} | {r['used']:.2f} |"
        for r in reliability(result.served)
    ]
    return "\n".join(out) + "\n"


def reliability_png(served: list[dict], path, size: int = 320) -> None:
    """A reliability diagram: the diagonal, and per tenth of the score a bar to how often the
    lookup was used; plain PNG, no plotting library."""
    import struct
    import zlib

    white, grey, blue, black = (255, 255, 255), (200, 200, 200), (60, 110, 200), (0, 0, 0)
    pixels = [[white] * size for _ in range(size)]
    margin = 20
    span = size - 2 * margin
    for i in range(span + 1):  # axes and the diagonal
        pixels[size - margin][margin + i] = black
        pixels[size - margin - i][margin] = black
        pixels[size - margin - i][margin + i] = grey
    for row in reliability(served):
        x0 = margin + int(row["from"] * span) + 2
        x1 = margin + int((row["from"] + 0.1) * span) - 2
        height = int(row["used"] * span)
        for y in range(size - margin - height, size - margin):
            for x in range(x0, x1):
                pixels[y][x] = blue
    raw = b"".join(b"\x00" + bytes(c for px in line for c in px) for line in pixels)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data))
            + kind
            + data
            + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
        )

    png = (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(raw, 9))
        + chunk(b"IEND", b"")
    )
    with open(path, "wb") as f:
        f.write(png)


def write_tables(result: Audit, folder) -> list:
    """The audit's tables as Parquet, and the reliability plot; the paths written."""
    from pathlib import Path

    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    tables = {
        "decisions": result.decisions,
        "sites": result.sites(),
        "served": result.served,
        "calibration": reliability(result.served),
        "totals": [result.totals()],
    }
    for name, rows in tables.items():
        path = folder / f"{name}.parquet"
        pq.write_table(pa.Table.from_pylist(rows) if rows else pa.table({}), path)
        written.append(path)
    plot = folder / "reliability.png"
    reliability_png(result.served, plot)
    written.append(plot)
    return written
