"""Jobs: the stretto commands the console runs, one at a time, with output, artifacts and
cancel; their files private under console/jobs/."""

from __future__ import annotations

import json
import stat

import pytest

from stretto.console.views.artifactview import markdown_html
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


def test_evaluate_stage_and_flow_commit_are_jobs_with_checked_params(client, home):
    staged = "flows/shop.staged.flow.json"
    (home / staged).write_bytes((home / SHOP_FLOW).read_bytes())
    cases = [
        ({"kind": "stage", "params": {"flow": staged, "sessions": "logs/shop"}}, "staged flow"),
        ({"kind": "flow-commit", "params": {"flow": SHOP_FLOW}}, "field `note`: required"),
        (
            {
                "kind": "evaluate",
                "params": {"flow": SHOP_FLOW, "sessions": "served/shop", "threshold": 7},
            },
            "field `threshold`: expected a number from 0 to 1, got 7",
        ),
    ]
    for body, words in cases:
        answer = client.post("/api/jobs", headers=WRITE, json=body)
        assert answer.status_code == 422 and words in answer.json()["error"], answer.json()
    params = {"flow": SHOP_FLOW, "sessions": "served/shop", "threshold": 0.4}
    job = client.post("/api/jobs", headers=WRITE, json={"kind": "evaluate", "params": params})
    assert job.status_code == 202
    argv = job.json()["argv"]
    assert argv[:2] == ["stretto", "evaluate"] and "--threshold=0.4" in argv
    assert argv[argv.index("--out") + 1].endswith("/artifacts")
    finished(client, job.json()["id"])
    (home / staged).unlink()  # nothing staged: the flow as it is is committed, version 1
    # a note that looks like an option stays the note
    note = "--help: learned again"
    body = {"kind": "flow-commit", "params": {"flow": SHOP_FLOW, "note": note}}
    job = client.post("/api/jobs", headers=WRITE, json=body).json()
    assert job["writes"] == [SHOP_FLOW] and f"--note={note}" in job["argv"]
    assert finished(client, job["id"])["state"] == "succeeded"
    versions = client.get(f"/api/flows/{SHOP_FLOW}/versions", headers=AUTH).json()
    assert versions["versions"][-1]["note"] == note


@pytest.mark.slow  # a stage job ingests the folder in a subprocess
def test_a_stage_job_writes_the_staged_flow_and_its_report(client, home):
    body = {"kind": "stage", "params": {"flow": SHOP_FLOW, "sessions": "logs/shop"}}
    job = client.post("/api/jobs", headers=WRITE, json=body).json()
    assert job["writes"] == ["flows/shop.staged.flow.json"]
    done = finished(client, job["id"])
    assert done["state"] == "succeeded", client.get(
        f"/api/jobs/{job['id']}/output", headers=AUTH
    ).text
    assert (home / "flows/shop.staged.flow.json").is_file()
    assert "report.md" in {a["path"] for a in done["artifacts"]}
    shown = client.get(f"/api/jobs/{job['id']}/preview/report.md", headers=AUTH).json()
    assert shown["kind"] == "markdown" and "<table>" in shown["html"]


