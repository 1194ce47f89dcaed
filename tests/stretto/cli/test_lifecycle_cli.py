"""`stretto drift`, `stage`, `flow-commit`, `flow-log` and `flow-rollback`: the real commands
in this process, on the reference shop logs and on synthetic sessions whose agent changes its
habits (tests/stretto/offline/lifecycle/lifecycle.py), exit codes checked."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path

import pytest

from stretto.cli.main import main
from stretto.model.flow import load_flow
from stretto.offline.lifecycle import versions
from tests.conftest import REFERENCE_HOME
from tests.stretto.offline.lifecycle.lifecycle import learn_folder, write_sessions

SHOP = REFERENCE_HOME / "logs/shop"


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    assert "Traceback" not in err.getvalue()
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A flow learned from 30 sessions of the usual habit."""
    base = tmp_path_factory.mktemp("lifecycle")
    write_sessions(base / "train", ["usual"] * 30, seed=1)
    learn_folder(base / "train", base / "shop.flow.json", base / "home")
    return base / "shop.flow.json"


# --- drift -----------------------------------------------------------------------------------


@pytest.mark.slow  # ingests and learns twice
def test_drift_exits_1_while_the_changed_agent_sounds_the_alarm(trained, tmp_path) -> None:
    write_sessions(tmp_path / "logs", ["usual"] * 30 + ["changed"] * 5, seed=9, start=4000)
    out = tmp_path / "report"
    code, text, err = run(
        "drift", "--flow", str(trained), "--sessions", str(tmp_path / "logs"), "--out", str(out)
    )
    assert code == 1
    assert "**The alarm is sounding**" in text and "`get_returns`, first in session 30" in text
    assert "the alarm is sounding: the agent's habits changed around session s-4030" in err
    assert (out / "drift.md").read_text() == text
    data = json.loads((out / "drift.json").read_text())
    assert data["sounding"] and data["alarms"][-1]["change_session"] == "s-4030"
    assert (out / "drift.png").read_bytes()[:4] == b"\x89PNG"
    assert oct((out / "drift.json").stat().st_mode & 0o777) == "0o600"
    # --json: the same data on stdout
    code, text, _ = run(
        "drift", "--flow", str(trained), "--sessions", str(tmp_path / "logs"), "--json",
        "--out", str(tmp_path / "again"),
    )  # fmt: skip
    assert code == 1 and json.loads(text) == data


def test_drift_exits_0_on_an_unchanged_agent_and_reads_start_order(trained, tmp_path) -> None:
    # session ids that sort the other way from their start times: drift reads start order
    paths = write_sessions(tmp_path / "logs", ["usual"] * 20, seed=4, start=100)
    for i, path in enumerate(paths):
        path.rename(path.with_name(f"z{19 - i:02d}.jsonl"))
        text = path.with_name(f"z{19 - i:02d}.jsonl").read_text()
        header, rest = text.split("\n", 1)
        head = json.loads(header)
        head["session"] = f"z{19 - i:02d}"
        path.with_name(f"z{19 - i:02d}.jsonl").write_text(json.dumps(head) + "\n" + rest)
    code, text, err = run(
        "drift", "--flow", str(trained), "--sessions", str(tmp_path / "logs"), "--json",
        "--home", str(tmp_path / "home"),
    )  # fmt: skip
    assert code == 0, err
    data = json.loads(text)
    assert [s["id"] for s in data["sessions"]] == [f"z{19 - i:02d}" for i in range(20)]
    assert not data["sounding"] and data["alarms"] == []
    assert list((tmp_path / "home" / "reports" / "shop").glob("drift-*/drift.png"))


