"""The console's JSON API on the reference's fixture home: every endpoint, auth rule and
error code (jobs, events and load are in test_jobs.py and test_server.py)."""

from __future__ import annotations

import json
import shutil
import stat
from pathlib import Path

from starlette.routing import Route

from stretto.console.api.endpoints import ENDPOINTS
from tests.builders import LogBuilder, write_logs
from tests.stretto.console.conftest import AUTH, TOKEN, WRITE, client_for

SERVED = "20260928T020401.117Z-14662"
SHADOW = "20260928T020401.240Z-14750"
SHOP_FLOW = "flows/shop.flow.json"


# --- auth -------------------------------------------------------------------------------------


def test_health_needs_no_token_and_everything_else_does(client):
    assert client.get("/api/health").json() == {"ok": True, "version": "0.1.0"}
    for path in ("/api/meta", "/api/sessions", "/api/flows", "/api/jobs", "/api/events"):
        answer = client.get(path)
        assert answer.status_code == 401, path
        assert answer.json() == {"error": "no token: sign in"}
    assert client.get("/sessions").status_code == 401  # a page: an HTML explanation
    assert "?token=" in client.get("/sessions").text


def test_a_wrong_token_is_401_by_header_and_by_cookie(client):
    assert client.get("/api/meta", headers={"Authorization": "Bearer nope"}).status_code == 401
    client.cookies.set("stretto_console", "nope")
    answer = client.get("/api/meta")
    assert answer.status_code == 401 and answer.json()["error"] == "a wrong token: sign in"
    assert client.get("/?token=nope", follow_redirects=False).status_code == 401


def test_the_token_in_the_url_sets_the_cookie(client):
    answer = client.get(f"/?token={TOKEN}", follow_redirects=False)
    assert answer.status_code == 303 and answer.headers["location"] == "/"
    cookie = answer.headers["set-cookie"]
    assert f"stretto_console={TOKEN}" in cookie and "HttpOnly" in cookie
    assert "samesite=strict" in cookie.lower()
    assert client.get("/api/meta").status_code == 200  # the cookie now signs in
    assert client.get("/flows").status_code == 200
    assert client.post("/api/logout", headers={"X-Stretto-Console": "1"}).status_code == 200


def test_a_mutation_needs_the_header(client, home):
    answer = client.delete(f"/api/sessions/{SERVED}", headers=AUTH)
    assert answer.status_code == 403
    assert answer.json() == {"error": "a change needs the header X-Stretto-Console: 1"}
    assert client.put("/api/settings", headers=AUTH, json={"threshold": 0.5}).status_code == 403
    assert client.post("/api/jobs", headers=AUTH, json={"kind": "doctor"}).status_code == 403
    assert (home / "served/shop" / f"{SERVED}.jsonl").exists()


def test_read_only_refuses_every_change(home):
    client = client_for(home, read_only=True)
    for method, path, body in [
        ("DELETE", f"/api/sessions/{SERVED}", None),
        ("DELETE", f"/api/flows/{SHOP_FLOW}", None),
        ("PUT", "/api/settings", {"threshold": 0.5}),
        ("POST", "/api/jobs", {"kind": "doctor"}),
        ("POST", "/api/jobs/x/cancel", None),
    ]:
        answer = client.request(method, path, headers=WRITE, json=body)
        assert answer.status_code == 403, path
        assert answer.json() == {"error": "the console is read-only (--read-only)"}
    assert client.get("/api/meta", headers=AUTH).json()["read_only"] is True
    assert client.post("/api/logout", headers=WRITE).status_code == 200
    assert not (home / "console").exists()  # it wrote nothing


def test_no_auth_takes_only_loopback_hosts(home):
    client = client_for(home, token=None)
    assert client.get("/api/meta", headers={"Host": "localhost:7878"}).status_code == 200
    assert client.get("/api/meta", headers={"Host": "127.0.0.1:7878"}).status_code == 200
    assert client.get("/api/meta", headers={"Host": "[::1]:7878"}).status_code == 200
    answer = client.get("/api/meta", headers={"Host": "evil.example:7878"})
    assert answer.status_code == 403 and "evil.example" in answer.json()["error"]


