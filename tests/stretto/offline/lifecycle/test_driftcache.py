"""Drift from its cache is drift scored afresh: the same result after sessions are added, after
the flow changes, with a session inserted earlier in start order (the unknown tools' first
sessions move), and from a cache that is corrupt or not this version's (ignored, rebuilt). Only
the sessions the cache lacks are read. And the change-point detector's truncated run lengths
move its figures by float noise only."""

from __future__ import annotations

import hashlib
import json
import random
import stat
from pathlib import Path

import pytest

from stretto.logs.episode import Episode, read_episode
from stretto.logs.merged import read_episodes
from stretto.model.habit import seen
from stretto.offline.lifecycle import driftcache
from stretto.offline.lifecycle.drift import Drift, Settings, change_probabilities, drift
from stretto.offline.lifecycle.driftcache import Session, cached_drift, flow_digest
from tests.stretto.offline.lifecycle.lifecycle import Session as LogSession
from tests.stretto.offline.lifecycle.lifecycle import customer, learn_folder, write_sessions


@pytest.fixture(scope="module")
def flows(tmp_path_factory) -> tuple[dict, dict]:
    """Two flows of the shop: learned from the usual agent, and from it with a few sessions of
    the changed one (another flow: every session scores differently under it)."""
    base = tmp_path_factory.mktemp("driftcache")
    write_sessions(base / "train", ["usual"] * 30, seed=1)
    first = learn_folder(base / "train", base / "a.flow.json", base / "home")
    write_sessions(base / "train", ["changed"] * 4, seed=2, start=30)
    second = learn_folder(base / "train", base / "b.flow.json", base / "home")
    return first, second


def sessions(folder: Path) -> list[Session]:
    """The folder's logs as the warehouse knows them: id and content hash (BLAKE2b-128)."""
    out = []
    for path in sorted(folder.glob("*.jsonl")):
        header = json.loads(path.read_text().splitlines()[0])
        content = hashlib.blake2b(path.read_bytes(), digest_size=16).hexdigest()
        out.append(Session(header["session"], content, path))
    return out


class Reader:
    """read_episode, counting the logs read."""

    def __init__(self) -> None:
        self.read: list[str] = []

    def __call__(self, path: Path) -> Episode:
        self.read.append(path.name)
        return read_episode(path)


def same(cached: Drift, fresh: Drift) -> None:
    assert cached.as_json() == fresh.as_json()
    assert cached.decisions == fresh.decisions
    assert cached.decider == fresh.decider


def test_the_cached_result_is_the_fresh_one_as_sessions_come_and_the_flow_changes(
    flows, tmp_path
) -> None:
    first, second = flows
    logs, cache = tmp_path / "logs", tmp_path / "home/warehouse/drift/shop.habit.json"
    write_sessions(logs, ["usual"] * 25, seed=7, start=100)

    read = Reader()
    outcome = cached_drift(first, sessions(logs), cache, read)
    assert (outcome.scored, outcome.cached) == (25, 0) and len(read.read) == 25
    same(outcome.result, drift(first, read_episodes(logs)))
    assert stat.S_IMODE(cache.stat().st_mode) == 0o600
    assert stat.S_IMODE(cache.parent.stat().st_mode) == 0o700

    # a new day: only its sessions are read, and the alarm sounds as it would afresh
    new = write_sessions(logs, ["changed"] * 6, seed=8, start=125)
    read = Reader()
    outcome = cached_drift(first, sessions(logs), cache, read)
    assert outcome.scored == 6 and sorted(read.read) == sorted(p.name for p in new)
    fresh = drift(first, read_episodes(logs))
    same(outcome.result, fresh)
    assert fresh.alarms and fresh.unknown_tools == {"get_returns": 25}

    # nothing new: nothing read
    read = Reader()
    assert cached_drift(first, sessions(logs), cache, read).scored == 0 and read.read == []

    # a session that started earlier than all but five: the unknown tool's first session and
    # every later index move, the values of the others do not
    early = LogSession("s-0099", 1_000_000 + 104 * 1000 + 500)
    customer(early, 990, random.Random(3), "changed")
    early.write(logs)
    read = Reader()
    outcome = cached_drift(first, sessions(logs), cache, read)
    assert read.read == ["s-0099.jsonl"]
    fresh = drift(first, read_episodes(logs))
    same(outcome.result, fresh)
    assert fresh.unknown_tools == {"get_returns": 5}
    assert fresh.sessions[5]["id"] == "s-0099"

    # another flow served: every session scored again, under it, from the facts file: no log
    # is read
    read = Reader()
    outcome = cached_drift(second, sessions(logs), cache, read)
    assert outcome.scored == 32 and read.read == [] and outcome.read == 0
    same(outcome.result, drift(second, read_episodes(logs)))
    assert outcome.result.sessions != fresh.sessions

    # a session gone from the warehouse is gone from the result and from the cache
    kept = [s for s in sessions(logs) if s.id != "s-0100"]
    outcome = cached_drift(second, kept, cache, Reader())
    assert outcome.scored == 0 and len(json.loads(cache.read_text())["sessions"]) == 31
    facts = json.loads(driftcache.facts_path(cache).read_text())["sessions"]
    assert len(facts) == 31

    # and back to the first flow, after new sessions: only the new logs are read
    new = write_sessions(logs, ["usual"] * 3, seed=9, start=140)
    read = Reader()
    outcome = cached_drift(first, kept + sessions(logs)[-3:], cache, read)
    assert outcome.scored == 34 and sorted(read.read) == sorted(p.name for p in new)
    same(outcome.result, drift(first, [e for e in read_episodes(logs) if e.id != "s-0100"]))
    assert "s-0100" not in [r["id"] for r in outcome.result.sessions]


