"""What every runner is: given a question set for a decision, the probability of each offered
answer to each question. One module per runner; `stretto.oracle.runners.open_runner` picks
one by the scheme of its URI."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from stretto.oracle.errors import MissingKey
from stretto.oracle.http import HttpOptions
from stretto.oracle.request import Answers, Request


@dataclass
class RunnerOptions:
    base_url: str | None = None  # `--oracle-base-url`: the server, instead of the default
    http: HttpOptions = field(default_factory=HttpOptions)
    env: Mapping[str, str] = field(default_factory=lambda: os.environ)
    price: tuple[float, float] | None = None  # `--oracle-price`: $ per million tokens in, out


@dataclass(frozen=True)
class Context:
    """What a runner may need beyond the request: the draw's key (flow/session/decision) for
    runners that draw, and the habit's probability of each option (simulate://habit)."""

    draw: str | None = None
    habit: Mapping[str, float] | None = None


@dataclass
class Reply:
    answers: Answers
    sent: str  # the request as sent (the body, or the canonical request for simulations)
    model_version: str | None = None  # what the server says answered: version, digest
    input_tokens: int | None = None  # counted by the server
    output_tokens: int | None = None
    notes: list[str] = field(default_factory=list)  # lookups that failed; the answer stands
    u: float | None = None  # the draw's first uniform


def member(value: Any, name: str) -> dict:
    """`value[name]` when both are JSON objects, else {} (answers are read defensively)."""
    found = value.get(name) if isinstance(value, dict) else None
    return found if isinstance(found, dict) else {}


def count(value: dict, name: str) -> int | None:
    """A token count from a usage object, or None."""
    found = value.get(name)
    return found if isinstance(found, int) and not isinstance(found, bool) else None


def text(value: dict, name: str) -> str | None:
    found = value.get(name)
    return found if isinstance(found, str) else None


class Runner:
    scheme: ClassVar[str]
    draws: bool = False  # answers depend on a seeded draw (its key joins the cache key)
    default_price: ClassVar[tuple[float, float]] = (0.0, 0.0)  # $ per million tokens
    answer_tokens: ClassVar[int] = 0  # output tokens an answer costs, per question (estimate)

    def __init__(self, model: str, options: RunnerOptions | None = None) -> None:
        self.model = model
        self.options = options or RunnerOptions()

    @property
    def uri(self) -> str:
        return f"{self.scheme}://{self.model}"

    def ask(self, request: Request, context: Context) -> Reply:
        raise NotImplementedError

    def check(self) -> str:
        """For doctor: raise OracleError if the runner cannot answer (unreachable, model
        absent, key unset); else say what was found. Asks no question."""
        raise NotImplementedError

    def price(self) -> tuple[float, float]:
        return self.options.price or self.default_price

    # helpers -------------------------------------------------------------------------------

    def env(self, name: str) -> str | None:
        value = self.options.env.get(name)
        return value if value and value.strip() else None

    def key_from(self, variable: str, file_variable: str | None = None) -> str:
        """An API key from the environment (or a file it names); MissingKey names the
        variables, never a value."""
        key = self.env(variable)
        if key:
            return key.strip()
        if file_variable and self.env(file_variable):
            path = Path(self.env(file_variable) or "").expanduser()
            try:
                key = path.read_text().strip()
            except OSError as exc:
                raise MissingKey(
                    f"{self.uri}: cannot read {file_variable} ({path}): {exc.strerror or exc}"
                ) from exc
            if key:
                return key
            raise MissingKey(f"{self.uri}: {file_variable} ({path}) is empty")
        either = f"{variable} or {file_variable}" if file_variable else variable
        raise MissingKey(f"{self.uri}: no API key; set {either}")