def test_drift_exits_2_on_an_error(trained, tmp_path) -> None:
    bad = tmp_path / "bad.flow.json"
    bad.write_text("{}")
    other = tmp_path / "other"
    write_sessions(other, ["usual"], seed=1)
    text = (other / "s-0000.jsonl").read_text().replace('"domain": "shop"', '"domain": "notes"')
    (other / "s-0000.jsonl").write_text(text)
    empty = tmp_path / "empty"
    empty.mkdir()
    out = ["--out", str(tmp_path / "r")]
    for argv, message in [
        (["--flow", str(bad), "--sessions", str(SHOP)], "this is not a stretto flow file"),
        (["--flow", str(trained), "--sessions", str(tmp_path / "none")], "not a directory"),
        (
            ["--flow", str(trained), "--sessions", str(other)],
            f"another domain than the flow's shop ({trained}): notes (1)",
        ),
        (["--flow", str(trained), "--sessions", str(empty)], "no sessions to watch"),
        (["--flow", str(trained), "--sessions", str(SHOP), "--window", "2"], "--window wants"),
        (["--flow", str(trained), "--sessions", str(SHOP), "--hazard", "0"], "--hazard wants"),
        (["--flow", str(trained), "--sessions", str(SHOP), "--hold", "-1"], "--hold wants"),
        (["--flow", str(trained), "--otel", str(bad)], "not an OTLP trace export"),
    ]:
        code, _, err = run("drift", *argv, *out)
        assert code == 2 and message in err, (argv, err)


def test_drift_reads_an_otel_export_with_the_flows_manifest(tmp_path) -> None:
    from tests.otel_export import write_export

    path, _, _ = write_export(tmp_path)
    flow = learn_folder(
        SHOP,
        tmp_path / "shop.flow.json",
        tmp_path / "home",
        "--manifest",
        str(path.parent / "manifest.json"),
    )
    code, text, err = run(
        "drift", "--flow", str(tmp_path / "shop.flow.json"), "--otel", str(path), "--json",
        "--out", str(tmp_path / "r"),
    )  # fmt: skip
    assert code == 0, err
    sessions = json.loads(text)["sessions"]
    assert len(sessions) == 6 and all(s["id"].startswith("otel-") for s in sessions)
    assert all(s["unknown"] == 0 for s in sessions)  # the flow knows every tool
    assert flow["manifest"]["domain"] == "shop"


# --- stage and versions ----------------------------------------------------------------------


@pytest.mark.slow  # ingests, learns and stages
def test_stage_commit_log_and_rollback_round_trip(trained, tmp_path) -> None:
    flows = tmp_path / "flows"
    flows.mkdir()
    flow_path = flows / "shop.flow.json"
    shutil.copy(trained, flow_path)
    served = flow_path.read_bytes()
    logs = tmp_path / "logs"
    write_sessions(logs, ["usual"] * 6, seed=21, customers=2)
    write_sessions(logs, ["changed"] * 4, seed=22, customers=2, start=6)
    home = ["--home", str(tmp_path / "home")]

    # nothing committed yet: nothing to roll back to, and the log is empty
    code, _, err = run("flow-rollback", "--flow", str(flow_path))
    assert code == 1 and "no committed versions to roll back to" in err
    code, text, _ = run("flow-log", "--flow", str(flow_path))
    assert code == 0 and "No committed versions." in text

    code, text, err = run(
        "stage", "--flow", str(flow_path), "--sessions", str(logs), "--window", "4", *home
    )
    assert code == 0, err
    staged = versions.staged_path(flow_path)
    assert staged.exists() and flow_path.read_bytes() == served  # staging serves nothing
    assert "a new lookup after get_account: get_returns" in text
    assert "| committed |" in text and "(4 new)" in err
    code, text, _ = run(
        "stage", "--flow", str(flow_path), "--sessions", str(logs), "--window", "4", "--json",
        *home,
    )  # fmt: skip
    report = json.loads(text)
    assert code == 0 and report["sessions_scored_now"] == 0  # each session is scored once
    assert report["totals"]["staged"]["used"] > report["totals"]["committed"]["used"]
    staged_bytes = staged.read_bytes()

    code, text, err = run("flow-commit", "--flow", str(flow_path), "--note", "the new habit")
    assert code == 0, err
    assert "committed version 2" in err and "a new lookup after get_account: get_returns" in text
    assert flow_path.read_bytes() == staged_bytes and not staged.exists()
    code, _, err = run("flow-commit", "--flow", str(flow_path), "--note", "again")
    assert code == 1 and "already the current version (2)" in err

    code, text, _ = run("flow-log", "--flow", str(flow_path), "--json")
    entries = json.loads(text)
    assert [(e["version"], e["action"], e["note"]) for e in entries] == [
        (1, "commit", "the flow served before the first commit"),
        (2, "commit", "the new habit"),
    ]
    code, text, _ = run("flow-log", "--flow", str(flow_path))
    assert "| 2 |" in text and "the new habit" in text and "Served now: version 2." in text

    code, text, err = run("flow-rollback", "--flow", str(flow_path))
    assert code == 0 and "serving version 1" in err
    assert flow_path.read_bytes() == served  # byte for byte
    code, _, err = run("flow-rollback", "--flow", str(flow_path), "--to", "2")
    assert code == 0 and flow_path.read_bytes() == staged_bytes
    code, _, err = run("flow-rollback", "--flow", str(flow_path), "--to", "9")
    assert code == 1 and "no version 9 (versions 1 to 4; see flow-log)" in err
    code, text, _ = run("flow-log", "--flow", str(flow_path), "--json")
    assert [(e["action"], e.get("to")) for e in json.loads(text)][2:] == [
        ("rollback", 1),
        ("rollback", 2),
    ]


