"""Unattended means alerted (issue 41): the `alert_on_failure` sensor on real failed runs, in
process — a JSON line under the home by default, a POST to $STRETTO_ALERT_URL (a local HTTP
server on 127.0.0.1 here) when it is set."""

from __future__ import annotations

import http.server
import json
import shutil
import stat
import threading
from pathlib import Path

import dagster as dg
import pytest

from pipeline import defs
from pipeline.alerts import ALERT_URL, alerts_file
from tests.pipeline.alerting import alert


def failed_run(tmp_path: Path) -> tuple[dg.ExecuteInProcessResult, dg.DagsterInstance]:
    """A real failed run, quickly: the flow asset asked for another domain than its partition."""
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("domain", ["shop"])
    result = defs.resolve_job_def("relearn").execute_in_process(
        run_config={
            "resources": {"stretto": {"config": {"home": str(tmp_path / "home")}}},
            "ops": {"flow": {"config": {"domain": "notes"}}},
        },
        instance=instance,
        partition_key="shop",
        raise_on_error=False,
    )
    assert not result.success
    return result, instance


class Hook(http.server.BaseHTTPRequestHandler):
    received: list[tuple[str, dict]] = []
    status = 200

    def do_POST(self) -> None:  # noqa: N802 (the handler's name)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        Hook.received.append((self.headers["Content-Type"], json.loads(body)))
        self.send_response(Hook.status)
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def hook():
    Hook.received, Hook.status = [], 200
    server = http.server.HTTPServer(("127.0.0.1", 0), Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/hooks/stretto"
    server.shutdown()
    server.server_close()


def test_a_failed_run_is_posted_to_the_webhook(tmp_path: Path, monkeypatch, hook: str) -> None:
    result, instance = failed_run(tmp_path)
    monkeypatch.setenv(ALERT_URL, hook)
    alert(result, instance, tmp_path / "home")
    ((kind, body),) = Hook.received
    assert kind == "application/json"
    assert body["text"] == (
        f"stretto: run {result.run_id[:8]} of `relearn` (shop) failed: "
        "`domain` is 'notes' but the partition is 'shop'"
    )
    assert body["stretto"]["run_id"] == result.run_id and body["stretto"]["job"] == "relearn"
    # the line is written too, saying the webhook had it
    (line,) = alerts_file(tmp_path / "home").read_text().splitlines()
    assert json.loads(line)["webhook"] == "sent (HTTP 200)"


def test_a_webhook_that_refuses_is_said_and_the_line_still_written(
    tmp_path: Path, monkeypatch, hook: str
) -> None:
    result, instance = failed_run(tmp_path)
    Hook.status = 500
    monkeypatch.setenv(ALERT_URL, hook)
    alert(result, instance, tmp_path / "home")
    alert(result, instance, tmp_path / "home")
    lines = alerts_file(tmp_path / "home").read_text().splitlines()
    assert [json.loads(x)["webhook"] for x in lines] == [
        "not sent: HTTP 500 Internal Server Error"
    ] * 2
    assert len(Hook.received) == 2
    shutil.rmtree(tmp_path / "home")
    # nobody listening at all: said the same way
    monkeypatch.setenv(ALERT_URL, "http://127.0.0.1:9/nobody")
    alert(result, instance, tmp_path / "home")
    (line,) = alerts_file(tmp_path / "home").read_text().splitlines()
    assert json.loads(line)["webhook"].startswith("not sent: ")


def test_a_failed_run_is_a_private_json_line_under_the_home(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv(ALERT_URL, raising=False)
    result, instance = failed_run(tmp_path)
    alert(result, instance, tmp_path / "home")
    path = alerts_file(tmp_path / "home")
    assert path == tmp_path / "home/alerts/failed-runs.jsonl"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    (line,) = path.read_text().splitlines()
    record = json.loads(line)
    assert record["run_id"] == result.run_id and record["job"] == "relearn"
    assert record["partition"] == "shop" and record["failed_checks"] == []
    assert record["steps"] == [
        {"step": "flow", "error": "`domain` is 'notes' but the partition is 'shop'"}
    ]
    assert "webhook" not in record
