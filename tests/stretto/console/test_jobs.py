"""Jobs: the stretto commands the console runs, one at a time, with output, artifacts and
cancel; their files private under console/jobs/."""

from __future__ import annotations

import stat

import pytest

from tests.builders import wait_until
from tests.stretto.console.conftest import AUTH, WRITE

SHOP_FLOW = "flows/shop.flow.json"


def finished(client, job_id: str) -> dict:
    def ended() -> dict | None:
        job = client.get(f"/api/jobs/{job_id}", headers=AUTH).json()
        return job if job["state"] not in ("running", "cancelling") else None

    return wait_until(ended, f"job {job_id} to end", 600, every_s=0.2)


def test_an_audit_job_runs_and_keeps_its_output_and_artifacts(client, home):
    answer = client.post(
        "/api/jobs",
        headers=WRITE,
        json={"kind": "audit", "params": {"flow": SHOP_FLOW, "sessions": "shadow/shop"}},
    )
    assert answer.status_code == 202
    job = answer.json()
    assert job["state"] == "running" and job["argv"][:2] == ["stretto", "audit"]
    again = client.post("/api/jobs", headers=WRITE, json={"kind": "doctor"})
    assert again.status_code == 409 and "one at a time" in again.json()["error"]
    done = finished(client, job["id"])
    assert done["state"] == "succeeded" and done["exit_code"] == 0
    assert {a["path"] for a in done["artifacts"]} >= {"reliability.png", "sites.parquet"}
    output = client.get(f"/api/jobs/{job['id']}/output", headers=AUTH).text
    assert "Agreement" in output
    png = client.get(f"/api/jobs/{job['id']}/artifacts/reliability.png", headers=AUTH)
    assert png.content.startswith(b"\x89PNG")
    folder = home / "console" / "jobs" / job["id"]
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    for name in ("job.json", "output.log", "artifacts/reliability.png"):
        assert stat.S_IMODE((folder / name).stat().st_mode) == 0o600, name
    listed = client.get("/api/jobs", headers=AUTH).json()
    assert listed["running"] is None and listed["items"][0]["id"] == job["id"]
    escape = client.get(f"/api/jobs/{job['id']}/artifacts/../job.json", headers=AUTH)
    assert escape.status_code == 404
    assert client.post(f"/api/jobs/{job['id']}/cancel", headers=WRITE).status_code == 409


def test_a_job_can_be_cancelled(client):
    job = client.post("/api/jobs", headers=WRITE, json={"kind": "ingest"}).json()
    cancelled = client.post(f"/api/jobs/{job['id']}/cancel", headers=WRITE)
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelling"
    assert finished(client, job["id"])["state"] == "cancelled"


@pytest.mark.slow  # a learn job in a subprocess
def test_a_learn_job_writes_the_flow_it_was_asked_to(client, home):
    params = {"sessions": "logs/shop", "domain": "shop", "out": SHOP_FLOW}
    answer = client.post("/api/jobs", headers=WRITE, json={"kind": "learn", "params": params})
    assert answer.status_code == 409 and '"replace": true' in answer.json()["error"]
    before = (home / SHOP_FLOW).read_bytes()
    params["replace"] = True
    job = client.post("/api/jobs", headers=WRITE, json={"kind": "learn", "params": params}).json()
    assert job["writes"] == [SHOP_FLOW]
    assert finished(client, job["id"])["state"] == "succeeded"
    (kept,) = (home / "console" / "trash").rglob("shop.flow.json")  # the old one, kept
    assert kept.read_bytes() == before
    flows = {f["name"]: f for f in client.get("/api/flows", headers=AUTH).json()["items"]}
    assert flows[SHOP_FLOW]["valid"]


