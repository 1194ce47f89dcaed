"""The flow's program: the run after each call, kept as data in the flow (formats §3.9).

Only the standard program is accepted for now: a flow carrying any other is refused, since
it would be code the proxy runs.
"""

from __future__ import annotations

from typing import Any


def _var(name: str) -> dict:
    return {"op": "var", "name": name}


STANDARD_PROGRAM: dict[str, Any] = {
    "fugue_program": 1,
    "body": [
        {"stmt": "let", "var": "prev", "value": _var("call")},
        {"stmt": "let", "var": "failed", "value": _var("call_failed")},
        {
            "stmt": "for",
            "var": "i",
            "start": {"op": "int", "value": 0},
            "end": _var("max_lookups"),
            "body": [
                {
                    "stmt": "sample",
                    "var": "d",
                    "addr": {"name": "decide", "index": _var("i")},
                    "dist": {"name": "Decide", "args": [_var("prev"), _var("failed")]},
                },
                {
                    "stmt": "if",
                    "cond": {"op": "eq", "lhs": _var("d"), "rhs": {"op": "int", "value": 0}},
                    "then": [{"stmt": "break"}],
                },
                {
                    "stmt": "sample",
                    "var": "ok",
                    "addr": {"name": "outcome", "index": _var("i")},
                    "dist": {"name": "Outcome", "args": [_var("d")]},
                },
                {"stmt": "assign", "var": "prev", "value": _var("d")},
                {"stmt": "assign", "var": "failed", "value": {"op": "not", "arg": _var("ok")}},
            ],
        },
    ],
    "ret": _var("prev"),
}


def is_standard(program: Any) -> bool:
    return program == STANDARD_PROGRAM
