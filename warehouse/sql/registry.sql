-- What the registry (warehouse/registry/*.parquet, loaded as the table `registry`) says is
-- current. Each ingest run commits one registry file: a `log` row for every log file it
-- looked at, a `data` row for every Parquet file it wrote. Nothing is current until its
-- run has committed, so the files of a run that crashed are never read.
-- The `{temp} VIEW`s are computed when read: each holds a row per log seen (a million, with
-- every column, for a first ingest of a large archive), and only discovery, the steps run and
-- a person at `stretto sql` read them. The `{temp} TABLE`s are read by every table's view.

-- name: log_entries
CREATE OR REPLACE {temp} VIEW log_entries AS
SELECT commit_no, ingest_id, committed_at, path, size_bytes, mtime_ns, content_hash, session,
       status, note
FROM registry WHERE kind = 'log';

-- name: path_latest
-- What each path held when it was last looked at.
CREATE OR REPLACE {temp} VIEW path_latest AS
SELECT * FROM log_entries
QUALIFY row_number() OVER (PARTITION BY path ORDER BY commit_no DESC) = 1;

-- name: content_holder
-- For each content (hash): the run that wrote its rows (ingested, or quarantined whole).
CREATE OR REPLACE {temp} VIEW content_holder AS
SELECT * FROM log_entries WHERE status IN ('ingested', 'quarantined', 'conflict')
QUALIFY row_number() OVER (PARTITION BY content_hash ORDER BY commit_no DESC) = 1;

-- name: session_current
-- For each session id: its current content, the latest one ingested.
CREATE OR REPLACE {temp} TABLE session_current AS
SELECT session, content_hash, ingest_id, size_bytes FROM log_entries WHERE status = 'ingested'
QUALIFY row_number() OVER (PARTITION BY session ORDER BY commit_no DESC) = 1;

-- name: content_path
-- Where each content was last seen (a log moved to archive/ is shown at its new place).
CREATE OR REPLACE {temp} TABLE content_path AS
SELECT content_hash, path FROM log_entries
QUALIFY row_number() OVER (PARTITION BY content_hash ORDER BY commit_no DESC) = 1;

-- name: live_quarantine
-- The contents whose quarantined lines are shown: a content some path still holds, and, for
-- a content that was ingested, only while it is its session's current one.
CREATE OR REPLACE {temp} TABLE live_quarantine AS
SELECT h.content_hash, h.ingest_id FROM content_holder h
WHERE h.content_hash IN (SELECT content_hash FROM path_latest)
  AND (h.status <> 'ingested'
       OR EXISTS (SELECT 1 FROM session_current c
                  WHERE c.session = h.session AND c.content_hash = h.content_hash));

-- name: data_files
-- The data files of each table, less those a retention run dropped (`dropped`) or a
-- compaction replaced (`retired`).
CREATE OR REPLACE {temp} TABLE data_files AS
SELECT table_name, path, rows, ingest_id, commit_no, size_bytes FROM registry WHERE kind = 'data'
  AND path NOT IN (SELECT path FROM registry WHERE kind IN ('dropped', 'retired'));