# --- meta, overview, settings ----------------------------------------------------------------


def test_meta(client, home):
    meta = client.get("/api/meta", headers=AUTH).json()
    assert meta["data"] == str(home.resolve())
    assert meta["session_logs"] == 12 and meta["flow_files"] == 3
    assert meta["warehouse"] is None and meta["libraries"] == {"cytoscape": True, "chart.js": True}


def test_overview_without_a_warehouse_counts_the_logs_and_says_so(client):
    data = client.get("/api/overview", headers=AUTH).json()
    assert data["source"] == "logs"
    assert data["totals"]["sessions"] == 12
    assert data["totals"]["lookups"] == 6  # the two served shop sessions made 3 each
    shop = next(d for d in data["by_domain"] if d["domain"] == "shop")
    assert shop["flow"] == SHOP_FLOW and shop["replay"]["episodes"] == 6
    problems = {p["what"]: p["problem"] for p in data["problems"]}
    assert "no warehouse" in problems["warehouse"]
    assert "'actions' is a required property" in problems["shop.flow.json"]
    assert [d["day"] for d in data["by_day"]] == ["2026-09-28"]
    bad = client.get("/api/overview?threshold=x", headers=AUTH)
    assert bad.status_code == 400 and "threshold 'x'" in bad.json()["error"]


def test_settings_are_validated_and_kept_private(client, home):
    assert client.get("/api/settings", headers=AUTH).json()["threshold"] == 0.3
    saved = client.put("/api/settings", headers=WRITE, json={"threshold": 0.5, "beta": 5})
    assert saved.status_code == 200 and saved.json()["threshold"] == 0.5
    path = home / "console" / "settings.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert client.get("/api/flows/" + SHOP_FLOW, headers=AUTH).json()["threshold"] == 0.5
    for body, status, words in [
        ({"colour": 1}, 422, "field `colour`"),
        ({"delta": "big"}, 422, "field `delta`"),
        ({"beta": 0}, 422, "field `beta`"),
        ({"dagster_url": "ftp://x"}, 422, "field `dagster_url`"),
    ]:
        answer = client.put("/api/settings", headers=WRITE, json=body)
        assert answer.status_code == status and words in answer.json()["error"]
    answer = client.put("/api/settings", headers=WRITE, content=b"{not json")
    assert answer.status_code == 400 and "not JSON" in answer.json()["error"]


def test_an_unexpected_failure_is_a_500_with_a_message(client, home):
    (home / "console" / "settings.json").mkdir(parents=True)  # cannot be written
    answer = client.put("/api/settings", headers=WRITE, json={"threshold": 0.4})
    assert answer.status_code == 500
    assert answer.json()["error"].startswith("internal error: IsADirectoryError")


def test_unknown_endpoints_are_404_json(client):
    answer = client.get("/api/nothing", headers=AUTH)
    assert answer.status_code == 404 and answer.json() == {
        "error": "no such endpoint: /api/nothing"
    }


# --- sessions ---------------------------------------------------------------------------------


def test_sessions_list_filters_and_pages(client):
    data = client.get("/api/sessions", headers=AUTH).json()
    assert data["total"] == 12
    assert data["facets"]["mode"] == ["recorded", "served", "shadow"]
    assert data["facets"]["domain"] == ["retail", "shop"]
    started = [s["started_unix_ms"] for s in data["items"]]
    assert started == sorted(started, reverse=True)
    shadow = client.get("/api/sessions?mode=shadow&domain=shop", headers=AUTH).json()
    assert [s["key"] for s in shadow["items"]][-1] == SHADOW and shadow["total"] == 3
    assert client.get("/api/sessions?server=stretto-mcp-demo", headers=AUTH).json()["total"] == 12
    assert client.get("/api/sessions?agent_model=fixtures", headers=AUTH).json()["total"] == 4
    assert client.get("/api/sessions?day=2026-09-28", headers=AUTH).json()["total"] == 12
    assert client.get("/api/sessions?q=14662", headers=AUTH).json()["items"][0]["key"] == SERVED
    page = client.get("/api/sessions?offset=10&limit=5", headers=AUTH).json()
    assert len(page["items"]) == 2 and page["total"] == 12
    for query in ("limit=0", "limit=9999", "offset=-1", "offset=x"):
        assert client.get(f"/api/sessions?{query}", headers=AUTH).status_code == 400, query


