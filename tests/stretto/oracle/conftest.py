"""Fixtures for the oracle tests: a local API server, a question set, quick HTTP options."""

from __future__ import annotations

import pytest

from stretto.logs.episode import Assistant, ToolCall, ToolResult, User
from stretto.oracle.http import HttpOptions
from stretto.oracle.questions import Predicate, site_request
from stretto.oracle.runners.base import RunnerOptions
from stretto.oracle.state import Conversation
from tests.stretto.oracle.apiserver import ApiServer

DOCS = {
    "find_user_id_by_email": {"summary": "Find a user id by email.", "args": {}},
    "get_order_details": {"summary": "Get the status and details of an order.", "args": {}},
    "get_user_details": {"summary": "Get a user's details, including their orders.", "args": {}},
}
PENDING = Predicate(
    "list_pending", "same_lookup", "Are there more items to look up?", "More remain.", "None."
)


def conversation() -> Conversation:
    return Conversation.from_events(
        [
            User("Hi, my email is ann@example.com; where is my order?"),
            Assistant(
                None, [ToolCall("1", "find_user_id_by_email", {"email": "ann@example.com"}, 0)]
            ),
            ToolResult("1", "find_user_id_by_email", False, "ann_1"),
            Assistant(None, [ToolCall("2", "get_user_details", {"user_id": "ann_1"}, 0)]),
            ToolResult("2", "get_user_details", False, '{"orders": ["#W1", "#W2"]}'),
        ]
    )


@pytest.fixture
def request_at_site():
    """The questions after get_user_details, which was followed by two lookups in training."""
    return site_request(
        conversation().slice(), ["get_order_details", "get_user_details"], DOCS, [PENDING]
    )


class Sleeps(list):
    """Records the waits a client asks for instead of waiting (Retry-After is tested by what
    is asked, not by the clock)."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
def api():
    with ApiServer() as server:
        yield server


def options(api: ApiServer, sleeps: Sleeps, env=None, **http) -> RunnerOptions:
    return RunnerOptions(
        base_url=api.url,
        http=HttpOptions(
            **{"timeout": 5.0, "retries": 3, "max_wait": 30.0, "sleep": sleeps, **http}
        ),
        env=env or {},
    )