def test_a_replay_leaves_out_a_corrupt_log_says_so_and_its_report_is_rendered(client, home):
    """`stretto replay` fails on a line it cannot read; the console's pages skip that session
    and say so, and so does its replay job."""
    good = sorted((home / "logs/shop").glob("*.jsonl"))
    lines = good[0].read_text().splitlines(keepends=True)
    header = json.loads(lines[0]) | {"session": "20261201T000000.000Z-00001"}
    corrupt = [json.dumps(header) + "\n", *lines[1:4], '{"t_ms": 1, "from": "cli\n', *lines[4:]]
    (home / "logs/shop/corrupt.jsonl").write_text("".join(corrupt))
    params = {"flow": SHOP_FLOW, "sessions": "logs/shop", "threshold": 0.3}
    job = client.post("/api/jobs", headers=WRITE, json={"kind": "replay", "params": params}).json()
    (left_out,) = job["left_out"]
    assert left_out.startswith("logs/shop/corrupt.jsonl:5: not JSON")
    done = finished(client, job["id"])
    output = client.get(f"/api/jobs/{job['id']}/output", headers=AUTH).text
    assert done["state"] == "succeeded", output
    assert output.startswith("left out 1 session log(s) with a line that cannot be read")
    folder = home / "console/jobs" / job["id"]
    assert sorted(p.name for p in (folder / "sessions").iterdir()) == [p.name for p in good]
    assert stat.S_IMODE((folder / "artifacts/report.md").stat().st_mode) == 0o600
    report = (folder / "artifacts/report.md").read_text()
    assert report and report in output  # the Markdown report, also in the output
    shown = client.get(f"/api/jobs/{job['id']}/preview/report.md", headers=AUTH).json()
    assert shown["kind"] == "markdown" and "<table><thead><tr><th" in shown["html"]
    (table,) = [a["path"] for a in done["artifacts"] if a["path"].endswith(".parquet")][:1]
    rows = client.get(f"/api/jobs/{job['id']}/preview/{table}", headers=AUTH).json()
    assert (
        rows["kind"] == "table" and rows["columns"] and rows["rows_total"] >= len(rows["rows"]) > 0
    )
    assert len(rows["rows"][0]) == len(rows["columns"])
    # an artifact that is neither a report nor a table (a plot) is not previewed
    (folder / "artifacts/plot.png").write_bytes(b"\x89PNG\r\n")
    assert client.get(f"/api/jobs/{job['id']}/preview/plot.png", headers=AUTH).status_code == 422


def test_markdown_is_rendered_from_escaped_text():
    text = (
        "# Replay <script>alert(1)</script>\n\nturns **saved**: `<b>` & more\n\n"
        "| site | used |\n|---|---:|\n| `a|b` <img src=x onerror=alert(1)> | 3 |\n\n- one\n- two\n"
    )
    shown = markdown_html(text)
    assert "<script>" not in shown and "<img" not in shown
    assert shown.startswith("<h1>Replay &lt;script&gt;alert(1)&lt;/script&gt;</h1>")
    assert "<strong>saved</strong>: <code>&lt;b&gt;</code> &amp; more" in shown
    assert '<th scope="col">used</th>' in shown and "<td>3</td>" in shown
    assert "<ul><li>one</li><li>two</li></ul>" in shown


def test_the_settings_threshold_is_from_0_to_1(client):
    answer = client.put("/api/settings", headers=WRITE, json={"threshold": 7})
    assert answer.status_code == 422
    assert answer.json()["error"] == "field `threshold`: expected a number from 0 to 1, got 7"
    assert client.put("/api/settings", headers=WRITE, json={"threshold": 1}).status_code == 200


def test_the_settings_and_the_jobs_refuse_the_same_thresholds_in_the_same_words(client):
    """One rule: NaN (Python's JSON reader takes it), true and -1 are refused by both."""
    for text in ("NaN", "true", "-1", '"0.5"', "1.5"):
        setting = client.put(
            "/api/settings", headers=WRITE, content=f'{{"threshold": {text}}}'.encode()
        )
        job = client.post(
            "/api/jobs",
            headers=WRITE,
            content=(
                f'{{"kind": "replay", "params": {{"flow": "{SHOP_FLOW}", '
                f'"sessions": "logs/shop", "threshold": {text}}}}}'
            ).encode(),
        )
        assert setting.status_code == job.status_code == 422, text
        assert setting.json()["error"] == job.json()["error"], text
        assert setting.json()["error"].startswith(
            "field `threshold`: expected a number from 0 to 1"
        )
    assert client.get("/api/settings", headers=AUTH).json()["threshold"] == 0.3


def test_the_settings_costs_refuse_what_is_no_finite_number(client):
    """NaN and Infinity, which Python's JSON reader takes, are no cost: the break-even of a
    NaN cost would be NaN, and every lookup compared with it refused."""
    for name in ("beta", "delta"):
        for text in ("NaN", "Infinity", "-Infinity", "-1", "true"):
            answer = client.put(
                "/api/settings", headers=WRITE, content=f'{{"{name}": {text}}}'.encode()
            )
            assert answer.status_code == 422, (name, text)
            assert answer.json()["error"].startswith(f"field `{name}`: expected a number ≥ 0")
    before = client.get("/api/settings", headers=AUTH).json()
    assert client.put("/api/settings", headers=WRITE, json={"delta": 1000}).status_code == 200
    after = client.get("/api/settings", headers=AUTH).json()
    assert after["delta"] == 1000 and after["beta"] == before["beta"]