def test_sessions_sort_by_a_column_either_way(client):
    def calls(query: str) -> list:
        answer = client.get(f"/api/sessions?{query}", headers=AUTH)
        assert answer.status_code == 200
        return [s["calls"] for s in answer.json()["items"] if s.get("calls") is not None]

    rising = calls("sort=calls")
    assert rising == sorted(rising) and len(rising) > 2
    assert calls("sort=calls&order=desc") == sorted(rising, reverse=True)
    started = client.get("/api/sessions?sort=started&order=desc", headers=AUTH).json()["items"]
    newest = client.get("/api/sessions", headers=AUTH).json()["items"]
    assert [s["key"] for s in started if s.get("started_unix_ms")] == [
        s["key"] for s in newest if s.get("started_unix_ms")
    ]
    bad = client.get("/api/sessions?sort=size", headers=AUTH)
    assert bad.status_code == 400 and bad.json()["error"].startswith("sort 'size': expected")
    assert client.get("/api/sessions?sort=calls&order=up", headers=AUTH).status_code == 400


def test_one_session_and_its_timeline(client):
    summary = client.get(f"/api/sessions/{SERVED}", headers=AUTH).json()
    assert summary["mode"] == "served" and summary["lookups"] == 3 and summary["calls"] == 2
    assert summary["path"] == f"served/shop/{SERVED}.jsonl"
    timeline = client.get(f"/api/sessions/{SERVED}/timeline", headers=AUTH).json()
    kinds = [i["kind"] for i in timeline["items"]]
    assert kinds[:2] == ["user", "call"] and kinds.count("lookup") == 3
    lookup = next(i for i in timeline["items"] if i["kind"] == "lookup")
    assert lookup["tool"] == "get_user_details" and lookup["arguments"] == {"user_id": "user_41"}
    assert lookup["decision"]["score"] == lookup["decision"]["prob"] * lookup["decision"]["binding"]
    assert lookup["sources"]["user_id"]["tool"] == "find_user_id_by_email"
    (appended,) = [i for i in timeline["items"] if i["kind"] == "appended"]
    assert appended["text"].startswith("--- Also looked up automatically")
    assert "get_user_details" in appended["text"]
    hand_backs = [i for i in timeline["items"] if i["kind"] == "decision"]
    assert hand_backs[0]["reason"] == "get_order_details at 0.05, below 0.3"
    page = client.get(f"/api/sessions/{SERVED}/timeline?limit=3", headers=AUTH).json()
    assert len(page["items"]) == 3 and page["next"] == 3
    assert client.get(f"/api/sessions/{SERVED}/timeline?limit=0", headers=AUTH).status_code == 400


def test_a_sessions_waterfall_latency_and_tools(client):
    """Each call carries its latency (its answer's t_ms less its own); the waterfall's turns
    span their calls and answers in order; the tools are the log's tools/list, each with its
    kind from readOnlyHint and its input schema."""
    items = client.get(f"/api/sessions/{SERVED}/timeline", headers=AUTH).json()["items"]
    calls = [i for i in items if i["kind"] == "call"]
    assert calls and all(c["latency_ms"] is None or c["latency_ms"] >= 0 for c in calls)
    assert any(c["latency_ms"] is not None for c in calls)
    w = client.get(f"/api/sessions/{SERVED}/waterfall", headers=AUTH).json()
    turns = w["turns"]
    assert [t["turn"] for t in turns] == sorted(
        {i["turn"] for i in calls} | {t["turn"] for t in turns}
    )
    assert all(t["start_ms"] <= t["end_ms"] for t in turns)
    assert all(a["start_ms"] <= b["start_ms"] for a, b in zip(turns, turns[1:], strict=False))
    assert sum(t["calls"] for t in turns) == len(calls)
    assert w["latency_ms"]["calls"] == sum(c["latency_ms"] is not None for c in calls)
    lookups = [i for i in items if i["kind"] == "lookup"]
    assert lookups and w["lookup_latency_ms"]["lookups"] == sum(
        i["latency_ms"] is not None for i in lookups
    )
    tools = client.get(f"/api/sessions/{SERVED}/tools", headers=AUTH).json()["items"]
    kinds = {t["name"]: t["kind"] for t in tools}
    assert kinds["cancel_pending_order"] == "write" and kinds["find_user_id_by_email"] == "read"
    assert {c["tool_kind"] for c in calls} <= {"read", "write", "generic"}
    email = next(t for t in tools if t["name"] == "find_user_id_by_email")
    assert email["input_schema"]["required"] == ["email"] and email["contract"] == "email:string!"
    assert client.get("/api/sessions/nope/tools", headers=AUTH).status_code == 404


