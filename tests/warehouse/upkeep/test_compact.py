"""Compaction: a partition's current rows rewritten into one file, the files it replaces
retired in the same commit and deleted only after the grace period."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tests.conftest import REFERENCE_HOME, ROOT
from tests.warehouse.helpers import ingest, rows
from warehouse import store
from warehouse.columns import DOCS
from warehouse.layout import TABLES, Layout
from warehouse.upkeep import compact

SHOP = sorted((REFERENCE_HOME / "logs/shop").glob("*.jsonl"))
COUNT_ALL = " UNION ALL ".join(f"SELECT '{t}' AS t, count(*) AS n FROM {t}" for t in TABLES)


def data_files(home: Path) -> list[str]:
    return [r["path"] for r in rows(home, "SELECT path FROM data_files ORDER BY path")]


@pytest.mark.slow  # several ingest runs
def test_compaction_leaves_one_file_per_partition_and_the_same_rows(tmp_path: Path) -> None:
    home = tmp_path / "home"
    logs = home / "logs/shop"
    logs.mkdir(parents=True)
    for log in SHOP[:3]:
        shutil.copy(log, logs)
    ingest(home)
    for log in SHOP[3:]:
        shutil.copy(log, logs)
    ingest(home)
    grown = logs / SHOP[0].name  # a log that grew: its session's old rows are superseded
    with grown.open("a") as f:
        f.write('{"t_ms":99999,"from":"context","message":{"role":"user","content":"more"}}\n')
    ingest(home)
    before = {r["t"]: r["n"] for r in rows(home, COUNT_ALL)}
    files_before = data_files(home)
    layout = Layout.at(home)
    with store.ingest_lock(layout, 10, print):
        done = compact.compact(layout, "compact-1")
    assert done["partitions"] > 0 and done["files retired"] > done["partitions"]
    assert {r["t"]: r["n"] for r in rows(home, COUNT_ALL)} == before
    after = data_files(home)
    per_partition = [re.sub(r"/[^/]+$", "", p) for p in after]
    assert len(per_partition) == len(set(per_partition))  # one file per table, domain, day
    # the retired files stay for readers that opened the views before; a later run past the
    # grace period deletes them
    assert all((home / p).exists() for p in files_before)
    with store.ingest_lock(layout, 10, print):
        again = compact.compact(layout, "compact-2", grace_seconds=0)
    assert again["files deleted"] == len(set(files_before) - set(after))
    assert again["partitions"] == 0
    assert {r["t"]: r["n"] for r in rows(home, COUNT_ALL)} == before
    assert not any((home / p).exists() for p in set(files_before) - set(after))


def test_every_column_is_described_and_named_in_formats_md() -> None:
    text = (ROOT / "docs/formats.md").read_text()
    section = text[text.index("## 2. The warehouse") : text.index("## 3. The flow file")]
    for table, columns in TABLES.items():
        assert set(DOCS[table]) == {name for name, _ in columns}, table
        for name in DOCS[table]:
            assert f"`{name}`" in section, (table, name)
