"""An oracle: a runner with its answer cache and its records.

Every question is looked up in the cache first (a runner that draws keys it with the draw's
key too); a miss is asked, cached and recorded. Each answer's record says who answered (the
runner, the model and its version or digest where the server says), the request as sent (at
most 4,000 characters), the tokens estimated and counted, the probabilities, the most
probable choice and its confidence, the draw (key and first uniform), the latency, and any
lookup that failed (the answer stands). Records go back to the caller and, with a log file,
are appended to it as JSON lines (0600)."""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stretto.home import private_dirs
from stretto.oracle.cache import AnswerCache
from stretto.oracle.errors import Malformed, OracleError
from stretto.oracle.http import HttpOptions
from stretto.oracle.questions import NEXT
from stretto.oracle.request import (
    Answers,
    Request,
    canonical,
    choice_probabilities,
    complete,
    top,
)
from stretto.oracle.runners import RunnerOptions, open_runner
from stretto.oracle.runners.base import Context, Runner
from stretto.oracle.state import clip

REQUEST_CHARS = 4000
NO_CONTEXT = Context()
CHARS_PER_TOKEN = 4


def estimated_tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


DRAWN_FROM = ("manifest", "actions", "habit", "sites", "bindings")


def flow_digest(flow: dict) -> str:
    """A flow's identity for draw keys: SHA-256 of the parts a question is built from (its
    tools, habit, sites, bindings) — not its provenance, arbiter, thresholds or promotion, so
    a flow learned again from the same logs, or given its arbiter, draws the same."""
    content = {k: flow[k] for k in DRAWN_FROM if k in flow}
    return hashlib.sha256(canonical(content).encode()).hexdigest()[:16]


def draw_key(flow: str, session: str, index: int) -> str:
    """The key that seeds a decision's draws: the flow, the session and the decision's index
    in it."""
    return f"{flow}/{session}/{index}"


@dataclass
class Asked:
    key: str
    answers: Answers
    complete: bool  # every question answered
    record: dict


