"""Which LLM turn each tool call belongs to (docs/formats.md §1.3, "LLM turns").

Logs record wire messages, not LLM turns; the turns are inferred. This is the one
implementation of that rule: the episode reader feeds it events as it walks a log, and the
warehouse feeds it the same events computed with SQL, so both agree call for call.

A call's `source` is what the new-value exception needs: of the values (strings and integers
of at least two characters) that the call passes, the newest *call* whose result was the
first place in the session that value appeared (its sequence number), or -1 when every value
was first seen elsewhere (said, passed in an earlier call) or never before.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from stretto.vocabulary import SAME_TURN_MS

MIN_VALUE_CHARS = 2  # shorter values are too common to say the agent read them in a result
ASCII_SPACE = " \t\r\n\x0b\x0c"
_INT_MIN, _INT_MAX = -(2**63), 2**64  # integers the warehouse's JSON reader keeps as integers


def scalar_values(value: Any, out: set[str]) -> set[str]:
    """Every string and integer in a JSON value, as text, at least MIN_VALUE_CHARS long."""
    if isinstance(value, dict):
        for item in value.values():
            scalar_values(item, out)
    elif isinstance(value, list):
        for item in value:
            scalar_values(item, out)
    elif isinstance(value, str):
        if len(value) >= MIN_VALUE_CHARS:
            out.add(value)
    elif isinstance(value, int) and not isinstance(value, bool) and _INT_MIN <= value < _INT_MAX:
        text = str(value)
        if len(text) >= MIN_VALUE_CHARS:
            out.add(text)
    return out


def result_values(text: str) -> set[str]:
    """The values a result offers: its JSON leaves, or else the text and each of its lines."""
    try:
        return scalar_values(json.loads(text), set())
    except (ValueError, RecursionError):
        pass
    out = set()
    for piece in [text, *text.split("\n")]:
        piece = piece.strip(ASCII_SPACE)
        if len(piece) >= MIN_VALUE_CHARS:
            out.add(piece)
    return out


@dataclass
class _Turn:
    number: int
    first_seq: int
    open: int = 0
    results: int = 0
    last_result_ms: int | None = None
    said_since: bool = False


@dataclass
class TurnTracker:
    """Feed it a session's events in log order; it numbers the LLM turns.

    Turns are numbered from 0 in order; a reply (an assistant message without calls) is a
    turn of its own and takes a number too.
    """

    turn_of: dict[str, int] = field(default_factory=dict)  # call id -> its turn
    sent_after: dict[str, int] = field(default_factory=dict)  # call id -> results then back
    turns: int = 0
    _turn: _Turn | None = None
    _pending: dict[str, tuple[_Turn, bool]] = field(default_factory=dict)  # id -> turn, live

    def call(self, seq: int, t_ms: int, call_id: str, by_proxy: bool, source: int) -> int:
        """A tools/call request; returns its turn number."""
        if call_id in self._pending:  # a reused id replaces the earlier waiting call
            self._release(call_id)
        turn = self._turn
        if turn is None or not self._joins(turn, t_ms, by_proxy, source):
            turn = _Turn(self.turns, seq)
            self.turns += 1
            self._turn = turn
        turn.open += 1
        self._pending[call_id] = (turn, True)
        self.turn_of[call_id] = turn.number
        self.sent_after[call_id] = turn.results
        return turn.number

    def _joins(self, turn: _Turn, t_ms: int, by_proxy: bool, source: int) -> bool:
        if turn.open > 0:
            return True  # parallel calls of one turn
        if by_proxy or turn.said_since or turn.last_result_ms is None:
            return False
        if t_ms - turn.last_result_ms > SAME_TURN_MS:
            return False
        # A value the agent could only have read in this turn's results needs a new LLM turn.
        return source < turn.first_seq

    def result(self, t_ms: int, call_id: str) -> None:
        """The first answer to a waiting call."""
        entry = self._release(call_id)
        if entry is not None:
            turn = entry[0]
            turn.results += 1
            turn.last_result_ms = t_ms

    def cancel(self, call_id: str) -> bool:
        """The host cancelled the call: it no longer holds its turn open. False if the call
        was not waiting (answered already, or unknown)."""
        entry = self._pending.get(call_id)
        if entry is None:
            return False
        if entry[1]:
            entry[0].open -= 1
            self._pending[call_id] = (entry[0], False)
        return True

    def said(self, role: str) -> None:
        """A conversation message: `user`, or an `assistant` reply (a turn of its own)."""
        if self._turn is not None:
            self._turn.said_since = True
        if role == "assistant":
            self.turns += 1
            self._turn = None

    def _release(self, call_id: str) -> tuple[_Turn, bool] | None:
        entry = self._pending.pop(call_id, None)
        if entry is not None and entry[1]:
            entry[0].open -= 1
        return entry


@dataclass
class FirstSources:
    """Where each value first appeared in a session, for the calls' `source`."""

    said: str = ""
    _first: dict[str, int] = field(default_factory=dict)

    def add_said(self, text: str) -> None:
        self.said += text + "\n"

    def add_result(self, call_seq: int, text: str) -> None:
        for value in result_values(text):
            if value not in self._first:
                self._first[value] = -1 if value in self.said else call_seq

    def source_of_call(self, arguments: dict) -> int:
        values = scalar_values(arguments, set())
        source = max((self._first.get(v, -1) for v in values), default=-1)
        for value in values:
            self._first.setdefault(value, -1)
        return source
