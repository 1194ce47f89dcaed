"""`stretto learn` and `compile` with an oracle: the split, the questions, the fit written into
the flow; the options' checks; --refit-habit and --arbiter-from; the budget; and the same
flow, sessions and cache giving the same bytes. The sessions are the reference's shop logs;
the model is `simulate://habit` (seeded draws), or a local OpenAI-compatible server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stretto.cli.main import main
from stretto.model.flow import dumps
from tests.conftest import ORCHESTRA_RETAIL, REFERENCE_HOME, TAU2
from tests.stretto.oracle.apiserver import ApiServer, look_up_first, openai_chat

SHOP = REFERENCE_HOME / "logs/shop"
PREDICATES = {
    "predicates": [
        {
            "id": "list_pending",
            "favors": "same_lookup",
            "question": "Are there more orders to look up?",
            "yes": "More remain.",
            "no": "None remain.",
        }
    ]
}


def learn(tmp: Path, *options: str, cache: Path | None = None) -> tuple[int, Path]:
    out = tmp / "shop.flow.json"
    tmp.mkdir(parents=True, exist_ok=True)  # learn refuses an --out folder that is not there
    status = main(
        [
            "learn",
            "--sessions",
            str(SHOP),
            "--domain",
            "shop",
            "--out",
            str(out),
            "--home",
            str(tmp / "home"),
            *(["--oracle-cache", str(cache)] if cache else []),
            *options,
        ]
    )
    return status, out


def without_time(path: Path) -> str:
    flow = json.loads(path.read_text())
    flow["provenance"]["compiled_unix_ms"] = 0
    return dumps(flow)


@pytest.fixture(scope="module")
def learned(tmp_path_factory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("learned")
    predicates = tmp / "predicates.json"
    predicates.write_text(json.dumps(PREDICATES))
    cache = tmp / "cache"
    status, out = learn(
        tmp,
        "--oracle",
        "simulate://habit",
        "--predicates",
        str(predicates),
        "--oracle-log",
        str(tmp / "answers.jsonl"),
        cache=cache,
    )
    assert status == 0
    return out, cache


def test_the_arbiter_is_fitted_on_the_held_out_sessions(learned, capsys) -> None:
    out, cache = learned
    flow = json.loads(out.read_text())
    arbiter = flow["arbiter"]
    # six sessions, each its own task: two held out, four learned from
    assert arbiter["tasks"] == 2 and flow["provenance"]["habit_episodes"] == 4
    assert arbiter["model"] == "simulate://habit" and len(arbiter["folds"]) == 1
    assert arbiter["weighed"] == ["list_pending"]
    assert arbiter["features"] == [
        "ln habit",
        "ln one question",
        "ln split",
        "hand back",
        "pred_list_pending",
        "reliability",
    ]
    answers = list(cache.rglob("*.json"))
    assert len(answers) == arbiter["cases"] > 0  # one question set per held-out decision
    records = (out.parent / "answers.jsonl").read_text().splitlines()
    assert len(records) == len(answers)
    assert all(json.loads(r)["draw"]["key"].endswith(("/0", "/1", "/2", "/3")) for r in records)


def test_learning_again_gives_the_same_bytes(learned, tmp_path) -> None:
    """The same sessions and the same runner, with a fresh cache (the draws are seeded) and
    with the first run's: the flow is the same, but for its time."""
    out, cache = learned
    predicates = tmp_path / "predicates.json"
    predicates.write_text(json.dumps(PREDICATES))
    for name, use in (("fresh", tmp_path / "fresh-cache"), ("cached", cache)):
        status, again = learn(
            tmp_path / name,
            "--oracle",
            "simulate://habit",
            "--predicates",
            str(predicates),
            cache=use,
        )
        assert status == 0
        assert without_time(again) == without_time(out)