class Oracle:
    def __init__(
        self,
        runner: Runner,
        cache: AnswerCache | None = None,
        log: str | Path | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.runner = runner
        self.cache = cache
        self.log = Path(log) if log is not None else None
        self.clock = clock
        self._last: tuple[Request, Context, dict, str, str] | None = None

    @property
    def model(self) -> str:
        return self.runner.uri

    def wire(self, request: Request, context: Context) -> dict:
        return request.wire(self.model, context.draw if self.runner.draws else None)

    def _prepared(self, request: Request, context: Context) -> tuple[dict, str, str]:
        """The request's wire form, its serialization and its key — made once per request
        (a decision asks `cached`, `key` and `ask` of the same one)."""
        last = self._last
        if last is not None and last[0] is request and last[1] == context:
            return last[2], last[3], last[4]
        wire = self.wire(request, context)
        text = canonical(wire)
        key = hashlib.sha256(text.encode()).hexdigest()
        self._last = (request, context, wire, text, key)
        return wire, text, key

    def key(self, request: Request, context: Context = NO_CONTEXT) -> str:
        return self._prepared(request, context)[2]

    def cached(self, request: Request, context: Context = NO_CONTEXT) -> bool:
        return self.cache is not None and self.cache.has(self.key(request, context))

    def ask(self, request: Request, context: Context = NO_CONTEXT) -> Asked:
        """The answers to a request, from the cache or the runner; OracleError (recorded
        first) when neither can answer."""
        started = self.clock()
        _, text, key = self._prepared(request, context)
        notes: list[str] = []
        entry = None
        if self.cache is not None:
            entry, note = self.cache.get(key)
            if entry is not None:
                entry, note = _usable(entry, request, self.cache.path(key))
            if note:
                notes.append(note + "; asked again")
        base = {"runner": self.runner.scheme, "model": self.model, "key": key}
        if entry is not None:
            answers = entry["answers"]
            record = {
                **base,
                "cached": True,
                "model_version": entry.get("model_version"),
                "request": clip(text, REQUEST_CHARS),
                "tokens": _tokens(text, entry.get("usage") or {}),
                "draw": entry.get("draw"),
            }
        else:
            try:
                reply = self.runner.ask(request, context)
            except OracleError as exc:
                self._append(
                    {
                        **base,
                        "cached": False,
                        "error": str(exc),
                        "notes": notes,
                        "ms": self._ms(started),
                    }
                )
                raise
            answers = reply.answers
            notes.extend(reply.notes)
            usage = {"input_tokens": reply.input_tokens, "output_tokens": reply.output_tokens}
            draw = {"key": context.draw, "u": reply.u} if self.runner.draws else None
            if self.cache is not None:
                self.cache.put(
                    key,
                    {
                        "runner": self.runner.scheme,
                        "model": self.model,
                        "model_version": reply.model_version,
                        "answers": answers,
                        "usage": usage,
                        "draw": draw,
                    },
                )
            record = {
                **base,
                "cached": False,
                "model_version": reply.model_version,
                "request": clip(reply.sent, REQUEST_CHARS),
                "tokens": _tokens(reply.sent, usage),
                "draw": draw,
            }
        choice, confidence = top(answers.get(NEXT) or next(iter(answers.values()), {}))
        done = complete(request, answers)
        record.update(
            answers=answers,
            choice=choice,
            confidence=confidence,
            complete=done,
            notes=notes,
            ms=self._ms(started),
        )
        self._append(record)
        return Asked(key, answers, done, record)

    def _ms(self, started: float) -> float:
        return round((self.clock() - started) * 1000, 1)

    def _append(self, record: dict[str, Any]) -> None:
        if self.log is None:
            return
        private_dirs(self.log.parent, own=False)
        fd = os.open(self.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        with os.fdopen(fd, "a") as f:
            f.write(json.dumps(record, sort_keys=True, ensure_ascii=False) + "\n")


def _usable(entry: dict, request: Request, path: Path) -> tuple[dict | None, str | None]:
    """A cached entry whose answers fit the request's questions, or why not."""
    try:
        for qid, answer in entry["answers"].items():
            choice_probabilities(request.question(qid), answer, f"{path}: answers.{qid}")
    except (KeyError, Malformed) as exc:
        return None, f"the cached answer {path} does not fit the questions ({exc})"
    return entry, None


def _tokens(text: str, usage: dict) -> dict:
    return {
        "estimated": estimated_tokens(text),
        "input": usage.get("input_tokens"),
        "output": usage.get("output_tokens"),
    }


def parse_price(text: str) -> tuple[float, float]:
    """`--oracle-price IN[,OUT]`: dollars per million tokens in (and out)."""
    parts = text.split(",")
    try:
        values = [float(p) for p in parts]
    except ValueError:
        values = []
    if len(values) not in (1, 2) or any(not math.isfinite(v) or v < 0 for v in values):
        raise ValueError(
            f"--oracle-price {text!r}: expected dollars per million tokens, IN or IN,OUT"
        )
    return values[0], values[1] if len(values) == 2 else 0.0


def open_oracle(
    uri: str,
    *,
    cache: str | Path | None = None,
    base_url: str | None = None,
    timeout: float | None = None,
    retries: int | None = None,
    price: tuple[float, float] | None = None,
    log: str | Path | None = None,
    replayed: str | None = None,
) -> Oracle:
    """The oracle the `--oracle*` options describe: the runner `uri` names (`replay` replays
    the model `replayed`, the flow's arbiter's), answers cached in `cache` (default
    $STRETTO_HOME/oracle-cache), records appended to `log`. Serving passes its
    `--oracle-timeout` and retries=0: an oracle never holds an answer past the timeout
    (retrying a 429 would)."""
    http = HttpOptions()
    if timeout is not None:
        http.timeout = timeout
    if retries is not None:
        http.retries = retries
        if retries == 0:
            http.max_wait = 0.0
    options = RunnerOptions(base_url=base_url, http=http, price=price)
    return Oracle(open_runner(uri, options, replayed=replayed), AnswerCache(cache), log)
