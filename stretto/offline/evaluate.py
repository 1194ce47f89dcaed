"""`stretto evaluate`: what other rules would have done, estimated from exploring flow logs
(../shared/spec/algorithms.md §14; docs/formats.md "Labelled decisions" and "Evaluation").

Two steps:

1. **Labelling.** Each decision line a proxy wrote with `--flow-explore` carries every option
   the site offered (its probability, habit probability, binding chance and bound arguments)
   and the propensity of what it took. Each option is labelled from the session log: *used*
   when the agent itself later makes that very call (same tool, every bound argument equal by
   value text) before its next write and it was not made already; a *detour* otherwise; the
   *turn* it would have saved (1 / the calls of the agent's turn that made it); and whether it
   was the agent's very *next* call.
2. **Estimation.** A target rule (decider × threshold) is re-run on the logged options; its
   value over the logged decisions — lookups, used, detours, turns saved; handing back is
   worth zero — is estimated per site and in total with the labels of every option
   (`labelled`), a reward model (`direct`), and the importance-weighted estimators that need
   only the taken option's label: IPS, SNIPS, DR, SNDR and Switch-DR. Each comes with weight
   diagnostics and 95% intervals (normal, and bootstrap over sessions). A weighted estimate
   whose effective sample size is under `min_ess` is refused.

numpy is imported by the functions that need it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stretto.logs.episode import Assistant, call_id_text, episode_from_log
from stretto.logs.sessionlog import read_session_log
from stretto.logs.toollist import WRITE
from stretto.model.binding import value_text
from stretto.model.decide import Decider, Option, theta_text

METRICS = ("lookups", "used", "detours", "turns")
ESTIMATORS = ("logged", "labelled", "direct", "ips", "snips", "dr", "sndr", "switch_dr")
WEIGHTED = ("ips", "snips", "dr", "sndr", "switch_dr")
NAMES = {
    "logged": "logged (what was taken)",
    "labelled": "labelled (every option's label)",
    "direct": "direct method (reward model)",
    "ips": "IPS",
    "snips": "SNIPS",
    "dr": "doubly robust",
    "sndr": "self-normalized DR",
    "switch_dr": "Switch-DR",
}
DEFAULT_MODEL = (1.0, 0.0, 1.0, 0.0)  # a lookup nobody saw taken: made, not used
DEFAULT_MIN_ESS = 10.0
DEFAULT_SWITCH_TAU = 20.0
DEFAULT_BOOTSTRAP = 1000
Z95 = 1.959963984540054
TOLERANCE = 1e-9
UNKNOWN_VARIANCE = 0.25  # a 0–1 value's largest variance, for a model mean from one record


class EvaluateError(ValueError):
    """Input evaluate cannot use; the message names the file (and line)."""


# --- reading and labelling ----------------------------------------------------------------


@dataclass
class Labelled:
    """The labelled decisions of a folder of served sessions."""

    folder: str
    sessions: int  # session logs with a flow log
    rows: list[dict]
    domain: str
    logging_decider: str | None  # reach or habit, from the logged options; None: no options
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
    from stretto.progress import Progress

    folder = Path(folder)
    if not folder.is_dir():
        raise EvaluateError(f"{folder}: not a directory of session and flow logs")
    flow_logs = sorted(folder.glob("*.flow.jsonl"))
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
        session_log = flow_log.with_name(flow_log.name[: -len(".flow.jsonl")] + ".jsonl")
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
    out = []
    for number, text in enumerate(path.read_text(encoding="utf-8").split("\n"), start=1):
        if not text.strip():
            continue
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise EvaluateError(f"{path}:{number}: not JSON ({exc})") from None
        if not isinstance(value, dict):
            raise EvaluateError(f"{path}:{number}: a flow log line must be a JSON object")
        out.append((number, value))
    return out


def _call_lines(log) -> dict[tuple[int, int], tuple[int, bool]]:
    """For each tools/call (by its key), the log line of its first response and whether that
    response was a result (not a JSON-RPC error) — as the episode reader pairs them."""
    pending: dict[str, tuple[int, int]] = {}
    answered: dict[tuple[int, int], tuple[int, bool]] = {}
    for line in log.lines:
        if not line.is_json or line.sender == "context":
            continue
        value = line.message
        for index, message in enumerate(value if isinstance(value, list) else [value]):
            if not isinstance(message, dict):
                continue
            method = message.get("method")
            if line.sender in ("client", "proxy") and method == "tools/call":
                params = message.get("params")
                if message.get("id") is not None and isinstance(params, dict):
                    if isinstance(params.get("name"), str):
                        pending[call_id_text(message["id"])] = (line.number, index)
            elif line.sender in ("server", "proxy") and method is None and "id" in message:
                if "result" in message or "error" in message:
                    key = pending.pop(call_id_text(message["id"]), None)
                    if key is not None:
                        answered[key] = (line.number, "result" in message)
    return answered


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
    answered = _call_lines(log)
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
        view = _exploration(entry, where)
        after = call_id_text(entry.get("after"))
        followed = [c for c in agent_calls if c.id == after and answered.get(c.key, (0, 0))[1]]
        if not followed:
            raise EvaluateError(
                f"{where}: `after` {json.dumps(entry.get('after'))} names no answered call of "
                f"the agent in {session_log.name}: the flow log and the session log do not match"
            )
        call = followed[min(runs_done.get(after, 0), len(followed) - 1)]
        answer_line = answered[call.key][0]
        earlier = [(c.name, c.arguments) for c in calls if c.key[0] < answer_line]
        earlier += made_in_run.get(after, [])
        later = [c for c in agent_calls if c.key[0] > answer_line]
        labels = [_label(option, earlier, later, kind_of, turn_size) for option in view["options"]]
        row = labelled_row(entry, labels, where)
        row.update(session=episode.id, file=str(flow_log), line=number)
        rows.append(row)
        if row["executed"]:
            made_in_run.setdefault(after, []).append((entry["tool"], entry.get("arguments") or {}))
    return rows, skipped, episode.domain, warning


def _label(option: dict, earlier, later, kind_of: dict, turn_size: dict) -> dict:
    arguments = option["arguments"]
    none = {"used": False, "detour": False, "turn": 0.0, "next": False}
    if arguments is None:
        return none  # it does not bind: the flow could not have made it
    wanted = {k: value_text(v) for k, v in arguments.items()}

    def same(name: str, args: dict) -> bool:
        return name == option["tool"] and all(
            value_text(args.get(k)) == v for k, v in wanted.items()
        )

    if not any(same(name, args) for name, args in earlier):
        for position, call in enumerate(later):
            if same(call.name, call.arguments):
                return {
                    "used": True,
                    "detour": False,
                    "turn": 1.0 / turn_size.get(call.key, 1),
                    "next": position == 0,
                }
            if kind_of.get(call.name) == WRITE:
                break
    return {**none, "detour": True}


def _exploration(entry: dict, where: str) -> dict:
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
        if arguments is not None and (
            not isinstance(arguments, dict) or not isinstance(binding, int | float)
        ):
            raise EvaluateError(
                f"{where}: field `{field_name}`: bound arguments need an object and a binding "
                "chance"
            )
        habit = option.get("habit")
        options.append(
            {
                "tool": option["tool"],
                "p": float(p),
                "habit": None if habit is None else float(habit),
                "binding": None if arguments is None else float(binding),
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
    view = _exploration(entry, where)
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
    return {
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


def _logging_decider(rows: list[dict]) -> str | None:
    """habit when every logged option's p is its habit probability, else reach."""
    options = [o for r in rows for o in r["options"]]
    if not options:
        return None
    return "habit" if all(o["p"] == o["habit"] for o in options) else "reach"