def test_the_calls_latency_is_the_agents_and_the_lookups_is_shown_apart(tmp_path):
    """The waterfall's "latency of N answered call(s)" counts the agent's calls only: the
    proxy's own lookups (ids stretto-N), slower here, are counted apart."""
    log = LogBuilder()
    log.lines[0] = {**log.lines[0], "session": "s-mixed", "domain": "shop"}
    log.client_call(10, 1, "find_account", email="c@example.com").result(14, 1, "acct_1")
    log.proxy_call(15, "stretto-1", "get_account", account="acct_1").result(915, "stretto-1", "{}")
    log.client_call(1000, 2, "get_account", account="acct_1").result(1002, 2, "{}")
    log.proxy_call(1003, "stretto-2", "get_order", order="X1").result(1603, "stretto-2", "{}")
    log.client_call(2000, 3, "get_order", order="X1").result(2006, 3, '{"status": "open"}')
    data = tmp_path / "home"
    write_logs(data / "logs" / "shop", [log])
    w = client_for(data).get("/api/sessions/s-mixed/waterfall", headers=AUTH).json()
    assert w["latency_ms"] == {"calls": 3, "median": 4, "max": 6}  # 4, 2 and 6 ms
    assert w["lookup_latency_ms"] == {"lookups": 2, "median": 900, "max": 900}  # 900, 600 ms
    assert sum(t["calls"] for t in w["turns"]) == 3
    assert sum(t["lookups"] for t in w["turns"]) == 2


def test_shadow_decisions_are_labelled_used_later_or_detour(client):
    timeline = client.get(f"/api/sessions/{SHADOW}/timeline", headers=AUTH).json()["items"]
    decisions = [i for i in timeline if i["kind"] == "decision" and i["action"] == "lookup"]
    assert decisions and all(d["shadow"] for d in decisions)
    assert {d["label"] for d in decisions} <= {"used later", "detour"}
    assert decisions[0]["tool"] == "get_user_details" and decisions[0]["used"] is True


def test_the_raw_log_streams_whole_or_by_lines(client, home):
    log = home / "served/shop" / f"{SERVED}.jsonl"
    whole = client.get(f"/api/sessions/{SERVED}/raw", headers=AUTH)
    assert whole.content == log.read_bytes()
    assert whole.headers["content-type"] == "application/x-ndjson"
    second = client.get(f"/api/sessions/{SERVED}/raw?from=2&lines=1", headers=AUTH)
    assert second.content == log.read_bytes().split(b"\n")[1] + b"\n"
    assert (
        client.get(f"/api/sessions/{SERVED}/raw?from=999&lines=1", headers=AUTH).status_code == 404
    )


def test_unknown_sessions_are_404(client):
    for path in ("/api/sessions/nope", "/api/sessions/nope/timeline", "/api/sessions/nope/raw"):
        answer = client.get(path, headers=AUTH)
        assert answer.status_code == 404 and answer.json() == {"error": "no session 'nope'"}
    assert client.delete("/api/sessions/nope", headers=WRITE).status_code == 404


