"""`stretto search` on hand-made episodes: where a site's lookups are detours, expensive
detours switch it off; cheap ones keep it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stretto.model.flow import load_flow
from stretto.offline.reports.search import GRID, Search
from tests.builders import HEADER, SHOP_TOOLS, LogBuilder, stretto


@pytest.fixture
def shop(hand_made_shop_flow: Path) -> Path:
    """The flow learned from four hand-made shop sessions (tests/conftest.py)."""
    return hand_made_shop_flow


def one_order_sessions(folder: Path, n: int = 4) -> Path:
    """Sessions where the agent reads the account and only its first order, then closes it:
    the flow's second order read (after get_order) is always a detour."""
    folder.mkdir(parents=True)
    for i in range(n):
        b = LogBuilder()
        b.lines[0] = {**HEADER, "session": f"one-{i}", "domain": "shop"}
        b._add(0, "client", {"jsonrpc": "2.0", "id": 0, "method": "tools/list"})
        b._add(1, "server", {"jsonrpc": "2.0", "id": 0, "result": SHOP_TOOLS})
        b.say(2, "user", f"I'm d{i}@example.com")
        b.client_call(10, 1, "find_account", email=f"d{i}@example.com").result(11, 1, f"acct_{i}")
        b.client_call(1000, 2, "get_account", account=f"acct_{i}")
        b.result(1001, 2, json.dumps({"orders": [f"X{i}", f"Y{i}"]}))
        b.client_call(2000, 3, "get_order", order=f"X{i}").result(2001, 3, '{"status": "open"}')
        b.client_call(3000, 4, "close_order", order=f"X{i}").result(3001, 4, "closed")
        (folder / f"one-{i}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in b.lines))
    return folder


def test_expensive_detours_switch_a_site_off(shop: Path, tmp_path: Path) -> None:
    from stretto.logs.merged import read_episodes

    flow = load_flow(shop)
    episodes = read_episodes(one_order_sessions(tmp_path / "s"))
    search = Search(flow, episodes, decider="reach", costs=(1.0, 5.0))
    start = search.score(search.start)
    chosen = search.run()
    assert start.detours > 0
    assert chosen.detours < start.detours and chosen.turns_saved == start.turns_saved
    # reading the other order never paid: the site is raised until it stops acting
    assert chosen.detours == 0 and chosen.setting["get_order"] > 0.3
    assert all(t in GRID for t in chosen.setting.values())
    # the front holds the chosen setting's totals, and nothing on it is beaten on both counts
    front = search.front()
    assert (chosen.turns_saved, chosen.detours) in {(p.turns_saved, p.detours) for p in front}
    for p in front:
        assert not any(
            q.turns_saved >= p.turns_saved
            and q.detours <= p.detours
            and (q.turns_saved, q.detours) != (p.turns_saved, p.detours)
            for q in search.scored.values()
        )
    # cheap detours: the same episodes keep every site on
    cheap = Search(flow, episodes, decider="reach", costs=(10.0, 0.1)).run()
    assert all(t <= 1 for t in cheap.setting.values())


def test_the_search_tables_and_sweep_plot(shop: Path, tmp_path: Path) -> None:
    import polars as pl

    from stretto.logs.merged import read_episodes
    from stretto.offline.reports.search import write_tables

    flow = load_flow(shop)
    search = Search(flow, read_episodes(one_order_sessions(tmp_path / "s")), costs=(1.0, 5.0))
    chosen = search.run()
    evaluated = len(search.scored)
    written = write_tables(search, chosen, tmp_path / "report")
    assert {p.name for p in written} == {"settings.parquet", "sweep.parquet", "sweep.png"}
    assert len(search.scored) == evaluated  # the sweep was scored by the search already
    settings = pl.read_parquet(tmp_path / "report/settings.parquet")
    assert settings.height == evaluated
    picked = settings.filter(pl.col("chosen")).row(0, named=True)
    assert picked["front"] and picked["detours"] == chosen.detours
    assert {t["site"]: t["threshold"] for t in picked["thresholds"]} == chosen.setting
    sweep = pl.read_parquet(tmp_path / "report/sweep.parquet")
    assert sweep.height == len(search.sites) * len(GRID)
    at_chosen = sweep.filter(
        (pl.col("site") == "get_order") & (pl.col("threshold") == chosen.setting["get_order"])
    ).row(0, named=True)
    assert at_chosen["utility"] == chosen.utility(1.0, 5.0)
    assert (tmp_path / "report/sweep.png").read_bytes().startswith(b"\x89PNG")


def test_search_cli_writes_thresholds_and_flow_diff_lists_them(
    shop: Path,
    tmp_path: Path,
) -> None:
    sessions = one_order_sessions(tmp_path / "s")
    out = tmp_path / "searched.flow.json"
    done = stretto(
        "search", "--flow", shop, "--sessions", sessions, "--costs", "1,5", "--out", out, "--json"
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["chosen"]["detours"] < report["start"]["detours"]
    raised = load_flow(out)["thresholds"]["get_order"]
    assert raised == report["chosen"]["thresholds"]["get_order"] > 0.3
    diff = stretto("flow-diff", shop, out)
    assert diff.returncode == 0  # a higher threshold needs no review
    assert f"a higher threshold at get_order: 0.3 -> {raised:g}" in diff.stdout
    back = stretto("flow-diff", out, shop)
    assert back.returncode == 1
    assert f"a lower threshold at get_order: {raised:g} -> 0.3" in back.stdout
    bad = stretto("search", "--flow", shop, "--sessions", sessions, "--costs", "x")
    assert bad.returncode == 2 and "--costs" in bad.stderr
    unknown = stretto(
        "search", "--flow", shop, "--sessions", sessions, "--site", "close_order", "--dry-run"
    )
    assert unknown.returncode == 1 and "close_order" in unknown.stderr


def test_a_reused_replay_scores_as_a_fresh_one(shop: Path, tmp_path: Path) -> None:
    """A replay is reused for another threshold only when every value its decisions compared
    falls on the same side of it: each setting the search scored totals as replaying every
    episode afresh under it does, and the sweeps replayed less than once per level."""
    from stretto.logs.merged import read_episodes
    from stretto.offline.reports.search import same_decisions

    flow = load_flow(shop)
    episodes = read_episodes(one_order_sessions(tmp_path / "s"))
    search = Search(flow, episodes, decider="reach", costs=(1.0, 5.0))
    search.run()
    assert search.replays < len(search.scored) * len(episodes)
    for scored in search.scored.values():
        fresh = Search(flow, episodes, decider="reach", costs=(1.0, 5.0)).score(scored.setting)
        assert vars(fresh) == vars(scored)
    # the interval: values below θ bound it from below (open), those at or above from above
    assert same_decisions(0.5, [0.2, 0.5, 0.7]) == (0.2, 0.5)
    assert same_decisions(0.3, []) == (float("-inf"), 1.0)
    assert same_decisions(2.0, [0.4]) == (1.0, float("inf"))  # off stays off