# --- targets ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    decider: str  # reach | habit
    threshold: float

    @property
    def name(self) -> str:
        return f"{self.decider}@{theta_text(self.threshold)}"


def targets(
    labelled: Labelled, deciders: list[str] | None, thresholds: list[float]
) -> list[Target]:
    """Every decider × threshold asked for; no decider given: the one the logs were made
    with."""
    chosen = deciders or [labelled.logging_decider or "reach"]
    return [Target(d, t) for d in dict.fromkeys(chosen) for t in thresholds]


def target_action(row: dict, target: Target) -> int | None:
    """The option the target rule takes at a labelled decision (None: hand back), by the
    decide module's own rules on the logged options."""
    habit = target.decider == "habit"
    options = [
        Option(
            o["tool"],
            o["habit"] if habit else o["p"],
            o["habit"],
            o["binding"],
            o["arguments"],
            o["unbound"],
        )
        for o in row["options"]
    ]
    rule = Decider.habit_rule if habit else Decider.reach_rule
    decision = rule(options, target.threshold)
    if decision.action != "lookup":
        return None
    return [o.tool for o in options].index(decision.tool)


def check_targets(labelled: Labelled, targets: list[Target]) -> None:
    for target in targets:
        if target.decider not in ("reach", "habit"):
            raise EvaluateError(f"unknown decider {target.decider!r} (reach or habit)")
        if target.decider == "reach" and labelled.logging_decider == "habit":
            raise EvaluateError(
                f"{labelled.folder}: the logs were made with the habit decider; their options "
                "carry no reach probabilities (evaluate --decider habit)"
            )
        if target.decider == "habit":
            for row in labelled.rows:
                if any(o["habit"] is None for o in row["options"]):
                    raise EvaluateError(
                        f"{row['file']}:{row['line']}: an option without its habit probability"
                    )