def test_a_corrupt_log_says_what_is_wrong_and_the_rest_works(client, home):
    folder = home / "logs" / "shop"
    good = (folder / "20260928T020400.548Z-14457.jsonl").read_text().splitlines()
    broken = good[:10] + ['{"t_ms": 9, "from": "nobody", "message": {}}', "{not json"] + good[10:]
    (folder / "broken.jsonl").write_text("\n".join(broken).replace("14457", "99999", 1) + "\n")
    (folder / "garbage.jsonl").write_text("this is not a log\n")
    rows = {r["path"]: r for r in client.get("/api/sessions", headers=AUTH).json()["items"]}
    # each line that cannot be read is named (relative to the data directory) and skipped
    assert rows["logs/shop/broken.jsonl"]["problem"] == (
        "logs/shop/broken.jsonl:11: field `from`: expected one of client, server, proxy, "
        "context, got 'nobody'; skipped the line; logs/shop/broken.jsonl:12: not JSON "
        "(Expecting property name enclosed in double quotes: line 1 column 2 (char 1)); "
        "skipped the line"
    )
    original = rows["logs/shop/20260928T020400.548Z-14457.jsonl"]
    assert rows["logs/shop/broken.jsonl"]["calls"] == original["calls"] > 0  # the rest is read
    garbage = rows["logs/shop/garbage.jsonl"]
    assert garbage["problem"].startswith("logs/shop/garbage.jsonl:1: not JSON")
    key = "20260928T020400.548Z-99999"
    timeline = client.get(f"/api/sessions/{key}/timeline", headers=AUTH).json()
    assert timeline["problems"][0].startswith("logs/shop/broken.jsonl:11: field `from`")
    assert [i["kind"] for i in timeline["items"]] == [
        i["kind"]
        for i in client.get(f"/api/sessions/{original['key']}/timeline", headers=AUTH).json()[
            "items"
        ]
    ]
    answer = client.get(f"/api/sessions/{garbage['key']}/timeline", headers=AUTH)
    assert answer.status_code == 422 and "not JSON" in answer.json()["error"]
    assert client.get(f"/api/sessions/{SERVED}/timeline", headers=AUTH).status_code == 200
    overview = client.get("/api/overview", headers=AUTH).json()
    assert any(p["what"] == "logs/shop/garbage.jsonl" for p in overview["problems"])


def test_copies_of_a_log_are_one_session_and_a_different_one_keeps_both(client, home):
    log = home / "logs/shop/20260928T020400.548Z-14457.jsonl"
    (home / "archive").mkdir()
    shutil.copy(log, home / "archive" / log.name)
    rows = client.get("/api/sessions", headers=AUTH).json()["items"]
    (row,) = [r for r in rows if r["id"] == "20260928T020400.548Z-14457"]
    assert row["copies"] == [f"archive/{log.name}"]
    (home / "archive" / log.name).write_text(
        log.read_text() + '{"t_ms":9999,"from":"client","raw":"x"}\n'
    )
    keys = [r["key"] for r in client.get("/api/sessions", headers=AUTH).json()["items"]]
    twins = [k for k in keys if k.startswith("20260928T020400.548Z-14457@")]
    assert len(twins) == 2


def test_deleting_a_session_moves_it_and_its_side_logs_to_the_trash(client, home):
    answer = client.delete(f"/api/sessions/{SERVED}", headers=WRITE)
    assert answer.status_code == 200
    moved = answer.json()
    assert sorted(moved["moved"]) == [
        f"served/shop/{SERVED}.flow.jsonl",
        f"served/shop/{SERVED}.jsonl",
    ]
    trash = home / moved["trash"]
    assert (trash / "served/shop" / f"{SERVED}.jsonl").exists()
    assert stat.S_IMODE(trash.stat().st_mode) == 0o700
    assert not (home / "served/shop" / f"{SERVED}.jsonl").exists()
    assert client.get(f"/api/sessions/{SERVED}", headers=AUTH).status_code == 404


# --- flows ------------------------------------------------------------------------------------


def test_flows_list_valid_and_invalid(client):
    items = {f["name"]: f for f in client.get("/api/flows", headers=AUTH).json()["items"]}
    assert items[SHOP_FLOW]["valid"] and items[SHOP_FLOW]["domain"] == "shop"
    assert not items["shop.flow.json"]["valid"]
    assert "field `(the whole flow)`" in items["shop.flow.json"]["error"]
    answer = client.get("/api/flows/shop.flow.json", headers=AUTH)
    assert (
        answer.status_code == 422 and "'actions' is a required property" in answer.json()["error"]
    )
    raw = client.get("/api/flows/shop.flow.json/raw", headers=AUTH)  # still readable as a file
    assert raw.status_code == 200 and raw.json()["stretto_flow"] == 1


