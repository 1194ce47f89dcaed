"""The warehouse's committed data on an object store (s3://bucket/prefix), against moto's S3
server over real HTTP: ingest, incremental ingest, learn and `stretto sql` give what a local
warehouse gives; a missing bucket or an unreachable endpoint is a one-line error, and no
credential is ever echoed."""

from __future__ import annotations

import json
import logging
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from moto.server import ThreadedMotoServer

from assets.learn import flow
from pipeline.run import materialize
from tests.builders import learn, stretto
from tests.conftest import REFERENCE_HOME, free_port
from tests.warehouse.helpers import ingest, learned
from warehouse import datastore, store
from warehouse.layout import TABLES, Layout
from warehouse.upkeep import compact

# starts moto's S3 server and ingests and learns on both sides of it
pytestmark = pytest.mark.slow

SHOP = sorted((REFERENCE_HOME / "logs/shop").glob("*.jsonl"))
SECRET = "sEcReT-never-shown-4711"


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # a line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=free_port(), verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def bucket(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """A new bucket on the test's S3 server, the environment pointing at it."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIATESTINGKEY")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.delenv("STRETTO_WAREHOUSE", raising=False)
    name = f"wh-{uuid.uuid4().hex[:12]}"
    boto3.client("s3").create_bucket(Bucket=name)
    return name


def objects(bucket: str, prefix: str) -> list[str]:
    """The objects under `prefix` (not the empty folder markers pyarrow leaves on delete)."""
    listed = boto3.client("s3").list_objects_v2(Bucket=bucket, Prefix=prefix)
    return sorted(o["Key"] for o in listed.get("Contents", []) if not o["Key"].endswith("/"))


def put_logs(home: Path, logs: list[Path]) -> None:
    folder = home / "logs/shop"
    folder.mkdir(parents=True, exist_ok=True)
    for log in logs:
        shutil.copy(log, folder / log.name)


def test_ingest_learn_and_query_on_s3_match_a_local_warehouse(
    tmp_path: Path, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"s3://{bucket}/wh"
    local, remote = tmp_path / "local", tmp_path / "remote"
    for home in (local, remote):
        put_logs(home, SHOP[:4])
    ingest(local)
    done = stretto("ingest", "--home", remote, "--warehouse", url, "--wait", "0")
    assert done.returncode == 0, done.stderr
    assert url in done.stdout
    # the data and the registry went to the bucket; only what is local stayed at home
    keys = objects(bucket, "wh/")
    assert any(k.startswith("wh/parquet/sessions/domain=shop/day=") for k in keys)
    assert len([k for k in keys if k.startswith("wh/registry/")]) == 2  # ingest, steps
    assert not (remote / "warehouse/parquet").exists()
    assert not (remote / "warehouse/registry").exists()
    assert (remote / "warehouse/ingest.lock").exists()
    assert learned(Layout.at(remote, url)) == learned(Layout.at(local))

    # a second ingest adds the other logs: only they are read
    for home in (local, remote):
        put_logs(home, SHOP[4:])
    ingest(local)
    again = stretto("ingest", "--home", remote, "--warehouse", url, "--wait", "0")
    assert again.returncode == 0, again.stderr
    assert f"ingested {len(SHOP) - 4} file(s) (4 unchanged)" in again.stdout
    assert learned(Layout.at(remote, url)) == learned(Layout.at(local))
    elsewhere_home = tmp_path / "elsewhere"
    # another machine's home (nothing local) reads the same warehouse
    elsewhere = learned(Layout.at(elsewhere_home, url))
    assert elsewhere == learned(Layout.at(local))
    assert elsewhere["provenance"]["habit_episodes"] > 4

    sql = "SELECT domain, count(*) AS n, sum(size_bytes) AS b FROM sessions GROUP BY ALL"
    expected = stretto("sql", "--home", local, sql, "--format", "json")
    found = stretto("sql", "--home", remote, "--warehouse", url, sql, "--format", "json")
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout) == json.loads(expected.stdout)
    assert json.loads(found.stdout)[0]["n"] == len(SHOP)
    # $STRETTO_WAREHOUSE says the same as --warehouse
    calls = "SELECT count(*) AS n FROM calls WHERE domain = 'shop'"
    local_calls = stretto("sql", "--home", local, calls, "--format", "json")
    monkeypatch.setenv("STRETTO_WAREHOUSE", url)
    counted = stretto("sql", "--home", elsewhere_home, calls, "--format", "json")
    assert counted.returncode == 0, counted.stderr
    assert json.loads(counted.stdout) == json.loads(local_calls.stdout)
    checked = stretto("doctor", "--home", elsewhere_home)
    assert f"{url}: {len(SHOP)} sessions" in checked.stdout + checked.stderr

    # the pipeline's `flow` asset, as Dagster runs it, with the URL from the environment
    assert materialize([flow], str(elsewhere_home), 10, partition="shop").success
    monkeypatch.delenv("STRETTO_WAREHOUSE")
    assert materialize([flow], str(local), 10, partition="shop").success
    served = [json.loads((h / "flows/shop.flow.json").read_text()) for h in (local, elsewhere_home)]
    provenance = [f.pop("provenance") for f in served]
    assert served[0] == served[1]
    assert provenance[0]["habit_episodes"] == provenance[1]["habit_episodes"] == len(SHOP)
    assert SECRET not in done.stdout + done.stderr + found.stderr + counted.stderr


def one_line_error(done) -> str:
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert SECRET not in done.stdout + done.stderr
    return lines[0]


