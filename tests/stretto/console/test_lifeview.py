"""The flow page's life endpoints on the reference's fixture home: the committed versions,
the staged flow's report and the drift series."""

from __future__ import annotations

import contextlib
import io
import json
import time

from stretto.cli.main import main
from stretto.console.adapter import drift_series
from stretto.logs.episode import in_start_order
from stretto.offline.lifecycle import versions
from tests.stretto.console.conftest import AUTH, client_for

SHOP_FLOW = "flows/shop.flow.json"


def test_versions_of_a_flow_never_committed_then_committed(client, home):
    answer = client.get(f"/api/flows/{SHOP_FLOW}/versions", headers=AUTH)
    assert answer.status_code == 200
    assert answer.json() == {"flow": SHOP_FLOW, "versions": [], "served": None}
    flow_path = home / SHOP_FLOW
    flow = json.loads(flow_path.read_text())
    flow["habit"]["alpha"] = 0.5
    versions.staged_path(flow_path).write_text(json.dumps(flow))
    versions.commit(flow_path, "alpha by hand", now_ms=2000)
    versions.rollback(flow_path, now_ms=3000)
    data = client.get(f"/api/flows/{SHOP_FLOW}/versions", headers=AUTH).json()
    assert [(v["version"], v["action"], v["note"]) for v in data["versions"]] == [
        (1, "commit", "the flow served before the first commit"),
        (2, "commit", "alpha by hand"),
        (3, "rollback", "rolled back to version 1"),
    ]
    assert data["served"] == 3 and data["versions"][1]["other"]
    # the versions kept in shop.history/ are not listed as flows of their own
    names = {f["name"] for f in client.get("/api/flows", headers=AUTH).json()["items"]}
    assert SHOP_FLOW in names and not any(".history/" in n for n in names)
    # a stored copy changed by hand: said, not served
    for copy in (home / "flows" / "shop.history").glob("*.json"):
        if copy.stem.isdigit():
            copy.write_text("{")
            break
    answer = client.get(f"/api/flows/{SHOP_FLOW}/versions", headers=AUTH)
    assert answer.status_code == 422 and "not JSON" in answer.json()["error"]
    assert client.get("/api/flows/none.flow.json/versions", headers=AUTH).status_code == 404


def test_the_staged_report_after_stretto_stage(client, home, tmp_path):
    answer = client.get(f"/api/flows/{SHOP_FLOW}/staged", headers=AUTH)
    assert answer.json() == {"flow": SHOP_FLOW, "report": None}
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        code = main(
            [
                "stage",
                "--flow",
                str(home / SHOP_FLOW),
                "--sessions",
                str(home / "logs" / "shop"),
                "--window",
                "3",
                "--home",
                str(tmp_path / "stretto"),
            ]
        )
    assert code == 0
    report = client.get(f"/api/flows/{SHOP_FLOW}/staged", headers=AUTH).json()["report"]
    assert report["staged"] == "flows/shop.staged.flow.json"
    assert report["totals"]["sessions"] == 3
    assert {"committed", "staged", "difference", "better"} <= set(report["totals"])
    assert report["sites"] and "## Sites" in report["markdown"]
    # the staged flow is a flow of its own in the list, to open and compare
    names = {f["name"] for f in client.get("/api/flows", headers=AUTH).json()["items"]}
    assert "flows/shop.staged.flow.json" in names


def drift_done(client, flow: str = SHOP_FLOW) -> dict:
    """The drift series, asked for until its background computation ends (each answer
    before is a 202 with the progress)."""
    while True:
        answer = client.get(f"/api/flows/{flow}/drift", headers=AUTH)
        if answer.status_code == 200:
            return answer.json()
        assert answer.status_code == 202
        progress = answer.json()
        assert progress["state"] == "computing" and 0 <= progress["done"] <= progress["total"]
        time.sleep(0.05)


def test_the_drift_series_of_the_domains_sessions(client, home):
    from stretto.console.views.catalog import Catalog

    first = client.get(f"/api/flows/{SHOP_FLOW}/drift", headers=AUTH)
    assert first.status_code in (200, 202)  # answered at once, computed in the background
    data = drift_done(client)
    assert data["state"] == "done"
    episodes = in_start_order(Catalog(home).episodes("shop", modes=None))
    assert [s["id"] for s in data["sessions"]] == [e.id for e in episodes]
    assert len(episodes) > len(Catalog(home).episodes("shop"))  # served and shadow too
    assert data["sounding"] is False and data["settings"]["window"] == 10
    assert data["sessions_read"].startswith("every readable shop session")
    assert client.get(f"/api/flows/{SHOP_FLOW}/drift", headers=AUTH).json() == data  # kept
    # the same series as `stretto drift` computes in one go
    flow = json.loads((home / SHOP_FLOW).read_text())
    whole = drift_series(flow, Catalog(home).episodes("shop", modes=None))
    assert data["sessions"] == whole["sessions"] and data["alarms"] == whole["alarms"]


def test_drift_past_the_limit_is_too_large(home):
    client = client_for(home, drift_max_calls=5)
    answer = client.get(f"/api/flows/{SHOP_FLOW}/drift", headers=AUTH)
    assert answer.status_code == 200
    data = answer.json()
    assert data["state"] == "too_large" and data["limit"] == 5 and data["calls"] > 5
    assert "more than the console's limit of 5 (stretto-console --drift-max-calls)" in data["error"]


def test_a_drift_computation_stops_when_one_of_its_sessions_changes(home):
    """The computation waits its turn; a session of its domain is rewritten meanwhile: it
    stops without a result, and the next request computes on the sessions as they are."""
    from stretto.console.views.catalog import Catalog
    from stretto.console.views.driftruns import Drifts

    catalog = Catalog(home)
    drifts = Drifts(catalog)
    entry = catalog.flow(SHOP_FLOW)
    with drifts.turn:  # another computation runs
        assert drifts.series(entry)["state"] == "computing"
        run = drifts.runs[SHOP_FLOW]
        victim = run.sessions[0].path
        victim.write_text(victim.read_text() + "\n")  # a new version of the log
        drifts.cancel_stale()
        assert run.cancelled.is_set()
    while SHOP_FLOW in drifts.runs and drifts.runs[SHOP_FLOW] is run:
        time.sleep(0.02)
    assert not drifts.kept  # stopped: nothing kept for the old sessions
    while (answer := drifts.series(entry))["state"] == "computing":
        time.sleep(0.05)
    assert answer["state"] == "done"
    drifts.stop()
