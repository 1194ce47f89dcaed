"""Labelling: each logged option of an exploring flow log, labelled from its session log
(docs/formats.md, "Labelled decisions").

A decision line written with `--flow-explore` carries every option the site offered (its
probability, habit probability, binding chance and bound arguments) and the propensity of
what was taken. Each option is labelled from the session log: *used* when the agent itself
later makes that very call before its next write and it was not made already; a *detour*
otherwise; the *turn* it would have saved (1 / the calls of the agent's turn that made it);
and whether it was the agent's very *next* call. The logged propensity is checked against
the logging rule's own (../shared/spec/algorithms.md §6.4).
"""

from __future__ import annotations

import json
from collections.abc import Container, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stretto.logs.episode import Assistant, ToolCall, ToolResult, episode_from_log
from stretto.logs.logreader import FLOW_LOG_SUFFIX, LogError, read_flow_log, session_log_of
from stretto.logs.pairing import call_id_text
from stretto.logs.sessionlog import read_session_log
from stretto.logs.toollist import WRITE
from stretto.offline.walk import BOUND, agent_made
from stretto.progress import Progress

TOLERANCE = 1e-9
# The label of an option that does not bind: the flow could not have made it.
NO_LABEL = {"used": False, "detour": False, "turn": 0.0, "next": False}


class EvaluateError(ValueError):
    """Input evaluate cannot use; the message names the file (and line)."""


@dataclass
class Labelled:
    """The labelled decisions of a folder of served sessions."""

    folder: str
    sessions: int  # session logs with a flow log
    rows: list[dict]
    domain: str
    logging_decider: str | None  # as logged (arbiter, reach, habit), else from the options
    skipped: int = 0  # decision lines with no site (the last step was not a call): no options
    warnings: list[str] = field(default_factory=list)

    @property
    def explored(self) -> int:
        return sum(r["explored"] for r in self.rows)


def label_folder(
    folder: Path | str, kinds: dict[str, str] | None = None, progress: bool | None = None
) -> Labelled:
    """Pair every `<session>.flow.jsonl` in `folder` with its `<session>.jsonl` and label the
    decisions. `kinds` (tool -> read/write/generic, e.g. a flow's manifest) says which calls
    are writes where a session's own tool listing does not. `progress`: a bar on stderr
    (default: when it is a terminal)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise EvaluateError(f"{folder}: not a directory of session and flow logs")
    flow_logs = sorted(folder.glob("*" + FLOW_LOG_SUFFIX))
    if not flow_logs:
        raise EvaluateError(
            f"{folder}: no flow logs (*.flow.jsonl); record with stretto-proxy --flow FLOW "
            "--flow-explore EPSILON"
        )
    rows: list[dict] = []
    warnings: list[str] = []
    skipped = 0
    domains: dict[str, int] = {}
    bar = Progress(len(flow_logs), "labelling", " sessions", enabled=progress)
    for flow_log in flow_logs:
        session_log = session_log_of(flow_log)
        if not session_log.is_file():
            raise EvaluateError(f"{flow_log}: no session log {session_log.name} beside it")
        lines = _read_flow_log(flow_log)
        episode_rows, episode_skipped, domain, warning = _label_session(
            flow_log, lines, session_log, kinds or {}
        )
        rows += episode_rows
        skipped += episode_skipped
        domains[domain] = domains.get(domain, 0) + 1
        if warning:
            warnings.append(warning)
        bar.advance()
    bar.close()
    return Labelled(
        folder=str(folder),
        sessions=len(flow_logs),
        rows=rows,
        domain=max(sorted(domains), key=lambda d: domains[d]),
        logging_decider=_logging_decider(rows),
        skipped=skipped,
        warnings=warnings,
    )


def _read_flow_log(path: Path) -> list[tuple[int, dict]]:
    """The flow log's lines, read strictly: a line that cannot be read, a torn last one too
    (the decisions would not all be there), is refused."""
    try:
        flow = read_flow_log(path, "strict")
    except LogError as exc:
        raise EvaluateError(str(exc)) from None
    if flow.reader.torn is not None:
        raise EvaluateError(flow.reader.torn.problem)
    return flow.entries


def _label_session(
    flow_log: Path, lines: list[tuple[int, dict]], session_log: Path, kinds: dict[str, str]
) -> tuple[list[dict], int, str, str | None]:
    log = read_session_log(session_log)
    episode = episode_from_log(log)
    listed = {name: info.kind for name, info in episode.tools.items()}
    warning = None
    if not listed and not kinds:
        warning = (
            f"{session_log}: the log has no tools/list answer and no --flow was given: "
            "no call counts as a write, so 'before the next write' runs to the session's end"
        )
    kind_of = {**kinds, **listed}  # the server's own listing wins
    writes = {name for name, kind in kind_of.items() if kind == WRITE}
    # each call's answer (its log line, and whether it was a result), as the episode paired them
    answered = {
        r.call_key: (r.answer_line, not r.refused)
        for r in episode.events
        if isinstance(r, ToolResult)
    }
    turn_size: dict[tuple[int, int], int] = {}
    for event in episode.events:
        if isinstance(event, Assistant):
            own = [c for c in event.calls if not c.by_proxy]
            for call in own:
                turn_size[call.key] = len(own)
    calls = sorted(episode.calls(), key=lambda c: c.key)
    agent_calls = [c for c in calls if not c.by_proxy]
    runs_done: dict[str, int] = {}
    made_in_run: dict[str, list[tuple[str, dict]]] = {}
    rows, skipped = [], 0
    for number, entry in lines:
        where = f"{flow_log}:{number}"
        if "run" in entry:
            key = call_id_text(entry.get("after"))
            runs_done[key] = runs_done.get(key, 0) + 1
            made_in_run.pop(key, None)
            continue
        if "address" not in entry or "action" not in entry:
            raise EvaluateError(f"{where}: neither a decision line nor a run line")
        if entry.get("site") is None:
            skipped += 1  # the last step was not a call: no options, nothing to weigh
            continue
        view = exploration(entry, where)
        after = call_id_text(entry.get("after"))
        followed = [c for c in agent_calls if c.id == after and answered.get(c.key, (0, 0))[1]]
        if not followed:
            raise EvaluateError(
                f"{where}: `after` {json.dumps(entry.get('after'))} names no answered call of "
                f"the agent in {session_log.name}: the flow log and the session log do not match"
            )
        call = followed[min(runs_done.get(after, 0), len(followed) - 1)]
        answer_line = answered[call.key][0]
        # made already: every call (the agent's or the flow's, in flight included) sent before
        # the answer the decision followed, and what this run of the flow looked up so far
        made = [(c.name, c.arguments) for c in calls if c.key[0] < answer_line]
        made += made_in_run.get(after, [])
        later = [c for c in agent_calls if c.key[0] > answer_line]
        labels = [label(option, later, writes, made, turn_size) for option in view["options"]]
        row = labelled_row(entry, labels, where)
        row.update(session=episode.id, file=str(flow_log), line=number)
        rows.append(row)
        if row["executed"]:
            made_in_run.setdefault(after, []).append((entry["tool"], entry.get("arguments") or {}))
    return rows, skipped, episode.domain, warning


def label(
    option: dict,
    later: Sequence[ToolCall],
    writes: Container[str],
    made: Iterable[tuple[str, dict]],
    turn_size: dict[tuple[int, int], int],
) -> dict:
    """One option's label {used, detour, turn, next} (docs/formats.md, "Labelled
    decisions")."""
    if option["arguments"] is None:
        return dict(NO_LABEL)
    # the one rule (docs/formats.md §1.5): bound arguments, cut at the next write, not made
    position = agent_made(
        option["tool"], option["arguments"], later, match=BOUND, writes=writes, made=made
    )
    if position is None:
        return {**NO_LABEL, "detour": True}
    return {
        "used": True,
        "detour": False,
        "turn": 1.0 / turn_size.get(later[position].key, 1),
        "next": position == 0,
    }


