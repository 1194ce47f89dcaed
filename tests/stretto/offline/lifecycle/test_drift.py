"""The drift alarm: on sessions whose agent changes its habits half-way it sounds within 10
sessions of the change and not before; on unchanged sessions it stays quiet."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from stretto.logs.merged import read_episodes
from stretto.model.flow import load_flow
from stretto.offline.lifecycle.changepoints import prior
from stretto.offline.lifecycle.drift import (
    Settings,
    change_probabilities,
    drift,
    markdown,
    plot,
)
from stretto.offline.reports.audit import audit
from tests.builders import stretto
from tests.stretto.offline.lifecycle.lifecycle import learn_folder, write_sessions, write_tickets

CHANGE = 50


@pytest.fixture(scope="module")
def flow(tmp_path_factory) -> dict:
    base = tmp_path_factory.mktemp("drift")
    write_sessions(base / "train", ["usual"] * 30, seed=1)
    return learn_folder(base / "train", base / "shop.flow.json", base / "home")


@pytest.mark.parametrize("seed", [100, 101, 102])
def test_the_alarm_sounds_within_ten_sessions_of_a_change_and_not_before(
    flow, tmp_path, seed
) -> None:
    habits = ["usual"] * CHANGE + ["changed"] * CHANGE
    write_sessions(tmp_path, habits, seed=seed, start=1000)
    result = drift(flow, read_episodes(tmp_path))
    first = next(i for i, r in enumerate(result.sessions) if r["change"] >= 0.5)
    assert CHANGE <= first < CHANGE + 10
    alarm = result.alarms[0]
    assert alarm["at"] == first and alarm["change"] == CHANGE
    assert alarm["change_session"] == result.sessions[CHANGE]["id"]
    # the agent now reads the returns, a tool it never used in training, and closes orders
    # straight after reading the account
    assert result.unknown_tools == {"get_returns": CHANGE}
    moved = [m["site"] for m in alarm["moved"]]
    assert moved[0] == "get_account"
    assert alarm["moved"][0]["after"]["surprise"] > alarm["moved"][0]["before"]["surprise"]
    # the new habit is the norm ten sessions on: the statistic no longer sounds at the end
    # (the window's rule alone, --hold 0; by default an alarm holds 30 sessions from its change)
    quiet = drift(flow, read_episodes(tmp_path), settings=Settings(hold=0))
    assert quiet.sessions == result.sessions and not quiet.sounding


def test_quiet_on_two_hundred_unchanged_sessions(flow, tmp_path) -> None:
    sounding = sessions = 0
    for seed in range(5):
        folder = tmp_path / f"seed-{seed}"
        write_sessions(folder, ["usual"] * 200, seed=200 + seed, start=2000)
        result = drift(flow, read_episodes(folder))
        sessions += len(result.sessions)
        sounding += sum(r["change"] >= 0.5 for r in result.sessions)
        assert not result.alarms and not result.sounding
        assert result.unknown_tools == {}
    assert sessions == 1000 and sounding == 0  # false-alarm rate 0 of 1000 sessions


def test_the_surprise_series_is_audits_nats_per_decision(flow, tmp_path) -> None:
    write_sessions(tmp_path, ["usual", "changed", "usual"], seed=5, start=3000)
    episodes = read_episodes(tmp_path)
    result = drift(flow, episodes)
    for episode, row in zip(episodes, result.sessions, strict=True):
        totals = audit(flow, [episode], "habit").totals()
        assert row["surprise"] == pytest.approx(totals["nats_per_decision"])
        assert row["disagreement"] == pytest.approx(1 - totals["agreement"])
        assert row["decisions"] == totals["decisions"]
    assert result.sessions[1]["unknown"] > 0 == result.sessions[0]["unknown"]


def test_sounding_after_the_last_session_and_the_report(flow, tmp_path) -> None:
    habits = ["usual"] * 30 + ["changed"] * 5
    write_sessions(tmp_path / "logs", habits, seed=9, start=4000)
    result = drift(flow, read_episodes(tmp_path / "logs"))
    assert result.sounding  # the command exits 1
    data = json.loads(json.dumps(result.as_json()))
    assert data["sounding"] is True
    assert data["settings"] == {"hazard": 0.01, "window": 10, "threshold": 0.5, "hold": 30}
    assert set(data["sessions"][0]) == {
        "id",
        "decisions",
        "surprise",
        "disagreement",
        "unknown",
        "change",
    }
    assert data["alarms"][-1]["change"] == 30
    text = markdown(result)
    assert "**The alarm is sounding**" in text and "`get_returns`, first in session 30" in text
    png = tmp_path / "drift.png"
    plot(result, png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_missing_values_and_a_flat_series() -> None:
    # a session with no decision point has no surprise: left out of the likelihood
    flat = [0.5] * 30 + [None] * 3 + [0.5] * 10
    stats = change_probabilities([flat, flat, [0.0] * 43], Settings())
    assert len(stats) == 43 and max(s["change"] for s in stats) < 0.5
    assert prior([1.0, float("nan"), 3.0, 2.0]) == (
        2.0,
        pytest.approx(max(0.05, 1.5 * 1.4826 / math.sqrt(2))),
    )
    jump = [0.5] * 30 + [3.0] * 6
    stats = change_probabilities([jump, [0.1] * 36, [0.0] * 36], Settings())
    first = next(i for i, s in enumerate(stats) if s["change"] >= 0.5)
    assert first == 32 and stats[first]["began"] == 30  # three sessions into the new run


def test_bad_settings_are_refused(flow) -> None:
    for settings, message in [
        (Settings(hazard=0), "--hazard"),
        (Settings(window=2), "--window wants at least 3"),
        (Settings(threshold=1.5), "--threshold"),
        (Settings(hold=-1), "--hold wants 0 sessions or more"),
    ]:
        with pytest.raises(ValueError, match=message):
            drift(flow, [], settings=settings)


def test_no_sessions_is_quiet(flow) -> None:
    result = drift(flow, [])
    assert result.sessions == [] and not result.sounding and result.alarms == []
    assert isinstance(markdown(result), str)


def test_the_work_per_call_does_not_grow_with_the_session(flow, tmp_path, monkeypatch) -> None:
    # drift scores the agent's steps: it walks each session once and scores each distinct
    # decision point once. It used to bind the served lookup at every point too, each binding
    # scanning every earlier result: work quadratic in the session's calls (800 calls 50 s)
    from stretto.model import binding
    from stretto.model.decide import Decider

    work = {"steps": 0}
    scan, probabilities = binding.values_at, Decider.probabilities

    def counted_scan(*args, **kwargs):
        work["steps"] += 1
        return scan(*args, **kwargs)

    def counted_probabilities(self, *args, **kwargs):
        work["steps"] += 1
        return probabilities(self, *args, **kwargs)

    monkeypatch.setattr(binding, "values_at", counted_scan)
    monkeypatch.setattr(Decider, "probabilities", counted_probabilities)
    per_call = []
    for customers in (25, 100):
        folder = tmp_path / f"c{customers}"
        (path,) = write_sessions(folder, ["usual"], seed=7, customers=customers, start=6000)
        calls = path.read_text().count('"tools/call"')
        work["steps"] = 0
        result = drift(flow, read_episodes(folder))
        assert result.sessions[0]["decisions"] > 3 * customers
        per_call.append(work["steps"] / calls)
    small, large = per_call
    assert large <= small * 1.25, per_call


@pytest.fixture(scope="module")
def desk(tmp_path_factory) -> Path:
    """A help-desk flow learned from 30 sessions of an agent that looks up each ticket's
    requester after reading the ticket."""
    base = tmp_path_factory.mktemp("desk")
    write_tickets(base / "train", ["requester"] * 30, seed=1)
    learn_folder(base / "train", base / "desk.flow.json", base / "home", domain="desk")
    return base / "desk.flow.json"


@pytest.mark.parametrize("seed", [300, 301, 302])
def test_a_dropped_requester_lookup_sounds_a_dozen_sessions_on(desk, tmp_path, seed) -> None:
    # twelve sessions as trained, then twelve where the agent no longer looks up the requester
    # after each ticket: the command exits 1 after the last (the statistic alone has fallen
    # quiet by then: the new run is longer than the window)
    habits = ["requester"] * 12 + ["no-requester"] * 12
    write_tickets(tmp_path / "logs", habits, seed=seed, start=1000)
    done = stretto(
        "drift", "--flow", desk, "--sessions", tmp_path / "logs", "--json", "--out", tmp_path / "r"
    )
    assert done.returncode == 1, done.stderr
    assert "the alarm is sounding" in done.stderr and "12 sessions ago" in done.stderr
    data = json.loads(done.stdout)
    assert data["sounding"] and len(data["alarms"]) == 1
    alarm = data["alarms"][0]
    assert alarm["change"] == 12 and 12 <= alarm["at"] < 24  # within a dozen sessions
    assert all(s["change"] < 0.5 for s in data["sessions"][:12])
    assert alarm["moved"][0]["site"] == "get_ticket"  # the site the requester lookup followed
    assert data["sessions"][-1]["change"] < 0.5  # held, not the statistic
    held = drift(load_flow(desk), read_episodes(tmp_path / "logs"), settings=Settings(hold=0))
    assert not held.sounding and held.alarms  # --hold 0: the window's rule alone


def test_unchanged_ticket_series_are_not_flagged(desk, tmp_path) -> None:
    for seed in range(400, 405):
        folder = tmp_path / f"seed-{seed}"
        write_tickets(folder, ["requester"] * 24, seed=seed, start=1000)
        done = stretto("drift", "--flow", desk, "--sessions", folder, "--out", tmp_path / "r")
        assert done.returncode == 0, done.stderr
        assert "The alarm is not sounding" in done.stdout
