"""jev:// against a local server speaking TypeSafe's System-One API (`POST /v1/systemone`)."""

from __future__ import annotations

import pytest

from stretto.oracle.errors import Malformed, MissingKey
from stretto.oracle.oracle import Oracle
from stretto.oracle.runners import open_runner
from stretto.oracle.runners.base import Context
from tests.builders import KEY, systemone
from tests.stretto.oracle.conftest import options


@pytest.fixture
def jev(api):
    api.route("POST", "/v1/systemone", systemone)
    api.route(
        "GET",
        "/v1/models",
        lambda seen: (
            200,
            {},
            {
                "models": [
                    {"name": "jev-1.14.0", "description": "Jev", "release_date": "2026-08-01"}
                ]
            },
        ),
    )
    return api


def test_the_request_is_the_system_one_request(jev, sleeps, request_at_site, tmp_path) -> None:
    key_file = tmp_path / "key"
    key_file.write_text(KEY + "\n")
    runner = open_runner(
        "jev://jev-latest", options(jev, sleeps, env={"TYPESAFE_API_KEY_FILE": str(key_file)})
    )
    asked = Oracle(runner).ask(request_at_site)
    [sent] = jev.requests_to("/v1/systemone")
    assert sent.body == {k: v for k, v in request_at_site.wire("jev-latest").items()}
    assert sent.body["questions"]["pred_list_pending"] == {
        "type": "noul",
        "instructions": "Are there more items to look up?",
        "criteria": {"true": "More remain.", "false": "None."},
    }
    assert asked.answers["go_on"] == pytest.approx({"no": 0.2, "yes": 0.8})
    assert asked.answers["next"]["get_order_details"] == 0.7
    assert asked.record["model_version"] == "jev-1.14.0"
    assert asked.record["tokens"]["input"] == 318


def test_no_key_names_both_variables(jev, sleeps, request_at_site) -> None:
    runner = open_runner("jev://jev-latest", options(jev, sleeps))
    with pytest.raises(MissingKey, match="set TYPESAFE_API_KEY or TYPESAFE_API_KEY_FILE"):
        runner.ask(request_at_site, Context())
    runner = open_runner(
        "jev://jev-latest", options(jev, sleeps, env={"TYPESAFE_API_KEY_FILE": "/nonexistent/key"})
    )
    with pytest.raises(MissingKey, match=r"cannot read TYPESAFE_API_KEY_FILE \(/nonexistent/key\)"):
        runner.check()
    assert jev.seen == []


def test_an_incomplete_answer_is_marked(jev, sleeps, request_at_site) -> None:
    jev.script(
        "POST",
        "/v1/systemone",
        (
            200,
            {},
            {
                "model": "jev-1.14.0",
                "answers": {
                    "next": {
                        "type": "choice",
                        "choice": "respond",
                        "confidence": 1.0,
                        "probabilities": {"respond": 1.0},
                    }
                },
            },
        ),
    )
    runner = open_runner("jev://jev-latest", options(jev, sleeps, env={"TYPESAFE_API_KEY": KEY}))
    asked = Oracle(runner).ask(request_at_site)
    assert not asked.complete and list(asked.answers) == ["next"]
    # a choice that leaves options out gives them 0
    assert asked.answers["next"] == {
        "get_order_details": 0.0,
        "get_user_details": 0.0,
        "respond": 1.0,
    }


@pytest.mark.parametrize(
    "answer, problem",
    [
        ({"type": "noul", "noul": 1.5}, "1.5 is not a probability"),
        ({"type": "noul", "noul": True}, "expected a probability, got true"),
        ({"type": "choice", "choice": "yes"}, "a choice answer without `probabilities`"),
        ("yes", "expected an object"),
    ],
)
def test_malformed_answers_are_refused(jev, sleeps, request_at_site, answer, problem) -> None:
    jev.script(
        "POST", "/v1/systemone", (200, {}, {"model": "jev-1.14.0", "answers": {"go_on": answer}})
    )
    runner = open_runner("jev://jev-latest", options(jev, sleeps, env={"TYPESAFE_API_KEY": KEY}))
    with pytest.raises(Malformed, match=problem):
        Oracle(runner).ask(request_at_site)


def test_check_says_whether_the_model_is_listed(jev, sleeps) -> None:
    runner = open_runner("jev://jev-1.14.0", options(jev, sleeps, env={"TYPESAFE_API_KEY": KEY}))
    assert runner.check().endswith("jev-1.14.0 listed")
    assert runner.price() == (0.042, 0.0)