def test_a_flow_at_a_threshold(client, home):
    low = client.get(f"/api/flows/{SHOP_FLOW}?threshold=0.1", headers=AUTH).json()
    high = client.get(f"/api/flows/{SHOP_FLOW}?threshold=0.95", headers=AUTH).json()
    assert low["threshold"] == 0.1 and len(low["looked_up"]) > len(high["looked_up"])
    site = low["summary"]["sites"][0]
    assert {"site", "threshold", "lookups", "promotion"} <= set(site)
    edge = low["graph"]["edges"][0]
    assert edge["source"].startswith("site:") and edge["target"].startswith("lookup:")
    assert 0 <= edge["reach"] <= 1
    nodes = {n["id"]: n for n in low["graph"]["nodes"]}
    assert "user_id ←" in nodes["lookup:get_user_details"]["binding"]
    raw = client.get(f"/api/flows/{SHOP_FLOW}/raw", headers=AUTH)
    assert raw.content == (home / SHOP_FLOW).read_bytes()
    for query, words in (("threshold=abc", "expected a number"), ("threshold=-1", "from 0 to 1")):
        answer = client.get(f"/api/flows/{SHOP_FLOW}?{query}", headers=AUTH)
        assert answer.status_code == 400 and words in answer.json()["error"]
    assert client.get("/api/flows/flows/nope.flow.json", headers=AUTH).status_code == 404


def test_a_flow_with_its_own_threshold_is_shown_and_replayed_there(client, home):
    flow = json.loads((home / SHOP_FLOW).read_text())
    flow["serving"] = {"threshold": 0.95, "costs": {"saved_turn": 1, "detour": 19}}
    (home / "flows" / "shop.wary.flow.json").write_text(json.dumps(flow))
    wary = "flows/shop.wary.flow.json"
    own = client.get(f"/api/flows/{wary}", headers=AUTH).json()
    told = client.get(f"/api/flows/{wary}?threshold=0.95", headers=AUTH).json()
    plain = client.get(f"/api/flows/{SHOP_FLOW}", headers=AUTH).json()
    assert own["threshold"] == 0.95 and plain["threshold"] == 0.3  # the settings'
    assert own["looked_up"] == told["looked_up"] != plain["looked_up"]
    replayed = client.get(f"/api/flows/{wary}/replay", headers=AUTH).json()
    assert replayed["threshold"] == 0.95
    assert replayed == client.get(f"/api/flows/{wary}/replay?threshold=0.95", headers=AUTH).json()


def test_replay_figures_follow_the_threshold(client):
    low = client.get(f"/api/flows/{SHOP_FLOW}/replay?threshold=0.1", headers=AUTH).json()
    off = client.get(f"/api/flows/{SHOP_FLOW}/replay?threshold=1", headers=AUTH).json()
    assert low["episodes"] == off["episodes"] == 6  # the recorded shop sessions
    assert low["flow_lookups"] > off["flow_lookups"]
    assert low["utility"] == 7 * low["turns_saved"] - 3 * low["detours"]


def test_flow_diff(client, home):
    flow = json.loads((home / SHOP_FLOW).read_text())
    flow["thresholds"] = {"find_user_id_by_email": 0.1}
    (home / "flows" / "shop.lower.flow.json").write_text(json.dumps(flow))
    answer = client.get(
        f"/api/flows/diff?from={SHOP_FLOW}&to=flows/shop.lower.flow.json&threshold=0.3",
        headers=AUTH,
    )
    data = answer.json()
    assert data["needs_review"] == ["a lower threshold at find_user_id_by_email: 0.3 -> 0.1"]
    assert set(data["at_threshold"]) == {"new_lookups", "dropped_lookups", "unchanged"}
    assert client.get(f"/api/flows/diff?from={SHOP_FLOW}", headers=AUTH).status_code == 400
    bad = client.get(f"/api/flows/diff?from={SHOP_FLOW}&to=shop.flow.json", headers=AUTH)
    assert bad.status_code == 422