def values(label: dict) -> tuple[float, float, float, float]:
    """[lookups, used, detours, turns] of a lookup with this label."""
    return (1.0, float(label["used"]), float(label["detour"]), float(label["turn"]))


# --- estimation ---------------------------------------------------------------------------


class _Groups:
    """Sums over the records of each group (ids < 0 are left out), for many weightings."""

    def __init__(self, ids, k: int) -> None:
        import numpy as np

        keep = np.flatnonzero(ids >= 0)
        self.order = keep[np.argsort(ids[keep], kind="stable")]
        self.k = k
        g = ids[self.order]
        self.starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]]) if len(g) else g
        self.ids = g[self.starts] if len(g) else g

    def sum(self, x):
        """x: (b, N, ...) -> (b, k, ...)"""
        import numpy as np

        out = np.zeros((x.shape[0], self.k) + x.shape[2:])
        if len(self.order):
            out[:, self.ids] = np.add.reduceat(x[:, self.order], self.starts, axis=1)
        return out


class _Prepared:
    """One target's records as arrays."""

    def __init__(self, rows: list[dict], target: Target, sites: list[str], sessions: list[str]):
        import numpy as np

        n = len(rows)
        site_index = {s: i for i, s in enumerate(sites)}
        session_index = {s: i for i, s in enumerate(sessions)}
        st_keys: dict[tuple[str, str], int] = {}
        t_keys: dict[str, int] = {}
        for row in rows:
            if row["taken"] is not None:
                tool = row["options"][row["taken"]]["tool"]
                st_keys.setdefault((row["site"], tool), len(st_keys))
                t_keys.setdefault(tool, len(t_keys))
        self.n = n
        self.site = np.array([site_index[r["site"]] for r in rows], dtype=np.int64)
        self.session = np.array([session_index[r["session"]] for r in rows], dtype=np.int64)
        self.look = np.zeros(n)
        self.match = np.zeros(n)
        self.w = np.zeros(n)
        self.rho = np.zeros(n)
        self.unsupported = np.zeros(n)
        self.y = np.zeros((n, 4))
        self.ya = np.zeros((n, 4))
        self.k_taken_st = np.full(n, -1, dtype=np.int64)
        self.k_taken_t = np.full(n, -1, dtype=np.int64)
        self.k_act_st = np.full(n, -1, dtype=np.int64)
        self.k_act_t = np.full(n, -1, dtype=np.int64)
        for i, row in enumerate(rows):
            taken, act = row["taken"], target_action(row, target)
            if taken is not None:
                tool = row["options"][taken]["tool"]
                self.y[i] = values(row["labels"][taken])
                self.k_taken_st[i] = st_keys[(row["site"], tool)]
                self.k_taken_t[i] = t_keys[tool]
            if act is None:
                continue  # the target hands back: worth zero, known exactly
            tool = row["options"][act]["tool"]
            self.look[i] = 1.0
            self.ya[i] = values(row["labels"][act])
            self.k_act_st[i] = st_keys.get((row["site"], tool), -1)
            self.k_act_t[i] = t_keys.get(tool, -1)
            mu = row["options"][act]["propensity"]
            self.rho[i] = 1.0 / mu if mu > 0 else math.inf
            self.unsupported[i] = float(mu <= 0)
            if act == taken:
                self.match[i] = 1.0
                self.w[i] = 1.0 / max(row["propensity"], 1e-12)
        self.k_st, self.k_t = max(1, len(st_keys)), max(1, len(t_keys))
        self.n_sites = len(sites)
        self.g_site = _Groups(self.site, self.n_sites)
        self.g_taken_st = _Groups(self.k_taken_st, self.k_st)
        self.g_taken_t = _Groups(self.k_taken_t, self.k_t)


