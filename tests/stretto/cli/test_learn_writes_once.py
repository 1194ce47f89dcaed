"""`stretto learn` and `compile` with --costs or --calibrate write the flow to --out once, the
finished flow: a reader of that path (the proxy reloading its flow, flow-show, the console)
never sees a flow without its serving threshold or its calibration. The real commands in this
process, every write of a flow file recorded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import stretto.model.flow
from pipeline.learnfolder import learn_cache
from stretto.cli.main import main
from stretto.model.flow import load_flow
from tests.conftest import REFERENCE_HOME, TAU2, compile_small_retail, unannotated_retail_logs

SHOP = REFERENCE_HOME / "logs/shop"


@pytest.fixture
def writes(monkeypatch) -> list[tuple[Path, bytes]]:
    """Every flow file written (write_flow's one writer), as (path, bytes)."""
    written: list[tuple[Path, bytes]] = []
    write = stretto.model.flow.write_private

    def recorded(path, data):
        written.append((Path(path).resolve(), data.encode() if isinstance(data, str) else data))
        return write(path, data)

    monkeypatch.setattr(stretto.model.flow, "write_private", recorded)
    return written


def written_once(writes: list[tuple[Path, bytes]], out: Path) -> dict:
    """The flow at `out`, after checking it was written there once, as it is now."""
    there = [data for path, data in writes if path == out.resolve()]
    assert len(there) == 1, f"{out} written {len(there)} times"
    assert there[0] == out.read_bytes()
    return load_flow(out)


def no_draft_left(home: Path, sessions: Path) -> None:
    drafts = learn_cache(str(home), sessions) / "drafts"
    assert not drafts.exists() or not any(drafts.iterdir())


def test_learn_costs_calibrate_writes_the_flow_once(writes, tmp_path: Path, capsys) -> None:
    """Served at the costs' break-even; calibration tried and refused (the reference's shop
    logs: the agent made every option): the flow is written once all the same."""
    out, home = tmp_path / "shop.flow.json", tmp_path / "home"
    status = main(
        ["learn", "--habit-only", "--calibrate", "--costs", "5824,2467", "--sessions", str(SHOP)]
        + ["--domain", "shop", "--out", str(out), "--home", str(home)]
    )
    assert status == 0
    flow = written_once(writes, out)
    assert flow["serving"]["threshold"] == 0.2976 and "calibration" not in flow
    said = capsys.readouterr()
    assert "served at 0.2976 unless told otherwise" in said.out
    assert "not calibrated:" in said.err
    # the flow is named as written only once it is: on the last line, after the write
    assert "and wrote" not in said.out and said.out.endswith(f"stretto: wrote {out}\n")
    no_draft_left(home, SHOP)


def test_learn_without_costs_or_calibrate_writes_the_flow_once(writes, tmp_path: Path) -> None:
    out, home = tmp_path / "shop.flow.json", tmp_path / "home"
    status = main(
        ["learn", "--habit-only", "--sessions", str(SHOP)]
        + ["--domain", "shop", "--out", str(out), "--home", str(home)]
    )
    assert status == 0
    assert "serving" not in written_once(writes, out)
    assert not (learn_cache(str(home), SHOP) / "drafts").exists()  # learned into --out


@pytest.mark.slow  # a whole ingest and learn, and one per fold
def test_learn_calibrated_writes_the_finished_flow_once(writes, tmp_path: Path, capsys) -> None:
    split = json.loads((TAU2 / "domains/retail/split_tasks.json").read_text())
    logs = unannotated_retail_logs(tmp_path, split["train"][:16])
    out, home = tmp_path / "retail.flow.json", tmp_path / "home"
    status = main(
        ["learn", "--habit-only", "--calibrate", "--costs", "5824,2467", "--sessions", str(logs)]
        + ["--manifest", str(tmp_path / "retail.manifest.json"), "--domain", "retail"]
        + ["--out", str(out), "--home", str(home)]
    )
    assert status == 0
    flow = written_once(writes, out)
    assert flow["serving"]["threshold"] == 0.2976
    assert 0 < flow["calibration"]["reach"]["used"] < flow["calibration"]["reach"]["options"]
    said = capsys.readouterr().out
    assert "and wrote" not in said and said.endswith(f"; wrote {out}\n")
    no_draft_left(home, logs)


@pytest.mark.slow  # τ²-bench results converted, ingested, learned, and one learn per fold
def test_compile_calibrated_writes_the_finished_flow_once(writes, tmp_path: Path) -> None:
    out = tmp_path / "retail.flow.json"
    assert compile_small_retail(tmp_path, out) == 0
    flow = written_once(writes, out)
    assert flow["serving"]["threshold"] == 0.2976 and flow["calibration"]["reach"]["folds"] == 5
