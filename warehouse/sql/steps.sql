-- Each session's abstract steps (../shared/spec/algorithms.md §1.1; docs/formats.md §2): one
-- step per tool call (ok, or failed when it failed or got no answer) and one per assistant
-- reply (`reply` when the user answered it before the next call or reply, else `end`), in log
-- order. Runs over the warehouse views for the sessions in `pending_steps(session, ingest_id)`.
--
-- A run derives the steps of the sessions of the ingest runs no steps run has done yet (each
-- steps run marks the ingest runs it did: registry rows of kind `derived`), and reads only the
-- data files committed since the first of them (a run's rows are in its own files, or in a
-- compaction's, committed later): a nightly run reads the new day's files, not the archive.

-- name: steps_runs
-- The ingest runs holding a current session that no steps run has marked as done, with their
-- commit number.
CREATE OR REPLACE TEMP TABLE steps_runs AS
SELECT l.ingest_id, min(l.commit_no) AS commit_no FROM log_entries l
SEMI JOIN session_current c USING (ingest_id)
WHERE NOT EXISTS (SELECT 1 FROM registry d WHERE d.kind = 'derived'
                  AND d.table_name = 'steps' AND d.note = l.ingest_id)
GROUP BY l.ingest_id;

-- name: pending_steps
-- Their current sessions that have no steps yet (over the views of the files since the first
-- of them; a session retention dropped has no row in `sessions`).
CREATE OR REPLACE TEMP TABLE pending_steps AS
SELECT s.session, s.ingest_id FROM session_current s
SEMI JOIN steps_runs r USING (ingest_id)
SEMI JOIN sessions v USING (session, ingest_id)
WHERE NOT EXISTS (SELECT 1 FROM steps t WHERE t.session = s.session
                  AND t.ingest_id = s.ingest_id);

-- name: steps
WITH speaks AS (
    SELECT c.session, c.seq, c.role, c.ingest_id, c.domain, c.day FROM context c
    SEMI JOIN pending_steps p USING (session, ingest_id)
    WHERE c.role = 'user' OR (c.role = 'assistant'
          AND trim(c.content, ' ' || chr(9) || chr(10) || chr(11) || chr(12) || chr(13)) <> '')
), acts AS (
    SELECT c.session, c.sent_seq AS seq, c.sent_sub AS sub, c.tool AS action, 'tool' AS kind,
           CASE WHEN c.status = 'ok' THEN 'ok' ELSE 'failed' END AS outcome,
           c.call_id, c.by_proxy, c.ingest_id, c.domain, c.day
    FROM calls c SEMI JOIN pending_steps p USING (session, ingest_id)
    UNION ALL
    SELECT session, seq, 0, {RESPOND}, 'reply', NULL, NULL, false, ingest_id, domain, day
    FROM speaks WHERE role = 'assistant'
), ordered AS (
    SELECT *, lead(seq) OVER (PARTITION BY session ORDER BY seq, sub) AS next_seq,
           row_number() OVER (PARTITION BY session ORDER BY seq, sub) - 1 AS step
    FROM acts
), answered AS (
    SELECT DISTINCT o.session, o.seq
    FROM ordered o JOIN speaks u ON u.session = o.session AND u.role = 'user'
     AND u.seq > o.seq AND (o.next_seq IS NULL OR u.seq < o.next_seq)
    WHERE o.kind = 'reply'
)
SELECT o.session, o.step::INTEGER AS step, o.seq, o.action, o.kind,
       CASE WHEN o.kind = 'tool' THEN o.outcome
            WHEN a.seq IS NOT NULL THEN 'reply' ELSE 'end' END AS outcome,
       o.call_id, o.by_proxy, o.ingest_id, o.domain, o.day
FROM ordered o LEFT JOIN answered a ON a.session = o.session AND a.seq = o.seq;