def _model(p: _Prepared, weights):
    """The reward model at each record's target action, fitted with these record weights:
    the mean values of that tool where it was taken at that site, else anywhere, else the
    default. Returns (b, N, 4) (zero where the target hands back) and which source each look
    used: its site key, K_st + its tool key, or -1 for the default."""
    import numpy as np

    wy = weights[:, :, None] * p.y[None]
    cnt_st, sum_st = p.g_taken_st.sum(weights), p.g_taken_st.sum(wy)
    cnt_t, sum_t = p.g_taken_t.sum(weights), p.g_taken_t.sum(wy)
    ist, it = np.maximum(p.k_act_st, 0), np.maximum(p.k_act_t, 0)
    c1 = np.where(p.k_act_st >= 0, cnt_st[:, ist], 0.0)
    c2 = np.where(p.k_act_t >= 0, cnt_t[:, it], 0.0)
    m1 = sum_st[:, ist] / np.maximum(c1, 1e-300)[:, :, None]
    m2 = sum_t[:, it] / np.maximum(c2, 1e-300)[:, :, None]
    default = np.array(DEFAULT_MODEL)
    m = np.where((c1 > 0)[:, :, None], m1, np.where((c2 > 0)[:, :, None], m2, default))
    m = m * p.look[None, :, None]
    source = np.where(c1 > 0, ist, np.where(c2 > 0, p.k_st + it, -1))
    return m, np.where(p.look[None] > 0, source, -1)


def _sums(p: _Prepared, weights, tau: float):
    """Every estimator per site and in total for each row of `weights` (b, N):
    ({estimator: (b, S+1, 4)}, {diagnostic sum: (b, S+1)}); index S is the total."""
    import numpy as np

    m, _ = _model(p, weights)
    w = p.w[None, :, None]
    resid = w * (p.y[None] - m)
    switch = (p.rho <= tau)[None, :, None] * resid
    per_record = np.concatenate(
        [
            np.broadcast_to(p.y[None], m.shape),
            np.broadcast_to(p.ya[None], m.shape),
            m,
            np.broadcast_to((p.w[:, None] * p.y)[None], m.shape),
            resid,
            switch,
            np.broadcast_to(
                np.stack([p.w, p.w**2, p.look, p.match, p.unsupported], axis=1)[None],
                (m.shape[0], p.n, 5),
            ),
        ],
        axis=2,
    )
    per_site = p.g_site.sum(weights[:, :, None] * per_record)
    s = np.concatenate([per_site, per_site.sum(axis=1, keepdims=True)], axis=1)
    logged, labelled, direct, ips, dr_resid, switch_resid = (
        s[:, :, 4 * j : 4 * j + 4] for j in range(6)
    )
    sum_w, sum_w2, looks, matched, unsupported = (s[:, :, 24 + j] for j in range(5))
    scale = np.where(sum_w > 0, looks / np.where(sum_w > 0, sum_w, 1.0), 0.0)[:, :, None]
    estimates = {
        "logged": logged,
        "labelled": labelled,
        "direct": direct,
        "ips": ips,
        "snips": ips * scale,
        "dr": direct + dr_resid,
        "sndr": direct + dr_resid * scale,
        "switch_dr": direct + switch_resid,
    }
    diagnostics = {
        "sum_w": sum_w,
        "sum_w2": sum_w2,
        "looks": looks,
        "matched": matched,
        "unsupported": unsupported,
    }
    return estimates, diagnostics