def test_a_changed_log_is_another_session_and_settings_apply_afresh(flows, tmp_path) -> None:
    first, second = flows
    logs, cache = tmp_path / "logs", tmp_path / "cache/shop.habit.json"
    paths = write_sessions(logs, ["usual"] * 12, seed=11, start=200)
    cached_drift(first, sessions(logs), cache, Reader())
    # the same session id with other content (a log that grew): read again
    write_sessions(logs, ["changed"], seed=12, start=205)
    read = Reader()
    settings = Settings(hazard=0.2, window=5, threshold=0.3)
    outcome = cached_drift(first, sessions(logs), cache, read, settings=settings)
    assert read.read == [paths[5].name]
    same(outcome.result, drift(first, read_episodes(logs), settings=settings))
    # and under another flow, the changed session's new facts are the ones scored
    read = Reader()
    outcome = cached_drift(second, sessions(logs), cache, read, settings=settings)
    assert read.read == [] and outcome.scored == 12
    same(outcome.result, drift(second, read_episodes(logs), settings=settings))


def test_facts_gathered_before_any_flow_give_the_result_of_reading_the_logs(
    flows, tmp_path
) -> None:
    """The check on a domain no flow is served for yet keeps its sessions' facts; the first
    check under a flow then reads only the logs of the sessions that came since, and its
    result is drift's on every log."""
    first, second = flows
    logs, cache = tmp_path / "logs", tmp_path / "cache/shop.habit.json"
    paths = write_sessions(logs, ["usual"] * 10 + ["changed"] * 4, seed=15, start=500)
    read = Reader()
    assert driftcache.gather_facts(sessions(logs), cache, read) == 14 and len(read.read) == 14
    assert not cache.exists()  # no values without a flow: only the facts file
    facts = driftcache.facts_path(cache)
    assert stat.S_IMODE(facts.stat().st_mode) == 0o600
    read = Reader()
    assert driftcache.gather_facts(sessions(logs), cache, read) == 0 and read.read == []

    # a new session, and one gone: only the new log is read, the gone one's facts dropped
    new = write_sessions(logs, ["changed"], seed=16, start=514)
    held = [s for s in sessions(logs) if s.file != paths[0]]
    read = Reader()
    assert driftcache.gather_facts(held, cache, read) == 1 and read.read == [new[0].name]
    assert len(json.loads(facts.read_text())["sessions"]) == 14

    # a point keeps only what the models read of its history (habit.seen: its last steps)
    points = [p for f in driftcache.load_facts(facts).values() for p in f.points]
    assert points and all(h == seen(h) for h, *_ in points)
    from stretto.offline.reports.audit import decision_points

    # (the sessions' full histories are longer: they were cut)
    assert any(len(p.view.history) > 2 for e in read_episodes(logs) for p in decision_points(e))

    # the first check under each flow: no log read, the result drift's on every log
    episodes = [e for e in read_episodes(logs) if e.id != "s-0500"]
    for flow in (first, second):
        read = Reader()
        outcome = cached_drift(flow, held, cache, read)
        assert (outcome.scored, outcome.read) == (14, 0) and read.read == []
        same(outcome.result, drift(flow, episodes))