# --- the exploration record and its propensities -------------------------------------------


def exploration(entry: dict, where: str) -> dict:
    """The logged exploration view, as {epsilon, options, explored, propensity, greedy?}."""
    view = entry.get("explore")
    policy = entry.get("policy")  # the reference proxy's name for it
    if not isinstance(view, dict) and isinstance(policy, dict):
        view = policy
    if not isinstance(view, dict):
        raise EvaluateError(
            f"{where}: the decision line has no `explore` record (no propensities): logs "
            "without propensities are refused; record them with stretto-proxy --flow-explore "
            "EPSILON"
        )
    for name in ("epsilon", "propensity"):
        if not isinstance(view.get(name), int | float) or isinstance(view.get(name), bool):
            raise EvaluateError(f"{where}: field `explore.{name}`: expected a number")
    if not isinstance(view.get("options"), list):
        raise EvaluateError(f"{where}: field `explore.options`: expected a list")
    options = []
    for i, option in enumerate(view["options"]):
        field_name = f"explore.options[{i}]"
        if not isinstance(option, dict) or not isinstance(option.get("tool"), str):
            raise EvaluateError(f"{where}: field `{field_name}.tool`: expected a string")
        p = option.get("prob", option.get("p"))
        if not isinstance(p, int | float) or isinstance(p, bool):
            raise EvaluateError(f"{where}: field `{field_name}.prob`: expected a number")
        arguments, binding = option.get("arguments"), option.get("binding")
        chance = None
        if arguments is not None:
            if not isinstance(arguments, dict) or not isinstance(binding, int | float):
                raise EvaluateError(
                    f"{where}: field `{field_name}`: bound arguments need an object and a "
                    "binding chance"
                )
            chance = float(binding)
        habit = option.get("habit")
        options.append(
            {
                "tool": option["tool"],
                "p": float(p),
                "habit": None if habit is None else float(habit),
                "binding": chance,
                "arguments": arguments,
                "unbound": option.get("unbound"),
            }
        )
    return {
        "epsilon": float(view["epsilon"]),
        "options": options,
        "explored": bool(view.get("explored", False)),
        "propensity": float(view["propensity"]),
        "greedy": view.get("greedy", ...),  # ... = not logged (ours): inferred
    }


