"""`stretto learn --half-life`, `--rewards`, `--surprise` and `--otel`, and `ingest --otel`:
the real command in this process, on synthetic shop sessions and the reference shop logs."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from stretto.cli.main import main
from stretto.model.flow import load_flow
from tests.conftest import REFERENCE_HOME
from tests.stretto.offline.lifecycle.lifecycle import learn_folder, write_sessions
from warehouse.counts.weights import half_life_weights

SHOP = REFERENCE_HOME / "logs/shop"
USUAL, CHANGED = 6, 4


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def sessions(tmp_path_factory) -> Path:
    """Sessions of the usual habit, then sessions of the changed one (in start order)."""
    folder = tmp_path_factory.mktemp("learn-options") / "logs"
    write_sessions(folder, ["usual"] * USUAL + ["changed"] * CHANGED, seed=3)
    return folder


@pytest.fixture(scope="module")
def plain(sessions, tmp_path_factory) -> dict:
    base = tmp_path_factory.mktemp("plain")
    return learn_folder(sessions, base / "shop.flow.json", base / "home")


def level(flow: dict, part: str, history: list[str]) -> dict[str, float]:
    """The counts after a history (an empty dict when the history was never seen)."""
    for entry in flow[part]["levels"][len(history)]:
        if entry["history"] == history:
            return entry["counts"]
    return {}


@pytest.mark.slow  # two whole learns
def test_a_half_life_weighs_older_sessions_less(sessions, plain, tmp_path) -> None:
    flow = learn_folder(sessions, tmp_path / "w.flow.json", tmp_path / "home", "--half-life", "2")
    weights = half_life_weights(USUAL + CHANGED, 2.0)
    # after reading the account, the usual agent reads an order, the changed one the returns:
    # each session counts its weight, the newest 1, one two sessions older 1/2
    after = level(flow, "habit", ["get_account"])
    assert after["get_order"] == pytest.approx(sum(weights[:USUAL]))
    assert after["get_returns"] == pytest.approx(sum(weights[USUAL:]))
    unweighted = level(plain, "habit", ["get_account"])
    assert unweighted == {"get_order": USUAL, "get_returns": CHANGED}
    # the newer habit now weighs more, though fewer sessions had it
    assert after["get_returns"] > after["get_order"]
    assert flow["provenance"]["half_life"] == 2.0
    # sites and bindings are not weighted
    assert flow["sites"] == plain["sites"] and flow["bindings"] == plain["bindings"]


def test_a_huge_half_life_learns_the_unweighted_flow(sessions, plain, tmp_path) -> None:
    flow = learn_folder(
        sessions, tmp_path / "h.flow.json", tmp_path / "home", "--half-life", "1e12"
    )
    for part in ("habit", "reach"):
        for ours, theirs in zip(flow[part]["levels"], plain[part]["levels"], strict=True):
            assert [e["history"] for e in ours] == [e["history"] for e in theirs]
            for a, b in zip(ours, theirs, strict=True):
                assert a["counts"] == pytest.approx(b["counts"], rel=1e-9)
                assert a["total"] == pytest.approx(b["total"], rel=1e-9)
    assert flow["habit"]["alpha"] == plain["habit"]["alpha"]
    assert flow["sites"] == plain["sites"] and flow["bindings"] == plain["bindings"]


def test_rewards_keep_failed_sessions_out(sessions, tmp_path) -> None:
    rewards = tmp_path / "rewards.json"
    changed = [f"s-{i:04d}" for i in range(USUAL, USUAL + CHANGED)]
    rewards.write_text(json.dumps({**dict.fromkeys(changed, 0), "s-0000": 1}))
    flow = learn_folder(
        sessions, tmp_path / "r.flow.json", tmp_path / "home", "--rewards", str(rewards)
    )
    assert flow["provenance"]["habit_episodes"] == USUAL
    assert level(flow, "habit", ["get_account"]) == {"get_order": USUAL}
    assert "get_returns" not in {t for s in flow["sites"]["next"] for t in s["lookups"]}
    # the same as learning from the successful sessions alone
    only = tmp_path / "only"
    only.mkdir()
    for path in sorted(sessions.glob("*.jsonl"))[:USUAL]:
        (only / path.name).symlink_to(path)
    alone = learn_folder(only, tmp_path / "alone.flow.json", tmp_path / "home")
    assert flow["habit"] == alone["habit"] and flow["sites"] == alone["sites"]


def test_bad_options_are_refused_before_any_work(sessions, tmp_path) -> None:
    out = tmp_path / "x.flow.json"
    base = ["learn", "--sessions", str(sessions), "--domain", "shop", "--habit-only"]
    base += ["--out", str(out), "--home", str(tmp_path / "home")]
    bad = tmp_path / "rewards.json"
    bad.write_text('{"s-0001": "yes"}')
    for extra, status, message in [
        (["--half-life", "0"], 2, "--half-life wants a number of sessions above 0, got 0"),
        (["--surprise", "1.5"], 2, "--surprise wants a quantile in (0, 1], got 1.5"),
        (["--surprise", "0.9", "--surprise-window", "0"], 2, "--surprise-window wants at least 1"),
        (["--rewards", str(bad)], 1, 'rewards.json: field `s-0001`: expected a number, got "yes"'),
        (["--rewards", str(tmp_path / "none.json")], 1, "none.json: cannot read"),
    ]:
        code, _, err = run(*base, *extra)
        assert code == status and message in err, (extra, err)
        assert "Traceback" not in err
    assert not out.exists() and not (tmp_path / "home").exists()


@pytest.mark.slow  # cross-fits the gate over many folds
def test_a_surprise_gate_is_learned_and_kept_in_the_flow(sessions, tmp_path) -> None:
    code, _, err = run(
        "learn", "--sessions", str(sessions), "--domain", "shop", "--habit-only",
        "--out", str(tmp_path / "g.flow.json"), "--home", str(tmp_path / "home"),
        "--surprise", "0.9", "--surprise-window", "2",
    )  # fmt: skip
    assert code == 0, err
    gate = load_flow(tmp_path / "g.flow.json")["surprise"]
    assert gate["window"] == 2 and gate["quantile"] == 0.9
    assert gate["sessions"] == USUAL + CHANGED and gate["threshold"] > 0
    assert f"hands back above {gate['threshold']:.3f} nats per step over 2 steps" in err
    # too long a window for these sessions: said in one line, no flow written
    code, _, err = run(
        "learn", "--sessions", str(sessions), "--domain", "shop", "--habit-only",
        "--out", str(tmp_path / "long.flow.json"), "--home", str(tmp_path / "home"),
        "--surprise", "0.9", "--surprise-window", "500",
    )  # fmt: skip
    assert code == 1 and "no successful held-out session has 500 or more steps" in err
    assert "Traceback" not in err and not (tmp_path / "long.flow.json").exists()


# --- OpenTelemetry ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def export(tmp_path_factory) -> tuple[Path, Path]:
    """An export of the reference shop sessions written by the OpenTelemetry SDK (as
    tests/stretto/logs/test_otel.py writes it), and a manifest of their tools."""
    from tests.otel_export import write_export

    path, _, _ = write_export(tmp_path_factory.mktemp("otel"))
    return path, path.with_name("manifest.json")


@pytest.mark.slow  # two whole learns, traces and logs
def test_learn_otel_learns_the_flow_the_proxy_logs_learn(export, tmp_path) -> None:
    path, manifest = export
    home = tmp_path / "home"
    code, out, err = run(
        "learn", "--otel", str(path), "--manifest", str(manifest), "--domain", "shop",
        "--habit-only", "--out", str(tmp_path / "otel.flow.json"), "--home", str(home),
    )  # fmt: skip
    assert code == 0, err
    assert "6 traces as sessions" in err and "1 tool spans without arguments, left out" in err
    assert "learned the shop flow from 6 sessions" in out
    from_otel = load_flow(tmp_path / "otel.flow.json")
    from_proxy = learn_folder(SHOP, tmp_path / "proxy.flow.json", home, "--manifest", str(manifest))
    for part in ("sites", "habit", "reach", "bindings", "manifest"):
        assert from_otel[part] == from_proxy[part], part
    assert from_otel["provenance"]["conventions"].startswith("OpenTelemetry GenAI")
    assert "conventions" not in from_proxy["provenance"]
    # --otel needs a manifest: an export does not say which tools are reads
    code, _, err = run(
        "learn", "--otel", str(path), "--domain", "shop", "--habit-only",
        "--out", str(tmp_path / "y.flow.json"), "--home", str(home),
    )  # fmt: skip
    assert code == 2 and "--otel needs --manifest FILE" in err


def test_ingest_otel_writes_the_traces_as_logs_and_ingests_them(export, tmp_path) -> None:
    path, manifest = export
    home = tmp_path / "home"
    code, out, err = run(
        "ingest", "--otel", str(path), "--manifest", str(manifest), "--home", str(home)
    )
    assert code == 0, err
    logs = sorted((home / "logs" / "shop").glob("*.jsonl"))
    assert len(logs) == 6 and all(p.name.startswith("otel-") for p in logs)
    assert all(oct(p.stat().st_mode & 0o777) == "0o600" for p in logs)
    assert "6 sessions" in out
    code, out, _ = run(
        "sql",
        "SELECT count(*) AS n FROM sessions WHERE domain = 'shop'",
        "--home",
        str(home),
        "--format",
        "json",
    )
    assert json.loads(out) == [{"n": 6}]
    # again: the same logs, nothing new to ingest
    code, out, _ = run(
        "ingest", "--otel", str(path), "--manifest", str(manifest), "--home", str(home)
    )
    assert code == 0 and "0 file(s)" in out
    code, _, err = run("ingest", "--domain", "shop", "--home", str(home))
    assert code == 2 and "--manifest and --domain go with --otel" in err
    code, _, err = run("ingest", "--otel", str(path), "--domain", "../x", "--home", str(home))
    assert code == 1 and "not a valid domain name" in err


def test_learn_refuses_an_out_folder_that_is_not_there(sessions, tmp_path: Path) -> None:
    """`--out /nope/dir/x.flow.json` made /nope/dir silently: a missing folder is refused
    before any work (exit 2) unless --mkdir, or it is the home's flows/ folder."""
    home = tmp_path / "home"
    learn = ["learn", "--sessions", str(sessions), "--domain", "shop", "--habit-only"]
    typo = tmp_path / "nope" / "dir" / "x.flow.json"
    code, _, err = run(*learn, "--out", str(typo), "--home", str(home))
    assert code == 2 and not typo.parent.parent.exists() and not home.exists()
    assert err == (
        f"stretto: --out {typo}: the folder {typo.parent} does not exist (create it, or give "
        "--mkdir)\n"
    )
    code, _, err = run(*learn, "--out", str(typo), "--home", str(home), "--mkdir")
    assert code == 0 and load_flow(typo)["manifest"]["domain"] == "shop", err
    served = home / "flows" / "shop.flow.json"  # where stretto keeps flows: made as needed
    code, _, err = run(*learn, "--out", str(served), "--home", str(home.parent / "fresh"))
    assert code == 2 and "does not exist" in err  # another home's flows/ is no exception
    code, _, err = run(*learn, "--out", str(home / "fresh" / "flows" / "x.flow.json"))
    assert code == 2
    fresh = tmp_path / "fresh"
    code, _, err = run(
        *learn, "--out", str(fresh / "flows" / "shop.flow.json"), "--home", str(fresh)
    )
    assert code == 0 and (fresh / "flows" / "shop.flow.json").exists(), err
    afile = tmp_path / "afile"
    afile.write_text("")
    code, _, err = run(*learn, "--out", str(afile / "x.flow.json"), "--home", str(home))
    assert code == 2 and f"{afile} is not a folder" in err