def test_a_failing_job_is_failed_with_its_output(client):
    job = client.post(
        "/api/jobs",
        headers=WRITE,
        json={"kind": "audit", "params": {"flow": "shop.flow.json", "sessions": "logs/shop"}},
    ).json()
    done = finished(client, job["id"])
    assert done["state"] == "failed" and done["exit_code"] == 1
    assert (
        "'actions' is a required property"
        in client.get(f"/api/jobs/{job['id']}/output", headers=AUTH).text
    )


def test_bad_job_requests(client):
    cases = [
        ({"kind": "paint"}, 404, "unknown job 'paint'"),
        ({"params": {}}, 422, "field `kind`"),
        ({"kind": "audit", "params": {"sessions": "logs/shop"}}, 422, "field `flow`: required"),
        ({"kind": "audit", "params": {"flow": "x.flow.json", "sessions": "logs"}}, 404, "no flow"),
        ({"kind": "replay", "params": {"flow": SHOP_FLOW, "sessions": "../"}}, 422, "outside"),
        (
            {"kind": "replay", "params": {"flow": SHOP_FLOW, "sessions": "nope"}},
            422,
            "not a folder",
        ),
        (
            {
                "kind": "promote",
                "params": {"flow": SHOP_FLOW, "shadow": "shadow/shop", "out": "x.json"},
            },
            422,
            "ends with .flow.json",
        ),
        (
            {"kind": "learn", "params": {"sessions": "logs/shop", "domain": "a b"}},
            422,
            "field `domain`",
        ),
        ({"kind": "audit", "params": "flow"}, 422, "field `params`"),
        (
            {
                "kind": "replay",
                "params": {"flow": SHOP_FLOW, "sessions": "logs/shop", "threshold": 7},
            },
            422,
            "field `threshold`: expected a number from 0 to 1, got 7",
        ),
    ]
    for body, status, words in cases:
        answer = client.post("/api/jobs", headers=WRITE, json=body)
        assert answer.status_code == status, body
        assert words in answer.json()["error"], (body, answer.json())
    assert client.post("/api/jobs", headers=WRITE, content=b"[1]").status_code == 400
    assert client.get("/api/jobs/nope", headers=AUTH).status_code == 404
    assert client.get("/api/jobs/nope/output", headers=AUTH).status_code == 404
    assert client.get("/api/jobs/nope/artifacts/x", headers=AUTH).status_code == 404
    assert client.post("/api/jobs/nope/cancel", headers=WRITE).status_code == 404


def test_a_value_the_user_gives_never_becomes_an_option_of_the_command(client, home):
    """A domain of `--help` made `stretto learn ... --domain --help`: the command printed its
    help and the job "succeeded" having learned nothing; `-h`, `--out=...` the same."""
    for domain in ("--help", "-h", "--out=/tmp/x.flow.json", "-", ".."):
        params = {"sessions": "logs/shop", "domain": domain, "out": "flows/new.flow.json"}
        answer = client.post("/api/jobs", headers=WRITE, json={"kind": "learn", "params": params})
        assert answer.status_code == 422, domain
        assert answer.json()["error"].startswith(f"field `domain`: {domain!r}: letters"), domain
    for threshold in (-1, 2, "--help"):
        params = {"flow": SHOP_FLOW, "sessions": "shadow/shop", "threshold": threshold}
        answer = client.post("/api/jobs", headers=WRITE, json={"kind": "replay", "params": params})
        assert answer.status_code == 422 and "field `threshold`" in answer.json()["error"]
    listed = client.get("/api/jobs", headers=AUTH).json()
    assert listed["running"] is None and listed["items"] == []  # nothing ran
    assert not (home / "flows/new.flow.json").exists()


@pytest.mark.slow  # a job in a subprocess
def test_dagster_links_when_the_ui_is_set(client):
    client.put("/api/settings", headers=WRITE, json={"dagster_url": "http://localhost:3000"})
    job = client.post("/api/jobs", headers=WRITE, json={"kind": "ingest"}).json()
    assert job["dagster_links"][-1] == "http://localhost:3000/assets/steps"
    assert finished(client, job["id"])["state"] == "succeeded"
