"""The flow file: written for people first (docs/formats.md §3).

Histories and actions are readable names, keys are sorted, lists are in a fixed order, and
the file is one line: two flows learned from the same logs differ only in their time. The
loader validates a flow against stretto/model/flow.schema.json and refuses a bad one naming the
field.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Collection, Mapping
from functools import cache
from pathlib import Path
from typing import Any

from stretto import __version__
from stretto.home import write_private
from stretto.model.binding import PathError, binding_paths, compile_path
from stretto.model.habit import START, BackoffModel
from stretto.model.program import STANDARD_PROGRAM, is_standard
from stretto.vocabulary import RESPOND

FLOW_VERSION = 1
# A flow or manifest nests a dozen levels; anything far deeper is refused before any code
# (the schema's validator, the review) recurses into it.
MAX_DEPTH = 64
SCHEMA_PATH = Path(__file__).with_name("flow.schema.json")


class FlowError(ValueError):
    """A flow (or manifest) that cannot be used; the message names the file and field."""


def _levels(
    counts: Mapping[tuple[str, ...], Mapping[str, float]], totals: Mapping[tuple[str, ...], float]
) -> list[list[dict]]:
    levels: list[list[dict]] = [[], [], []]
    for history in sorted(counts, key=lambda h: (len(h), h)):
        levels[len(history)].append(
            {
                "history": list(history),
                "counts": {a: counts[history][a] for a in sorted(counts[history])},
                "total": totals[history],
            }
        )
    # A history the reach counts never saw an action after still has its total.
    for history in sorted(set(totals) - set(counts), key=lambda h: (len(h), h)):
        levels[len(history)].append(
            {"history": list(history), "counts": {}, "total": totals[history]}
        )
        levels[len(history)].sort(key=lambda e: e["history"])
    return levels


def build_flow(
    *,
    domain: str,
    kinds: Mapping[str, str],
    docs: Mapping[str, dict],
    contracts: Mapping[str, str | None],
    habit: Mapping,
    reach: Mapping,
    sites: Mapping[tuple[str, bool], Mapping[str, int]],
    alpha_fit: dict,
    sources: list[str],
    episodes: int,
    steps: int,
    bindings: dict | None = None,
    now_ms: int | None = None,
    arbiter: dict | None = None,
    read_by_operator: Collection[str] = (),
) -> dict:
    """A flow from its counts (warehouse.counts.learn.Counts' parts) and the manifest;
    `arbiter`: its arbiter part (stretto.oracle.arbiter.Arbiter.to_json()), if it has one;
    `read_by_operator`: the reads only the operator's manifest calls reads."""
    totals = {h: float(sum(c.values())) for h, c in habit.items()}
    extra = {"arbiter": arbiter} if arbiter is not None else {}
    step_tools = {a for c in habit.values() for a in c if a != RESPOND}
    actions = [RESPOND, *sorted(set(kinds) | step_tools)]
    alpha = alpha_fit["alpha"]
    return {
        "stretto_flow": FLOW_VERSION,
        "provenance": {
            "stretto": __version__,
            "sources": sorted(set(sources)),
            "habit_episodes": episodes,
            "steps": steps,
            "alpha_fit": alpha_fit,
            "compiled_unix_ms": int(time.time() * 1000) if now_ms is None else now_ms,
        },
        "manifest": {
            "domain": domain,
            "tools": {t: kinds[t] for t in sorted(kinds)},
            "docs": {t: docs[t] for t in sorted(docs)},
            **({"read_by_operator": sorted(read_by_operator)} if read_by_operator else {}),
        },
        "actions": actions,
        "habit": {"order": 2, "alpha": alpha, "start": START, "levels": _levels(habit, totals)},
        "reach": {"order": 2, "alpha": alpha, "start": START, "levels": _levels(reach, totals)},
        "sites": {
            "reads": sorted(t for t, k in kinds.items() if k == "read"),
            "next": [
                {
                    "after": after,
                    "failed": failed,
                    "lookups": {
                        t: sites[(after, failed)][t] for t in sorted(sites[(after, failed)])
                    },
                }
                for after, failed in sorted(sites)
            ],
        },
        "bindings": bindings or {"args": {}, "sources": [], "agreed": {}},
        "contracts": {t: c for t, c in sorted(contracts.items()) if c is not None},
        "program": STANDARD_PROGRAM,
        **extra,
    }


def dumps(flow: dict) -> str:
    """The flow as one line of JSON with sorted keys."""
    text = json.dumps(
        flow, sort_keys=True, ensure_ascii=False, separators=(",", ":"), allow_nan=False
    )
    return text + "\n"


def write_flow(flow: dict, path: str | Path) -> None:
    """Write a flow (validated, one line, sorted keys) atomically: a reader never sees half."""
    path = Path(path)
    validate(flow, str(path))
    # private whatever the umask: a new flow is 0600, one that exists keeps a mode only as far
    # as it is not wider than 0600
    mode = path.stat().st_mode & 0o600 if path.exists() else 0o600
    write_private(path, dumps(flow))
    if mode != 0o600:
        os.chmod(path, mode)


@cache
def _validator():
    import jsonschema  # proxy and `stretto --help` load this; jsonschema on validating

    schema = json.loads(SCHEMA_PATH.read_text())
    return jsonschema.Draft202012Validator(schema)


def _field(path) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(the whole flow)"


def _check_values(value: Any, source: str) -> None:
    """Refuse NaN and ±Infinity anywhere (json.loads reads them, and a NaN α or threshold
    would silently disable a flow) and nesting deeper than MAX_DEPTH, naming the field.
    Iterative: it must not recurse into what it is there to refuse."""
    pending: list[tuple[Any, tuple | None, int]] = [({"": value}, None, 0)]
    while pending:
        node, parent, depth = pending.pop()  # parent: linked (key, parent) pairs, built cheaply
        if depth > MAX_DEPTH:
            raise FlowError(
                f"{source}: field `{_where(parent)}`: nested more than {MAX_DEPTH} levels deep"
            )
        for key, item in node.items() if isinstance(node, dict) else enumerate(node):
            inside = (key, parent) if depth else None
            if isinstance(item, dict | list):
                pending.append((item, inside, depth + 1))
            elif isinstance(item, float) and not math.isfinite(item):
                word = "NaN" if math.isnan(item) else "Infinity" if item > 0 else "-Infinity"
                field = _where(inside)
                raise FlowError(f"{source}: field `{field}`: {word} is not a finite number")


def _where(where: tuple | None) -> str:
    """A field from the linked (key, parent) pairs _check_values keeps."""
    keys = []
    while where is not None:
        key, where = where
        keys.append(key)
    return _field(reversed(keys))


def validate(flow: Any, source: str = "flow") -> dict:
    """The flow if it is valid; else FlowError naming the first bad field."""
    if not isinstance(flow, dict) or "stretto_flow" not in flow:
        raise FlowError(f"{source}: this is not a stretto flow file (no `stretto_flow` field)")
    _check_values(flow, source)
    errors = sorted(_validator().iter_errors(flow), key=lambda e: list(e.absolute_path))
    if errors:
        error = errors[0]
        raise FlowError(f"{source}: field `{_field(error.absolute_path)}`: {error.message}")
    if not is_standard(flow["program"]):
        raise FlowError(
            f"{source}: field `program`: not the standard program; this stretto "
            "runs only the standard program"
        )
    for field, path in binding_paths(flow["bindings"]):
        try:
            compile_path(path)  # read once here; Rules.from_flow finds it read
        except PathError as exc:
            raise FlowError(f"{source}: field `{field}`: {exc}") from None
    return flow


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except OSError as exc:
        raise FlowError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except RecursionError:
        raise FlowError(f"{path}: nested too deeply (more than {MAX_DEPTH} levels)") from None
    except ValueError as exc:
        raise FlowError(f"{path}: not JSON ({exc})") from exc


def load_flow(path: str | Path) -> dict:
    return validate(_read_json(Path(path)), str(path))


def _model_parts(part: dict) -> tuple[dict, dict]:
    counts, totals = {}, {}
    for level in part["levels"]:
        for entry in level:
            history = tuple(entry["history"])
            counts[history] = entry["counts"]
            totals[history] = entry["total"]
    return counts, totals


def habit_model(flow: dict) -> BackoffModel:
    """P(a | history) as served (with the group layer)."""
    counts, totals = _model_parts(flow["habit"])
    return BackoffModel(
        counts, totals, flow["habit"]["alpha"], len(flow["actions"]) + 1, grouped=True
    )


def reach_model(flow: dict) -> BackoffModel:
    """R(a | history): the chance that a is made before the agent's next write."""
    counts, totals = _model_parts(flow["reach"])
    return BackoffModel(counts, totals, flow["reach"]["alpha"], len(flow["actions"]) + 1)


def load_manifest(path: str | Path) -> dict:
    """A tool manifest file: `{"domain", "tools": {name: read|write|generic}, "docs"?}`."""
    path = Path(path)
    manifest = _read_json(path)
    _check_values(manifest, str(path))
    if not isinstance(manifest, dict):
        raise FlowError(f"{path}: a manifest is a JSON object")
    tools = manifest.get("tools")
    if not isinstance(tools, dict) or not tools:
        raise FlowError(f"{path}: field `tools`: expected an object of tool name -> kind")
    for name, kind in tools.items():
        if kind not in ("read", "write", "generic"):
            raise FlowError(
                f"{path}: field `tools.{name}`: expected read, write or generic, got {kind!r}"
            )
    docs = manifest.get("docs", {})
    if not isinstance(docs, dict):
        raise FlowError(f"{path}: field `docs`: expected an object")
    if "domain" in manifest and not isinstance(manifest["domain"], str):
        raise FlowError(f"{path}: field `domain`: expected a string")
    return {"domain": manifest.get("domain"), "tools": dict(tools), "docs": docs}