def _bootstrap(p: _Prepared, n_sessions: int, draws: int, seed: int, tau: float):
    """Percentile 95% intervals over `draws` resamplings of whole sessions:
    {estimator: (2, S+1, 4)}."""
    import numpy as np

    rng = np.random.default_rng(seed)
    counts = rng.multinomial(n_sessions, np.full(n_sessions, 1.0 / n_sessions), size=draws)
    chunk = max(1, 100_000 // max(1, p.n))
    collected: dict[str, list] = {name: [] for name in ESTIMATORS}
    for start in range(0, draws, chunk):
        weights = counts[start : start + chunk][:, p.session].astype(float)
        estimates, _ = _sums(p, weights, tau)
        for name, value in estimates.items():
            collected[name].append(value)
    return {
        name: np.percentile(np.concatenate(parts, axis=0), [2.5, 97.5], axis=0)
        for name, parts in collected.items()
    }


def _analytic_se(p: _Prepared, point: dict, diag: dict, tau: float):
    """Standard errors from the variance of each record's term (its influence on the
    estimate), per site and in total: {estimator: (S+1, 4)}; NaN with fewer than 2 records.
    The direct method's adds the reward model's own variance."""
    import numpy as np

    ones = np.ones((1, p.n))
    m, source = _model(p, ones)
    m, source = m[0], source[0]
    resid = p.w[:, None] * (p.y - m)
    # the model's variance per source: that of the values it averaged, over their count
    keys = p.k_st + p.k_t
    by_key = np.concatenate([p.k_taken_st, np.where(p.k_taken_t >= 0, p.k_st + p.k_taken_t, -1)])
    ys = np.concatenate([p.y, p.y])[by_key >= 0]
    by_key = by_key[by_key >= 0]
    counts = np.bincount(by_key, minlength=keys)
    sums = np.stack([np.bincount(by_key, ys[:, j], minlength=keys) for j in range(4)], 1)
    squares = np.stack([np.bincount(by_key, ys[:, j] ** 2, minlength=keys) for j in range(4)], 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        var = (squares - sums**2 / counts[:, None]) / (counts[:, None] - 1)
    var = np.where(counts[:, None] >= 2, np.maximum(var, 0.0), UNKNOWN_VARIANCE)
    var[:, 0] = 0.0  # a lookup is always one lookup
    model_var = np.where(counts[:, None] > 0, var / np.maximum(counts, 1)[:, None], 0.0)

    out = {name: np.full((p.n_sites + 1, 4), np.nan) for name in ESTIMATORS}
    for scope in range(p.n_sites + 1):
        inside = np.ones(p.n, bool) if scope == p.n_sites else p.site == scope
        n = int(inside.sum())
        if n < 2:
            continue
        look, w, y = p.look[inside], p.w[inside], p.y[inside]
        mm, rr = m[inside], resid[inside]
        sum_w, looks = diag["sum_w"][0, scope], diag["looks"][0, scope]
        scale = looks / sum_w if sum_w > 0 else 0.0
        ratio = point["snips"][0, scope] / looks if looks > 0 else np.zeros(4)
        shift = (
            (point["sndr"][0, scope] - point["direct"][0, scope]) / looks
            if looks > 0
            else np.zeros(4)
        )
        terms = {
            "labelled": p.ya[inside],
            "direct": mm,
            "ips": w[:, None] * y,
            "snips": look[:, None] * ratio + scale * w[:, None] * (y - ratio),
            "dr": mm + rr,
            "sndr": mm + look[:, None] * shift + scale * (rr - w[:, None] * shift),
            "switch_dr": mm + (p.rho[inside] <= tau)[:, None] * rr,
        }
        for name, phi in terms.items():
            variance = n * phi.var(axis=0, ddof=1)
            if name == "direct":
                used = source[inside]
                per_source = np.bincount(used[used >= 0], minlength=keys).astype(float)
                variance = variance + (per_source[:, None] ** 2 * model_var).sum(axis=0)
            out[name][scope] = np.sqrt(variance)
    return out


def evaluate(
    labelled: Labelled,
    targets: list[Target],
    *,
    min_ess: float = DEFAULT_MIN_ESS,
    switch_tau: float = DEFAULT_SWITCH_TAU,
    bootstrap: int = DEFAULT_BOOTSTRAP,
    seed: int = 0,
) -> list[dict]:
    """One result per target (docs/formats.md §5, "Evaluation")."""
    check_targets(labelled, targets)
    rows = labelled.rows
    sites = sorted({r["site"] for r in rows})
    sessions = sorted({r["session"] for r in rows})
    settings = {
        "folder": labelled.folder,
        "sessions": labelled.sessions,
        "decisions": len(rows),
        "explored": labelled.explored,
        "logging_decider": labelled.logging_decider,
        "epsilon": sorted({r["epsilon"] for r in rows}),
        "min_ess": min_ess,
        "switch_tau": switch_tau,
        "bootstrap": bootstrap,
        "seed": seed,
    }
    results = []
    for target in targets:
        p = _Prepared(rows, target, sites, sessions)
        results.append(_result(p, target, sites, sessions, settings, min_ess, switch_tau, seed))
    return results


def _result(p, target, sites, sessions, settings, min_ess, tau, seed) -> dict:
    import numpy as np

    point, diag = _sums(p, np.ones((1, p.n)), tau)
    se = _analytic_se(p, point, diag, tau) if p.n else {}
    boot = (
        _bootstrap(p, len(sessions), settings["bootstrap"], seed, tau)
        if settings["bootstrap"] > 0 and p.n
        else None
    )
    max_w = np.zeros(p.n_sites + 1)
    decisions = np.zeros(p.n_sites + 1, dtype=int)
    for i in range(p.n):
        max_w[p.site[i]] = max(max_w[p.site[i]], p.w[i])
        decisions[p.site[i]] += 1
    max_w[-1] = p.w.max() if p.n else 0.0
    decisions[-1] = p.n

    def metrics(vector) -> dict:
        return {name: float(v) for name, v in zip(METRICS, vector, strict=True)}

    def interval(low, high) -> dict:
        return {name: [float(a), float(b)] for name, a, b in zip(METRICS, low, high, strict=True)}

    def scope(j: int) -> dict:
        sum_w, sum_w2 = float(diag["sum_w"][0, j]), float(diag["sum_w2"][0, j])
        looks = int(round(diag["looks"][0, j]))
        unsupported = int(round(diag["unsupported"][0, j]))
        ess = sum_w**2 / sum_w2 if sum_w2 > 0 else 0.0
        refusal = (
            f"effective sample size {ess:.1f} is under {min_ess:g} (--min-ess)"
            if looks > 0 and ess < min_ess
            else None
        )
        out: dict[str, Any] = {
            "decisions": int(decisions[j]),
            "looks": looks,
            "matched": int(round(diag["matched"][0, j])),
            "unsupported": unsupported,
            "unsupported_share": unsupported / looks if looks else 0.0,
            "ess": ess,
            "ess_share": ess / looks if looks else 0.0,
            "max_weight": float(max_w[j]),
            "sum_weights": sum_w,
            "refused": refusal is not None,
            "refusal": refusal,
        }
        out["se"], out["intervals"] = {}, {}
        for name in ESTIMATORS:
            refused = refusal is not None and name in WEIGHTED
            out[name] = None if refused else metrics(point[name][0, j])
            if name == "logged":
                continue
            error = se[name][j] if se else None
            known = not refused and error is not None and not np.isnan(error).any()
            out["se"][name] = metrics(error) if known else None
            out["intervals"][name] = (
                None
                if refused
                else {
                    "analytic": interval(
                        point[name][0, j] - Z95 * error, point[name][0, j] + Z95 * error
                    )
                    if known
                    else None,
                    "bootstrap": interval(boot[name][0, j], boot[name][1, j])
                    if boot is not None
                    else None,
                }
            )
        out["ips_se"], out["dr_se"] = out["se"]["ips"], out["se"]["dr"]
        return out

    site_results = {site: scope(j) for j, site in enumerate(sites)}
    ordered = sorted(site_results, key=lambda s: (-site_results[s]["decisions"], s))
    return {
        "target": {
            "name": target.name,
            "decider": target.decider,
            "habit": target.decider == "habit",
            "threshold": target.threshold,
        },
        "settings": settings,
        "total": scope(p.n_sites),
        "sites": {site: site_results[site] for site in ordered},
    }


# --- reports ------------------------------------------------------------------------------


def _number(value: float) -> str:
    return f"{value:.1f}" if abs(value) < 1000 else f"{value:.0f}"


def _cell(estimates: dict, name: str, metric: str) -> str:
    value = estimates[name]
    if value is None:
        return "refused"
    text = _number(value[metric])
    bounds = estimates["intervals"].get(name) or {}
    parts = [
        f"[{_number(b[metric][0])}, {_number(b[metric][1])}]"
        for b in (bounds.get("analytic"), bounds.get("bootstrap"))
        if b is not None
    ]
    return " ".join([text, *parts])


def markdown(results: list[dict]) -> str:
    if not results:
        return "# Evaluation\n\nNo targets.\n"
    s = results[0]["settings"]
    epsilon = ", ".join(f"{e:g}" for e in s["epsilon"]) or "-"
    out = [
        "# Evaluation",
        "",
        f"{s['decisions']} decisions in {s['sessions']} sessions, logged by the "
        f"{s['logging_decider'] or 'unknown'} decider exploring at ε = {epsilon} "
        f"({s['explored']} explored).",
        "",
        "Values are totals over these decisions: the lookups a rule would make, those the agent "
        "made itself before its next write (used), the others (detours), and the turns they "
        "would have saved. Intervals: 95%, normal then bootstrap over sessions "
        f"({s['bootstrap']} draws). Weighted estimates need an effective sample size of "
        f"{s['min_ess']:g}; Switch-DR uses the model where a weight exceeds {s['switch_tau']:g}.",
    ]
    for result in results:
        total = result["total"]
        out += [
            "",
            f"## {result['target']['name']}",
            "",
            f"Looks up at {total['looks']} of {total['decisions']} decisions, the logged choice "
            f"at {total['matched']}; effective sample size {total['ess']:.1f} "
            f"({total['ess_share']:.0%} of the lookups), largest weight "
            f"{total['max_weight']:.2f}, {total['unsupported']} the logging rule could not "
            f"have taken ({total['unsupported_share']:.0%}).",
        ]
        if total["refusal"]:
            out += ["", f"Weighted estimates refused: {total['refusal']}."]
        out += [
            "",
            "| estimator | lookups | used | detours | turns saved |",
            "|---|---|---|---|---|",
        ]
        for name in ESTIMATORS:
            cells = [_cell(total, name, metric) for metric in METRICS]
            out.append(f"| {NAMES[name]} | " + " | ".join(cells) + " |")
        out += [
            "",
            "| site | decisions | looks | ESS | unsupported | used (DR) | turns (DR) | note |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for site, e in result["sites"].items():
            out.append(
                f"| {site} | {e['decisions']} | {e['looks']} | {e['ess']:.1f} | "
                f"{e['unsupported']} | {_cell(e, 'dr', 'used')} | {_cell(e, 'dr', 'turns')} | "
                f"{e['refusal'] or ''} |"
            )
    return "\n".join(out) + "\n"


def decision_rows(labelled: Labelled) -> tuple[list[dict], list[dict]]:
    """The labelled decisions as two flat tables: one row per decision, one per option."""
    decisions, options = [], []
    for r in labelled.rows:
        decisions.append(
            {
                "session": r["session"],
                "line": r["line"],
                "address": r["address"],
                "after": json.dumps(r["after"]),
                "site": r["site"],
                "action": r["action"],
                "tool": r["tool"],
                "options": len(r["options"]),
                "executed": r["executed"],
                "shadow": r["shadow"],
                "epsilon": r["epsilon"],
                "explored": r["explored"],
                "propensity": r["propensity"],
                "greedy": r["greedy"],
                "greedy_inferred": r["greedy_inferred"],
            }
        )
        for i, (o, label) in enumerate(zip(r["options"], r["labels"], strict=True)):
            options.append(
                {
                    "session": r["session"],
                    "line": r["line"],
                    "site": r["site"],
                    "option": i,
                    "tool": o["tool"],
                    "p": o["p"],
                    "habit": o["habit"],
                    "binding": o["binding"],
                    "arguments": None
                    if o["arguments"] is None
                    else json.dumps(o["arguments"], sort_keys=True, ensure_ascii=False),
                    "unbound": o["unbound"],
                    "taken": r["taken"] == i,
                    "propensity": o["propensity"],
                    **label,
                }
            )
    return decisions, options


def estimate_rows(results: list[dict]) -> tuple[list[dict], list[dict]]:
    """The estimates in long form (one row per target × scope × estimator × metric) and the
    weight diagnostics (one row per target × scope); `site` null = every site."""
    estimates, diagnostics = [], []
    for result in results:
        t = result["target"]
        scopes = [(None, result["total"]), *result["sites"].items()]
        for site, e in scopes:
            head = {"target": t["name"], "decider": t["decider"], "threshold": t["threshold"]}
            diagnostics.append(
                {
                    **head,
                    "site": site,
                    **{
                        k: e[k]
                        for k in (
                            "decisions",
                            "looks",
                            "matched",
                            "unsupported",
                            "unsupported_share",
                            "ess",
                            "ess_share",
                            "max_weight",
                            "sum_weights",
                            "refusal",
                        )
                    },
                }
            )
            for name in ESTIMATORS:
                bounds = e["intervals"].get(name) or {}
                for metric in METRICS:
                    analytic, boot = bounds.get("analytic"), bounds.get("bootstrap")
                    se = (e["se"].get(name) or {}).get(metric)
                    estimates.append(
                        {
                            **head,
                            "site": site,
                            "estimator": name,
                            "metric": metric,
                            "estimate": None if e[name] is None else e[name][metric],
                            "se": se,
                            "analytic_low": analytic[metric][0] if analytic else None,
                            "analytic_high": analytic[metric][1] if analytic else None,
                            "bootstrap_low": boot[metric][0] if boot else None,
                            "bootstrap_high": boot[metric][1] if boot else None,
                            "refusal": e["refusal"]
                            if e[name] is None and name in WEIGHTED
                            else None,
                        }
                    )
    return estimates, diagnostics


# Each table's columns as name:type (pyarrow type aliases), so that empty tables keep them.
SCOPE = "target:string decider:string threshold:double site:string"
TABLE_COLUMNS = {
    "decisions": "session:string line:int64 address:string after:string site:string "
    "action:string tool:string options:int64 executed:bool shadow:bool epsilon:double "
    "explored:bool propensity:double greedy:string greedy_inferred:bool",
    "options": "session:string line:int64 site:string option:int64 tool:string p:double "
    "habit:double binding:double arguments:string unbound:string taken:bool "
    "propensity:double used:bool detour:bool turn:double next:bool",
    "estimates": f"{SCOPE} estimator:string metric:string estimate:double se:double "
    "analytic_low:double analytic_high:double bootstrap_low:double bootstrap_high:double "
    "refusal:string",
    "diagnostics": f"{SCOPE} decisions:int64 looks:int64 matched:int64 unsupported:int64 "
    "unsupported_share:double ess:double ess_share:double max_weight:double "
    "sum_weights:double refusal:string",
}


def write_tables(labelled: Labelled, results: list[dict], folder: Path | str) -> list[Path]:
    """decisions, options, estimates and diagnostics as Parquet, and the report as Markdown;
    the paths written."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    decisions, options = decision_rows(labelled)
    estimates, diagnostics = estimate_rows(results)
    written = []
    for name, rows in (
        ("decisions", decisions),
        ("options", options),
        ("estimates", estimates),
        ("diagnostics", diagnostics),
    ):
        columns = [c.split(":") for c in TABLE_COLUMNS[name].split()]
        schema = pa.schema([(column, pa.type_for_alias(kind)) for column, kind in columns])
        path = folder / f"{name}.parquet"
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
        written.append(path)
    report = folder / "report.md"
    report.write_text(markdown(results), encoding="utf-8")
    written.append(report)
    return written