def test_refit_habit_and_arbiter_from(learned, tmp_path) -> None:
    out, cache = learned
    status, refit = learn(
        tmp_path / "refit", "--oracle", "simulate://habit", "--refit-habit", cache=cache
    )
    assert status == 0
    flow = json.loads(refit.read_text())
    assert flow["provenance"]["habit_episodes"] == 6 and flow["arbiter"]["tasks"] == 2
    status, taken = learn(tmp_path / "taken", "--arbiter-from", str(out))
    assert status == 0
    flow = json.loads(taken.read_text())
    assert flow["provenance"]["habit_episodes"] == 6  # nothing held out
    original = json.loads(out.read_text())["arbiter"]
    assert flow["arbiter"] == {**original, "sources": [f"arbiter: {out}"]}
    assert not (tmp_path / "taken/home/oracle-cache").exists()  # asked nothing


@pytest.mark.parametrize(
    "options, said",
    [
        ((), "learn needs --oracle URI to fit the flow's arbiter"),
        (("--habit-only", "--oracle", "simulate://habit"), "--habit-only asks no model"),
        (("--habit-only", "--refit-habit"), "--habit-only asks no model: it takes no --refit"),
        (("--arbiter-from", "x.json", "--refit-habit"), "--arbiter-from asks no model"),
        (("--arbiter-from", "missing.json"), "--arbiter-from missing.json: no such file"),
        (("--refit-habit",), "--refit-habit needs --oracle URI"),
        (("--oracle", "gemini://pro"), "no runner for `gemini://`"),
        (("--oracle", "simulate://habit", "--oracle-price", "cheap"), "--oracle-price 'cheap'"),
    ],
)
def test_options_are_checked_before_any_work(tmp_path, capsys, options, said) -> None:
    status, out = learn(tmp_path, *options)
    assert status == 2
    assert said in capsys.readouterr().err
    assert not out.exists() and not (tmp_path / "home").exists()


def test_a_bad_predicates_file_is_refused_naming_the_field(tmp_path, capsys) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"predicates": [{"id": "x y", "favors": "any_lookup"}]}))
    status, _ = learn(tmp_path, "--oracle", "simulate://habit", "--predicates", str(bad))
    assert status == 2
    assert f"{bad}: field `predicates[0].question`: expected a non-empty string" in (
        capsys.readouterr().err
    )


def test_over_the_budget_nothing_is_asked(tmp_path, capsys) -> None:
    with ApiServer() as api:
        api.route("POST", "/chat/completions", openai_chat(look_up_first))
        status, out = learn(
            tmp_path,
            "--oracle",
            "openai://demo-model",
            "--oracle-base-url",
            api.url,
            "--oracle-price",
            "1000",
            "--oracle-budget",
            "0.01",
        )
        assert api.requests_to("/chat/completions") == []
    assert status == 1 and not out.exists()
    err = capsys.readouterr().err
    assert (
        "openai://demo-model: the " in err
        and "more than --oracle-budget $0.01; nothing asked" in err
    )


@pytest.mark.slow  # fits five arbiters
@pytest.mark.parametrize("pooled, folds", [(False, 5), (True, 1)])
def test_compile_cross_fits_five_arbiters_unless_pooled(tmp_path, capsys, pooled, folds) -> None:
    out = tmp_path / "retail.flow.json"
    status = main(
        [
            "compile",
            "--results",
            str(ORCHESTRA_RETAIL),
            "--domain",
            "retail",
            "--split",
            str(TAU2 / "domains/retail/split_tasks.json"),
            "--out",
            str(out),
            "--home",
            str(tmp_path / "home"),
            "--oracle",
            "simulate://habit",
            *(["--pooled-arbiter"] if pooled else []),
        ]
    )
    assert status == 0
    flow = json.loads(out.read_text())
    arbiter = flow["arbiter"]
    assert len(arbiter["folds"]) == folds and arbiter["tasks"] == 40  # the test split's
    assert flow["provenance"]["habit_episodes"] == 62  # the successful training episodes
    if not pooled:  # each fold learned from the cases of the other four task groups
        assert len({tuple(f["weights"]) for f in arbiter["folds"]}) == 5
        assert max(f["cases"] for f in arbiter["folds"]) == arbiter["cases"]
        assert min(f["cases"] for f in arbiter["folds"]) < arbiter["cases"]
    assert f"{folds} folds)" in capsys.readouterr().out or pooled
