"""What can go wrong when a System-One model is asked. Every message is one line, names the
runner and what to do, and never carries a key."""

from __future__ import annotations


class OracleError(Exception):
    """A question could not be answered: the decision hands back with
    `the System-One model failed: <message>`; a command exits non-zero."""


class UnknownRunner(OracleError):
    """An `--oracle` URI whose scheme names no runner."""


class MissingKey(OracleError):
    """A runner that needs an API key found none (the message names the variable, never a
    value)."""


class Unreachable(OracleError):
    """The server could not be reached (refused, no such host, reset)."""


class TimedOut(OracleError):
    """The server did not answer within the timeout."""


class HttpError(OracleError):
    """The server answered with an error status."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class RateLimited(HttpError):
    """429 (or 529) after every retry allowed, or a Retry-After longer than we may wait."""


class Malformed(OracleError):
    """An answer that does not have the shape asked for: refused, never guessed at."""


class Unanswered(OracleError):
    """`replay` has no answer for this question in the cache (audit/promote leave the
    decision out; serving hands back)."""


class BudgetError(OracleError):
    """The uncached questions could cost more than `--oracle-budget`."""


class ContextTooLong(OracleError):
    """The request does not fit the model's context (refused rather than silently cut)."""