def logging_propensities(
    options: list[dict], greedy: str | None, epsilon: float
) -> tuple[list[float], float]:
    """The probability that the logging rule, exploring at ε, took each option and handing
    back (../shared/spec/algorithms.md §6.4, as stretto.model.decide.explore draws): the
    greedy choice 1 − ε when an alternative exists; an alternative (binds, p > 0, not greedy)
    ε·p/Σp; with no alternative or ε ≤ 0 the greedy choice 1; anything else 0."""
    alternatives = [
        o["arguments"] is not None and o["p"] > 0 and o["tool"] != greedy for o in options
    ]
    total = sum(o["p"] for o, alt in zip(options, alternatives, strict=True) if alt)
    explores = epsilon > 0 and any(alternatives)
    keep = 1.0 - epsilon if explores else 1.0
    props = [
        keep if o["tool"] == greedy else (epsilon * o["p"] / total if explores and alt else 0.0)
        for o, alt in zip(options, alternatives, strict=True)
    ]
    return props, (keep if greedy is None else 0.0)


def _greedy(view: dict, taken: int | None, where: str) -> tuple[str | None, bool]:
    """The logging rule's own choice (None: hand back), and whether it was inferred.

    Our decision lines do not name it; when the decision explored, the propensity of the
    explored option, ε·p/Σp over the alternatives, tells the greedy choice's p: Σp over every
    option that binds with p > 0, less that sum over the alternatives. (Options of equal p are
    interchangeable here: the estimates do not depend on which of them was greedy.)"""
    if view["greedy"] is not ...:
        return view["greedy"], False
    options = view["options"]
    if not view["explored"]:
        return (None if taken is None else options[taken]["tool"]), False
    if taken is None or view["propensity"] <= 0:
        raise EvaluateError(f"{where}: an explored decision must be a lookup with a propensity")
    bound = [o for o in options if o["arguments"] is not None and o["p"] > 0]
    total = sum(o["p"] for o in bound)
    greedy_p = total - view["epsilon"] * options[taken]["p"] / view["propensity"]
    scale = TOLERANCE * max(1.0, total)
    if abs(greedy_p) <= 1e3 * scale:
        return None, True
    for o in bound:
        if o["tool"] != options[taken]["tool"] and abs(o["p"] - greedy_p) <= 1e3 * scale:
            return o["tool"], True
    raise EvaluateError(
        f"{where}: field `explore.propensity`: {view['propensity']} does not fit the logged "
        "options (§6.4)"
    )


def labelled_row(entry: dict, labels: list[dict], where: str = "") -> dict:
    """A decision line with its `explore` record, and one label per option, as the row the
    estimators read (docs/formats.md, "Labelled decisions"). `where` names it in errors."""
    view = exploration(entry, where)
    options = view["options"]
    if len(labels) != len(options):
        raise EvaluateError(f"{where}: {len(labels)} labels for {len(options)} options")
    taken = None
    if entry["action"] == "lookup":
        tools = [o["tool"] for o in options]
        if entry.get("tool") not in tools:
            raise EvaluateError(
                f"{where}: the lookup {entry.get('tool')!r} is not among the logged options"
            )
        taken = tools.index(entry["tool"])
    greedy, inferred = _greedy(view, taken, where)
    props, hand_back = logging_propensities(options, greedy, view["epsilon"])
    recomputed = hand_back if taken is None else props[taken]
    if abs(recomputed - view["propensity"]) > 1e-6:
        raise EvaluateError(
            f"{where}: field `explore.propensity`: {view['propensity']} logged, but the options "
            f"give {recomputed} (§6.4)"
        )
    shadow = bool(entry.get("shadow"))
    row: dict[str, Any] = {
        "decider": entry.get("decider"),
        "address": entry["address"],
        "after": entry.get("after"),
        "site": entry["site"],
        "action": entry["action"],
        "tool": entry.get("tool") if taken is not None else None,
        "taken": taken,
        "executed": taken is not None and not shadow and not entry.get("withheld"),
        "shadow": shadow,
        "epsilon": view["epsilon"],
        "explored": view["explored"],
        "propensity": view["propensity"],
        "greedy": greedy,
        "greedy_inferred": inferred,
        "hand_back_propensity": hand_back,
        "options": [{**o, "propensity": p} for o, p in zip(options, props, strict=True)],
        "labels": labels,
    }
    return row


def _logging_decider(rows: list[dict]) -> str | None:
    """The decider the lines name (the proxy logs it) when they all name one; else habit when
    every logged option's p is its habit probability, else reach."""
    named = {r.get("decider") for r in rows}
    if len(named) == 1 and None not in named:
        return named.pop()
    options = [o for r in rows for o in r["options"]]
    if not options:
        return None
    return "habit" if all(o["p"] == o["habit"] for o in options) else "reach"