def test_a_missing_bucket_is_a_one_line_error(tmp_path: Path, bucket: str) -> None:
    put_logs(tmp_path, SHOP[:1])
    url = f"s3://{bucket}-missing/wh"
    said = one_line_error(stretto("ingest", "--home", tmp_path, "--warehouse", url))
    assert f"the bucket {bucket}-missing does not exist" in said
    said = one_line_error(stretto("sql", "--home", tmp_path, "--warehouse", url, "SELECT 1"))
    assert "does not exist" in said
    assert not (tmp_path / "warehouse/parquet").exists()  # nothing fell back to the home


def test_an_unreachable_endpoint_is_a_one_line_error(
    tmp_path: Path, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")  # nobody listens
    put_logs(tmp_path, SHOP[:1])
    url = f"s3://{bucket}/wh"
    said = one_line_error(stretto("ingest", "--home", tmp_path, "--warehouse", url))
    assert said.startswith(f"stretto: ingest failed: {url}: cannot reach the object store")
    said = one_line_error(stretto("sql", "--home", tmp_path, "--warehouse", url, "SELECT 1"))
    assert "cannot reach the object store" in said


def test_credentials_in_the_url_are_refused_unechoed(tmp_path: Path, bucket: str) -> None:
    url = f"s3://AKIATESTINGKEY:{SECRET}@{bucket}/wh"
    said = one_line_error(stretto("sql", "--home", tmp_path, "--warehouse", url, "SELECT 1"))
    assert "credentials or options in the URL are refused" in said
    assert "AKIATESTINGKEY" not in said
    help_text = stretto("ingest", "--help").stdout
    assert "--warehouse URL" in help_text and SECRET not in help_text


def test_crash_recovery_compaction_and_retention_on_s3(tmp_path: Path, bucket: str) -> None:
    url = f"s3://{bucket}/wh"
    layout = Layout.at(tmp_path, url)
    count_all = " UNION ALL ".join(f"SELECT '{t}' AS t, count(*) AS n FROM {t}" for t in TABLES)

    def counts() -> dict:
        return {r["t"]: r["n"] for r in store.query(layout, count_all).to_pylist()}

    put_logs(tmp_path, SHOP[:3])
    assert stretto("ingest", "--home", tmp_path, "--warehouse", url).returncode == 0
    put_logs(tmp_path, SHOP[3:])
    assert stretto("ingest", "--home", tmp_path, "--warehouse", url).returncode == 0
    before = counts()

    # a run that uploaded a data file and died before its commit: invisible, then removed
    with store.ingest_lock(layout, 10, print):
        store.begin_run(layout, "crashed-1")
        orphan = tmp_path / "orphan.parquet"
        shutil.copy(tmp_path / "logs/shop" / SHOP[0].name, orphan)  # any bytes will do
        stored = "parquet/sessions/domain=shop/day=2026-01-01/part-crashed-1-0-x.parquet"
        datastore.committed(layout).put([(orphan, stored)])
        assert f"wh/{stored}" in objects(bucket, "wh/")
        assert counts() == before
        assert store.recover(layout) == ["crashed-1"]
    assert f"wh/{stored}" not in objects(bucket, "wh/")

    # compaction: one object per partition, the same rows; retired objects deleted later
    files_before = set(objects(bucket, "wh/parquet/"))
    with store.ingest_lock(layout, 10, print):
        done = compact.compact(layout, "compact-1")
    assert done["partitions"] > 0 and done["files retired"] > done["partitions"]
    assert counts() == before
    with store.ingest_lock(layout, 10, print):
        again = compact.compact(layout, "compact-2", grace_seconds=0)
    assert again["files deleted"] == done["files retired"]
    left = set(objects(bucket, "wh/parquet/"))
    assert not files_before & left and counts() == before

    # retention: everything is older than a day here; dropped in one commit, objects deleted
    dropped = stretto(
        "ingest", "--home", tmp_path, "--warehouse", url, "--retain-days", "1", "--wait", "0"
    )
    assert dropped.returncode == 0, dropped.stderr
    assert f"dropped {len(SHOP)} session(s)" in dropped.stderr
    assert counts()["sessions"] == 0
    assert objects(bucket, "wh/parquet/") == []


def test_learn_from_a_folder_keeps_its_warehouse_under_the_home(
    tmp_path: Path, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STRETTO_WAREHOUSE", f"s3://{bucket}/wh")
    done = learn(REFERENCE_HOME / "logs/shop", tmp_path / "shop.flow.json", tmp_path / "home")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "shop.flow.json").is_file()
    assert list((tmp_path / "home/cache/learn").glob("*/warehouse/registry/*.parquet"))
    assert objects(bucket, "") == []


def test_views_of_several_tables_on_one_connection_each_read_their_own_files(
    tmp_path: Path, bucket: str
) -> None:
    """Each view reads its own pyarrow dataset: on one connection (an asset's metadata) the
    views of every table, over all files and over the files since a commit or from a day, have
    their table's columns and rows, as on a local warehouse."""
    url = f"s3://{bucket}/wh"
    local, remote = tmp_path / "local", tmp_path / "remote"
    for home in (local, remote):
        put_logs(home, SHOP)
    ingest(local)
    assert stretto("ingest", "--home", remote, "--warehouse", url).returncode == 0

    def views(layout: Layout) -> dict:
        with store.reading(layout, views=False) as read:
            names = [read.view(t, s, d) for t in TABLES for s, d in ((0, ""), (1, "2000-01-01"))]
            return {
                name: (read(f"DESCRIBE {name}").column("column_name").to_pylist(), read.count(name))
                for name in names
            }

    found = views(Layout.at(remote, url))
    assert found == views(Layout.at(local))
    for table in TABLES:
        assert found[table][0][: len(TABLES[table])] == [n for n, _ in TABLES[table]]