def test_deleting_a_flow_moves_it_to_the_trash(client, home):
    answer = client.delete(f"/api/flows/{SHOP_FLOW}", headers=WRITE)
    assert answer.status_code == 200
    assert (home / answer.json()["trash"] / SHOP_FLOW).exists()
    assert not (home / SHOP_FLOW).exists()
    assert client.delete(f"/api/flows/{SHOP_FLOW}", headers=WRITE).status_code == 404


# --- the description --------------------------------------------------------------------------


def test_openapi_describes_every_route(client):
    doc = client.get("/api/openapi.json", headers=AUTH).json()
    assert doc["openapi"].startswith("3.")
    described = {(m.upper(), p) for p, ops in doc["paths"].items() for m in ops}
    routes = set()
    for route in client.app.routes:
        if isinstance(route, Route) and route.path.startswith("/api/"):
            path = route.path.replace("{name:path}", "{name}").replace("{path:path}", "{path}")
            routes |= {(m, path) for m in route.methods - {"HEAD"}}
    assert routes == described == {(e.method, e.path) for e in ENDPOINTS}
    assert doc["paths"]["/api/health"]["get"]["security"] == []
    assert "403" in doc["paths"]["/api/jobs"]["post"]["responses"]


def test_pages_and_libraries_are_served_locally(client):
    client.get(f"/?token={TOKEN}")
    for page in ("/", "/sessions", f"/sessions/{SERVED}", "/flows", f"/flows/{SHOP_FLOW}", "/jobs"):
        answer = client.get(page)
        assert answer.status_code == 200 and '<main id="page"' in answer.text, page
    assert "cytoscape" in client.get("/vendor/cytoscape.min.js").text[:2000].lower()
    assert client.get("/vendor/chart.umd.min.js").status_code == 200
    assert client.get("/static/app.js").status_code == 200
    assert client.get("/vendor/other.js").status_code == 404


def test_the_data_directory_is_found_beside_the_package(home):
    from stretto.console.doctor import can_start, checks

    ok, why = can_start()
    assert ok, why
    assert all(ok for _, ok, _ in checks())
    assert Path(checks()[-1][2]).is_file()


def test_the_overview_reads_the_warehouse_while_an_ingest_holds_it(client, home):
    from stretto.cli import main
    from warehouse import store
    from warehouse.layout import Layout

    assert main(["ingest", "--home", str(home)]) == 0
    with store.ingest_lock(Layout.at(home), 0, print):  # readers never wait for the writer
        data = client.get("/api/overview", headers=AUTH).json()
    assert data["totals"]["sessions"] == 12
    # the 7 logs under logs/ (6 shop, 1 retail) are in it: it is not stale
    assert data["warehouse"]["held"] == 7 and not data["warehouse"]["stale"]
    assert not [p for p in data["problems"] if p["what"] == "warehouse"]


# --- the overview: one source of truth (issue 43, items 2, 3 and 7) --------------------------


def _listed(client) -> list[dict]:
    return client.get("/api/sessions?limit=200", headers=AUTH).json()["items"]