def test_stage_auto_commits_only_when_better(trained, tmp_path) -> None:
    flow_path = tmp_path / "shop.flow.json"
    shutil.copy(trained, flow_path)
    logs = tmp_path / "logs"
    write_sessions(logs, ["changed"] * 8, seed=31, customers=2)
    code, _, err = run(
        "stage", "--flow", str(flow_path), "--sessions", str(logs), "--window", "6",
        "--auto-commit-if-better", "--home", str(tmp_path / "home"),
    )  # fmt: skip
    assert code == 0, err
    # the agent reads the returns now: the staged flow looks them up and they are used,
    # where the served flow's reads of the orders are detours
    assert "committed the staged flow as version 2: auto-commit" in err
    entry = versions.log(flow_path)[-1]
    assert entry["comparison"]["better"] and entry["comparison"]["difference"]["interval"][0] > 0
    assert load_flow(flow_path)["provenance"]["habit_episodes"] == 8


def test_stage_refuses_bad_input(trained, tmp_path) -> None:
    flow_path = tmp_path / "shop.flow.json"
    shutil.copy(trained, flow_path)
    home = ["--home", str(tmp_path / "home")]
    for argv, status, message in [
        (["--sessions", str(SHOP), "--window", "0"], 2, "--window wants at least 1 session"),
        (["--sessions", str(SHOP), "--half-life", "-1"], 2, "--half-life wants"),
        (["--sessions", str(tmp_path / "none")], 1, "not a directory of session logs"),
    ]:
        code, _, err = run("stage", "--flow", str(flow_path), *argv, *home)
        assert code == status and message in err, (argv, err)
    assert not versions.staged_path(flow_path).exists()


def test_flow_log_says_when_the_served_file_is_not_the_last_version(trained, tmp_path) -> None:
    """A flow replaced outside flow-commit (copied over, edited) is not "version N": flow-log
    says what the file on disk is, in its table's last line and on stderr."""
    flow_path = tmp_path / "shop.flow.json"
    shutil.copy(trained, flow_path)
    first = flow_path.read_bytes()
    assert run("flow-commit", "--flow", str(flow_path), "--note", "first")[0] == 0
    code, text, err = run("flow-log", "--flow", str(flow_path))
    assert code == 0 and text.endswith("Served now: version 1.\n") and err == ""

    flow_path.write_text(json.dumps(json.loads(first), indent=1))  # the same flow, other bytes
    code, text, err = run("flow-log", "--flow", str(flow_path))
    said = (
        "the file on disk is not a committed version: it was replaced since version 1 outside "
        "flow-commit (`stretto flow-commit` commits it, `stretto flow-rollback --to 1` serves "
        "version 1 again)."
    )
    assert code == 0 and text.endswith(f"Served now: {said}\n")
    assert err == f"stretto: warning: served now: {said}\n"
    code, text, err = run("flow-log", "--flow", str(flow_path), "--json")
    assert code == 0 and json.loads(text)[-1]["version"] == 1 and said in err

    assert run("flow-commit", "--flow", str(flow_path), "--note", "indented")[0] == 0
    assert run("flow-log", "--flow", str(flow_path))[1].endswith("Served now: version 2.\n")
    flow_path.write_bytes(first)  # version 1, copied back by hand
    code, text, _ = run("flow-log", "--flow", str(flow_path))
    assert "Served now: the file on disk is version 1's bytes: it was replaced since version 2" in (
        text
    )
    flow_path.unlink()
    code, text, _ = run("flow-log", "--flow", str(flow_path))
    assert text.endswith(
        f"Served now: nothing: {flow_path} is missing (`stretto flow-rollback --to 2` restores "
        "it).\n"
    )
