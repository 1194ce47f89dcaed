-- The rows one ingest batch adds to each table (after warehouse/sql/ingest.sql and the turn
-- and tool-list passes in warehouse/ingest.py). Each query ends with the partition keys
-- `domain` and `day`.

-- name: file_meta
CREATE OR REPLACE TEMP TABLE file_meta AS
WITH meta AS (
    SELECT h.file, h.rel, h.content_hash, h.size_bytes, h.ingest_id, h.file_error,
           h.header_json AS header,
           h.header_json ->> '$.session' AS session,
           CASE WHEN json_type(h.header_json, '$.domain') = 'VARCHAR'
                THEN h.header_json ->> '$.domain' END AS header_domain,
           h.domain_hint,
           CASE WHEN json_type(h.header_json, '$.started_unix_ms') IN ('UBIGINT', 'BIGINT')
                THEN TRY_CAST(h.header_json ->> '$.started_unix_ms' AS BIGINT) END AS header_started
    FROM headers h
), started AS (
    SELECT *, CASE WHEN header_started BETWEEN 0 AND 253402300799999 THEN header_started END
                  AS started_unix_ms
    FROM meta
)
SELECT * EXCLUDE (header_domain, domain_hint, header_started),
       -- a quarantined file's partition: its header's domain if valid, else its folder's
       CASE WHEN file_error IS NULL THEN coalesce(header_domain, 'mcp')
            WHEN regexp_full_match(header_domain, '{domain_pattern}') THEN header_domain
            WHEN regexp_full_match(domain_hint, '{domain_pattern}') THEN domain_hint
            ELSE 'mcp' END AS domain,
       -- the partition day of every row the file adds
       CAST(make_timestamp(started_unix_ms * 1000) AS DATE) AS day
FROM started;

-- name: sessions
SELECT m.session,
       coalesce(m.header ->> '$.agent_model', ci.client_name, 'unknown') AS agent_model,
       m.header ->> '$.agent_model' AS header_agent_model,
       ci.client_name,
       CAST(coalesce(json_extract_string(m.header, '$.server_command[*]'), []) AS VARCHAR[]) AS server_command,
       (m.header ->> '$.stretto_mcp_log')::INTEGER AS log_version,
       m.started_unix_ms,
       make_timestamp(m.started_unix_ms * 1000) AS started_at,
       m.rel AS file, m.content_hash, m.size_bytes,
       n.lines_read, n.lines_ingested, n.lines_quarantined, n.lines_dropped, n.torn_last_line,
       ts.snapshot AS tools_snapshot,
       json_merge_patch(m.header, '{"stretto_mcp_log":null,"session":null,"started_unix_ms":null,"server_command":null,"domain":null,"agent_model":null,"host_session":null,"server_name":null}') AS header_extra,
       CASE WHEN json_type(m.header, '$.reward') IN ('DOUBLE', 'UBIGINT', 'BIGINT')
            THEN (m.header ->> '$.reward')::DOUBLE END AS reward,
       CASE WHEN json_type(m.header, '$.host_session') = 'VARCHAR'
            THEN m.header ->> '$.host_session' END AS host_session,
       CASE WHEN json_type(m.header, '$.server_name') = 'VARCHAR'
            THEN m.header ->> '$.server_name' END AS server_name,
       m.ingest_id, m.domain, m.day
FROM file_meta m
JOIN line_counts n USING (file)
LEFT JOIN (SELECT session, arg_max(client_name, seq) AS client_name
           FROM rpc WHERE sender = 'client' AND method = 'initialize' AND client_name IS NOT NULL
           GROUP BY session) ci USING (session)
LEFT JOIN (SELECT session, string_agg(snapshot, ',' ORDER BY seq) AS snapshot
           FROM tool_lists GROUP BY session) ts USING (session)
WHERE m.file_error IS NULL;