def test_the_overview_counts_what_the_sessions_page_lists_after_a_trash(client, home):
    """A session trashed after an ingest is gone from the Sessions page; the warehouse (which
    never forgets) still holds it. The overview counts the logs the page lists, and says what
    the warehouse holds that they do not; a log not ingested yet makes the warehouse stale."""
    from stretto.cli import main

    assert main(["ingest", "--home", str(home)]) == 0
    trashed = "20260928T020400.548Z-14457"  # one of logs/shop's, in the warehouse
    assert client.delete(f"/api/sessions/{trashed}", headers=WRITE).status_code == 200
    listed = _listed(client)
    data = client.get("/api/overview", headers=AUTH).json()
    assert len(listed) == 11
    assert data["totals"]["sessions"] == 11  # was 12: the warehouse's trashed session
    for field in ("calls", "lookups", "lookups_used", "lookups_answered"):
        assert data["totals"][field] == sum(s[field] for s in listed)
    assert data["totals"]["llm_turns"] == sum(s["turns"] for s in listed)
    assert data["warehouse"] | {"path": None} == {
        "path": None,
        "readable": True,
        "held": 7,
        "not_ingested": 0,
        "gone": 1,
        "stale": False,
    }
    # a new log under logs/, not ingested yet: the warehouse is stale, the count is right
    log = (home / "logs/shop/20260928T020400.587Z-14486.jsonl").read_text()
    header, rest = log.split("\n", 1)
    head = json.loads(header) | {"session": "20261001T000000.000Z-00001"}
    (home / "logs/shop/new.jsonl").write_text(json.dumps(head) + "\n" + rest)
    client.app.state.console.changed("sessions")  # as the events' watcher notices it
    data = client.get("/api/overview", headers=AUTH).json()
    assert data["totals"]["sessions"] == len(_listed(client)) == 12
    assert data["warehouse"]["stale"] and data["warehouse"]["not_ingested"] == 1


def test_a_sessions_turns_are_those_stretto_sessions_prints(client, home, capsys):
    """One rule for LLM turns (Episode.llm_turns): the console's per-session turns and the
    `stretto sessions` column agree; in a served session the flow's lookups are no turns."""
    from stretto.cli import main

    printed = {}
    for folder in ("served/shop", "logs/shop"):
        assert main(["sessions", str(home / folder)]) == 0
        for line in capsys.readouterr().out.splitlines()[1:]:
            session, *_, turns, _users = line.split()
            printed[session] = int(turns)
    shown = {s["key"]: s["turns"] for s in _listed(client) if s["key"] in printed}
    assert len(shown) == 8 and shown == printed
    assert printed[SERVED] == 4  # two replies and two turns with the agent's calls


def test_a_staged_flow_never_stands_for_its_domain(client, home):
    """`stretto stage` writes <name>.staged.flow.json beside the served flow: newer, but not
    served. The overview replays the served flow; the staged one is listed as staged."""
    import os

    staged = home / "flows/shop.staged.flow.json"
    flow = json.loads((home / SHOP_FLOW).read_text())
    flow["provenance"]["habit_episodes"] += 1
    staged.write_text(json.dumps(flow))
    later = (home / SHOP_FLOW).stat().st_mtime + 60
    os.utime(staged, (later, later))  # the newest flow of its domain
    data = client.get("/api/overview", headers=AUTH).json()
    shop = next(d for d in data["by_domain"] if d["domain"] == "shop")
    assert shop["flow"] == SHOP_FLOW and shop["flow_served"]
    assert data["totals"]["staged_flows"] == 1
    items = {f["name"]: f for f in client.get("/api/flows", headers=AUTH).json()["items"]}
    assert items["flows/shop.staged.flow.json"]["role"] == "staged"
    assert items["flows/shop.staged.flow.json"]["staged_beside"] == SHOP_FLOW
    assert items[SHOP_FLOW]["role"] == "served" and items[SHOP_FLOW]["staged_beside"] is None
    one = client.get("/api/flows/flows/shop.staged.flow.json", headers=AUTH).json()
    assert one["role"] == "staged"
    # without a served flow, the newest flow that is not staged stands in (said so)
    (home / SHOP_FLOW).rename(home / "flows/shop.old.flow.json")
    client.app.state.console.changed("flows")
    shop = next(
        d
        for d in client.get("/api/overview", headers=AUTH).json()["by_domain"]
        if d["domain"] == "shop"
    )
    assert shop["flow"] == "flows/shop.old.flow.json" and not shop["flow_served"]


def test_lookups_made_are_answered_or_asked_again(client):
    """The proxy's lookups are appended to the agent's result: one the agent did not ask for
    again was answered; the served shop sessions' six all were."""
    data = client.get("/api/overview", headers=AUTH).json()
    totals = data["totals"]
    assert totals["lookups"] == 6
    assert totals["lookups_answered"] == 6 and totals["lookups_used"] == 0
    served = client.get(f"/api/sessions/{SERVED}", headers=AUTH).json()
    assert served["lookups_answered"] + served["lookups_used"] == served["lookups"] == 3
