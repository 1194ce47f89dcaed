-- Each session's abstract steps (../shared/spec/algorithms.md §1.1; docs/formats.md §2): one
-- step per tool call (ok, or failed when it failed or got no answer) and one per assistant
-- reply (`reply` when the user answered it before the next call or reply, else `end`), in log
-- order. Runs over the warehouse views for the sessions in `pending_steps(session, ingest_id)`.

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
    SELECT session, seq, 0, 'respond', 'reply', NULL, NULL, false, ingest_id, domain, day
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