-- name: messages
SELECT w.session, w.seq, w.t_ms, w.sender,
       CASE WHEN w.body IS NULL THEN 'raw'
            WHEN w.sender = 'context' THEN 'context'
            WHEN starts_with(w.body, '[') THEN 'batch'
            WHEN NOT starts_with(w.body, '{') THEN 'other'
            WHEN r.method IS NOT NULL AND r.rpc_id IS NOT NULL THEN 'request'
            WHEN r.method IS NOT NULL THEN 'notification'
            WHEN r.is_response THEN 'response'
            ELSE 'other' END AS kind,
       r.method, r.rpc_id,
       coalesce(r.is_response AND r.failed, false) AS is_error,
       strlen(coalesce(w.body, w.raw))::INTEGER AS size_bytes,
       coalesce(w.body, w.raw) AS body,
       m.ingest_id, m.domain, m.day
FROM wire w
JOIN file_meta m USING (file)
LEFT JOIN rpc r ON r.session = w.session AND r.seq = w.seq AND r.sub = 0
                AND starts_with(w.body, '{')
WHERE w.problem IS NULL;

-- name: calls
SELECT q.session, q.rpc_id AS call_id, q.tool, q.arguments, q.sender = 'proxy' AS by_proxy,
       t.turn, t.sent_after AS sent_after_results,
       q.seq AS sent_seq, q.sub AS sent_sub, q.t_ms AS sent_ms, r.seq AS answered_seq, r.t_ms AS answered_ms,
       r.sender AS answered_by,
       CASE WHEN r.seq IS NULL THEN 'unanswered' WHEN r.failed THEN 'failed' ELSE 'ok' END AS status,
       coalesce(c.cancelled, false) AS cancelled,
       r.content AS result_text,
       m.ingest_id, m.domain, m.day
FROM requests q
JOIN file_meta m ON m.session = q.session AND m.file_error IS NULL
LEFT JOIN results r ON r.session = q.session AND r.req_seq = q.seq AND r.req_sub = q.sub
LEFT JOIN turns t ON t.session = q.session AND t.seq = q.seq AND t.sub = q.sub
LEFT JOIN (SELECT session, seq, sub, true AS cancelled FROM cancelled_calls) c
       ON c.session = q.session AND c.seq = q.seq AND c.sub = q.sub
WHERE q.tool IS NOT NULL;

-- name: context
SELECT s.session, s.seq, s.t_ms, s.role, s.content,
       m.ingest_id, m.domain, m.day
FROM said s JOIN file_meta m ON m.session = s.session AND m.file_error IS NULL;

-- name: tools
SELECT l.session, d.tool, d.kind, d.contract, d.summary, d.arg_docs, d.input_schema,
       l.snapshot,
       m.ingest_id, m.domain, m.day
FROM tool_lists l
JOIN tool_defs d USING (snapshot)
JOIN file_meta m ON m.session = l.session AND m.file_error IS NULL
QUALIFY row_number() OVER (PARTITION BY l.session, d.tool ORDER BY l.seq DESC) = 1;

-- name: quarantine
WITH whole AS (
    -- files quarantined whole (few): every non-blank line, or one row for a file without any
    SELECT m.*, n.lines_quarantined
    FROM file_meta m JOIN line_counts n USING (file) WHERE m.file_error IS NOT NULL
)
SELECT m.rel AS file, w.seq AS line, regexp_replace(w.problem, '^quarantined: ', '') AS error,
       w.line AS raw, w.session, m.content_hash,
       m.ingest_id, m.domain, coalesce(m.day, current_date) AS day
FROM wire w JOIN file_meta m USING (file)
WHERE w.problem LIKE 'quarantined:%'
UNION ALL
SELECT m.rel, l.line_no, m.file_error, l.line, m.session, m.content_hash,
       m.ingest_id, m.domain, coalesce(m.day, current_date)
FROM whole m JOIN lines l USING (file)
WHERE m.lines_quarantined > 0 AND trim(l.line, ' ' || chr(9) || chr(13)) <> ''
UNION ALL
SELECT m.rel, NULL, m.file_error, NULL, m.session, m.content_hash,
       m.ingest_id, m.domain, coalesce(m.day, current_date)
FROM whole m
WHERE m.lines_quarantined = 0;