def _tamper(data: dict) -> dict:
    entry = next(iter(data["sessions"].values()))
    entry[3] = "3.2"  # a surprise that is not a number
    return data


@pytest.mark.parametrize(
    "spoil",
    [
        lambda text: text[: len(text) // 2],  # torn
        lambda text: "\x00\xff not json",
        lambda text: json.dumps({**json.loads(text), "stretto_drift_cache": 999}),
        lambda text: json.dumps({**json.loads(text), "decider": "reach"}),
        lambda text: json.dumps(_tamper(json.loads(text))),
        lambda text: json.dumps({**json.loads(text), "sites": {"a": 1}}),
        lambda text: "[]",
    ],
    ids=["torn", "bytes", "version", "decider", "entry", "sites", "list"],
)
def test_a_corrupt_or_foreign_cache_is_ignored_and_rebuilt(flows, tmp_path, spoil) -> None:
    first, _ = flows
    logs, cache = tmp_path / "logs", tmp_path / "cache/shop.habit.json"
    write_sessions(logs, ["usual"] * 8 + ["changed"] * 2, seed=13, start=300)
    cached_drift(first, sessions(logs), cache, Reader())
    cache.write_text(spoil(cache.read_text()))
    read = Reader()
    outcome = cached_drift(first, sessions(logs), cache, read)
    assert outcome.scored == 10 and read.read == []  # scored again from the facts file
    same(outcome.result, drift(first, read_episodes(logs)))
    assert cached_drift(first, sessions(logs), cache, Reader()).scored == 0  # rebuilt


def _tamper_facts(data: dict) -> dict:
    entry = next(iter(data["sessions"].values()))
    entry[2][0][0] = 10**6  # a context that is not in the table
    return data


@pytest.mark.parametrize(
    "spoil",
    [
        lambda text: text[: len(text) // 2],  # torn
        lambda text: json.dumps({**json.loads(text), "stretto_drift_facts": 999}),
        lambda text: json.dumps(_tamper_facts(json.loads(text))),
        lambda text: json.dumps({**json.loads(text), "contexts": [[1]]}),
    ],
    ids=["torn", "version", "entry", "contexts"],
)
def test_a_spoiled_facts_file_is_ignored_and_rebuilt(flows, tmp_path, spoil) -> None:
    first, second = flows
    logs, cache = tmp_path / "logs", tmp_path / "cache/shop.habit.json"
    write_sessions(logs, ["usual"] * 8 + ["changed"] * 2, seed=14, start=400)
    cached_drift(first, sessions(logs), cache, Reader())
    facts = driftcache.facts_path(cache)
    facts.write_text(spoil(facts.read_text()))
    read = Reader()
    outcome = cached_drift(second, sessions(logs), cache, read)
    assert outcome.scored == 10 == len(read.read)
    same(outcome.result, drift(second, read_episodes(logs)))
    read = Reader()
    assert cached_drift(first, sessions(logs), cache, read).scored == 10 and read.read == []
    same(
        cached_drift(first, sessions(logs), cache, Reader()).result,
        drift(first, read_episodes(logs)),
    )


def test_the_flow_digest_leaves_out_the_compile_time_only(flows) -> None:
    first, second = flows
    later = json.loads(json.dumps(first))
    later["provenance"]["compiled_unix_ms"] += 86_400_000
    assert flow_digest(later) == flow_digest(first) != flow_digest(second)
    assert driftcache.VERSION == json.loads(json.dumps(driftcache.VERSION))


def test_truncated_run_lengths_move_the_detector_by_float_noise() -> None:
    """A series of 2,500 sessions switching between three habits every 400, with gaps: the
    run hypotheses whose mass is negligible dropped (the default) against all of them kept."""
    rng = random.Random(5)
    means = [1.0, 1.6, 1.1]

    def regime(i: int) -> int:
        return (i // 400) % 3

    n = 2500
    values: list[list[float | None]] = [
        [None if i % 11 == 0 else rng.gauss(means[regime(i)], 0.25) for i in range(n)],
        [min(1.0, max(0.0, rng.gauss(0.3 + 0.1 * regime(i), 0.1))) for i in range(n)],
        [None if i % 7 == 0 else (0.0 if regime(i) != 1 else 0.1 * rng.random()) for i in range(n)],
    ]
    settings = Settings()
    every = change_probabilities(values, settings, tail=0)
    truncated = change_probabilities(values, settings)
    assert (
        max(abs(a["change"] - b["change"]) for a, b in zip(every, truncated, strict=True)) < 1e-15
    )
    assert [a["began"] for a in every] == [b["began"] for b in truncated]
    alarms = [i for i, a in enumerate(every) if a["change"] >= settings.threshold]
    assert alarms == [i for i, b in enumerate(truncated) if b["change"] >= settings.threshold]
    assert len(alarms) >= 5  # the series does change: the alarm figures are compared


def _reference(values: list[list[float | None]], hazard: float, window: int) -> list[dict]:
    """The detector written plainly (every run hypothesis kept, lgamma per run and session,
    the arrays rebuilt each session), as it was before its buffers."""
    import math

    import numpy as np

    from stretto.offline.lifecycle.changepoints import (
        ALPHA0,
        KAPPA0,
        MIN_BEFORE,
        MIN_RUN,
        OUTLIER,
        prior,
    )

    lgamma = np.vectorize(math.lgamma)

    def log_t(x, mu, kappa, alpha, beta):
        nu = 2 * alpha
        var = beta * (kappa + 1) / (alpha * kappa)
        return (
            lgamma((nu + 1) / 2)
            - lgamma(nu / 2)
            - 0.5 * np.log(nu * math.pi * var)
            - (nu + 1) / 2 * np.log1p((x - mu) ** 2 / (nu * var))
        )

    data = np.array([[np.nan if v is None else v for v in s] for s in values], dtype=float).T
    count, dims = data.shape
    priors = [prior(list(data[:, d])) for d in range(dims)]
    mu0, beta0 = np.array([m for m, _ in priors]), np.array([s * s for _, s in priors])
    mu, kappa, alpha, beta = (np.empty((0, dims)) for _ in range(4))
    posterior, out = np.empty(0), []
    for t in range(count):
        x = data[t]
        seen = ~np.isnan(x)
        fits0 = [float(log_t(x[d], mu0[d], KAPPA0, ALPHA0, beta0[d])) for d in range(dims)]
        log_new = sum(fits0[d] for d in range(dims) if seen[d])
        if t == 0:
            posterior = np.array([1.0])
        else:
            log_run = np.zeros(len(posterior))
            for d in range(dims):
                if seen[d]:
                    fit = log_t(x[d], mu[:, d], kappa[:, d], alpha[:, d], beta[:, d])
                    log_run += np.logaddexp(np.log1p(-OUTLIER) + fit, math.log(OUTLIER) + fits0[d])
            top = max(log_new, float(log_run.max()))
            grow = posterior * np.exp(log_run - top) * (1 - hazard)
            posterior = np.concatenate([[hazard * math.exp(log_new - top)], grow])
            posterior /= posterior.sum()
        mu, beta = np.vstack([mu0, mu]), np.vstack([beta0, beta])
        kappa = np.vstack([np.full(dims, KAPPA0), kappa])
        alpha = np.vstack([np.full(dims, ALPHA0), alpha])
        xs = np.where(seen, x, 0.0)
        beta = np.where(seen, beta + kappa * (xs - mu) ** 2 / (2 * (kappa + 1)), beta)
        mu = np.where(seen, (kappa * mu + xs) / (kappa + 1), mu)
        kappa, alpha = np.where(seen, kappa + 1, kappa), np.where(seen, alpha + 0.5, alpha)
        lengths = np.arange(1, len(posterior) + 1)
        recent = (lengths >= MIN_RUN) & (lengths <= window) & (t + 1 - lengths >= MIN_BEFORE)
        began = None
        if recent.any():
            began = t + 1 - int(lengths[int(np.argmax(np.where(recent, posterior, -1.0)))])
        out.append({"change": float(posterior[recent].sum()), "began": began})
    return out


def test_the_detector_keeping_every_run_is_the_plain_one_bit_for_bit() -> None:
    rng = random.Random(8)
    n = 1100  # past the buffers' first 1,025 rows: they grow once
    values: list[list[float | None]] = [
        [None if i % 13 == 0 else rng.gauss(1.0 if i < 500 else 1.8, 0.3) for i in range(n)],
        [rng.random() * (0.2 if i < 800 else 0.6) for i in range(n)],
        [None if i % 5 == 0 else 0.0 for i in range(n)],
    ]
    assert change_probabilities(values, Settings(), tail=0) == _reference(values, 0.01, 10)
    short = [series[:300] for series in values]
    settings = Settings(hazard=0.2, window=4)
    assert change_probabilities(short, settings, tail=0) == _reference(short, 0.2, 4)
