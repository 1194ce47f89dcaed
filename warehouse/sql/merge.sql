-- Several servers in one host session (docs/formats.md §2, "Several servers in one host
-- session"): the rows of the logs learning merges, rewritten as one session each. Input:
-- `members(session, unit, prefix, member_rank, started_unix_ms, reward)` — every log of a
-- server with a name (`--server-name`), the unit (merged session) it belongs to, the name its
-- tools take (`prefix::tool`), its place among the unit's logs and its reward (the rewards
-- file's, else its header's). Run in order, on the catalogue's views; warehouse/merge.py then
-- points the views at these tables.

-- name: merged_sessions
-- The units as sessions, what planning reads (warehouse/partcount.py): the first log's row (its
-- domain, day, start, model and the rest) under the unit's id, the least reward of its logs,
-- and an ingest_id of its own: a digest of its logs' ids and ingest runs, so it changes when
-- any of them is ingested again and is never a log's own (a part's counts, keyed by its
-- sessions' ids and ingest runs, never mix merged and unmerged rows). The unit's rows below
-- carry it too.
CREATE OR REPLACE TEMP TABLE merged_sessions AS
WITH unit AS (
    SELECT mb.unit,
           'merged-' || md5(string_agg(s.session || ' ' || s.ingest_id, ' '
                                       ORDER BY mb.member_rank)) AS ingest_id,
           min(mb.reward) AS reward
    FROM sessions s JOIN members mb USING (session)
    GROUP BY mb.unit
)
SELECT s.* REPLACE (mb.unit AS session, u.ingest_id AS ingest_id, u.reward AS reward)
FROM sessions s
JOIN members mb USING (session)
JOIN unit u USING (unit)
WHERE mb.member_rank = 0;

-- name: merged_order
-- Every line of the unit's logs in one order: by wall-clock time (the log's start plus t_ms;
-- the proxy's clock, ms), then the log, then the line. Within one log the order is the file's.
CREATE OR REPLACE TEMP TABLE merged_order AS
SELECT x.session, x.seq, mb.unit, mb.started_unix_ms + x.t_ms - u.unit_start AS merged_ms,
       (row_number() OVER (PARTITION BY mb.unit
                           ORDER BY mb.started_unix_ms + x.t_ms, mb.member_rank, x.seq))::INTEGER
           AS merged_seq
FROM messages x
JOIN members mb USING (session)
JOIN (SELECT unit, min(started_unix_ms) AS unit_start FROM members GROUP BY unit) u USING (unit);

-- name: merged_calls
-- Calls: the unit's session, tool names and call ids prefixed, lines renumbered. LLM turns:
-- each log's own (one turn never spans two servers: each proxy sees only its server's calls),
-- split where another server's call comes between two of its calls, numbered in the unit's
-- order.
CREATE OR REPLACE TEMP TABLE merged_calls AS
WITH rewritten AS (
    SELECT mb.unit AS session, mb.prefix || '::' || c.call_id AS call_id,
           mb.prefix || '::' || c.tool AS tool, c.arguments, c.by_proxy,
           c.session AS member, c.turn AS member_turn,
           c.sent_after_results, s.merged_seq AS sent_seq, c.sent_sub, s.merged_ms AS sent_ms,
           a.merged_seq AS answered_seq, a.merged_ms AS answered_ms, c.answered_by, c.status,
           c.cancelled, c.result_text, ms.ingest_id, c.domain, c.day
    FROM calls c
    JOIN members mb USING (session)
    JOIN merged_sessions ms ON ms.session = mb.unit
    JOIN merged_order s ON s.session = c.session AND s.seq = c.sent_seq
    LEFT JOIN merged_order a ON a.session = c.session AND a.seq = c.answered_seq
), marked AS (
    SELECT *,
           CASE WHEN lag(member) OVER w = member
                     AND lag(member_turn) OVER w IS NOT DISTINCT FROM member_turn
                THEN 0 ELSE 1 END AS starts_turn
    FROM rewritten
    WINDOW w AS (PARTITION BY session ORDER BY sent_seq, sent_sub)
)
SELECT * EXCLUDE (member, member_turn, starts_turn),
       (sum(starts_turn) OVER (PARTITION BY session ORDER BY sent_seq, sent_sub
                               ROWS UNBOUNDED PRECEDING) - 1)::INTEGER AS turn
FROM marked;

-- name: merged_context
-- The conversation: from one log only, the unit's first that has any (every proxy given the
-- same --context file logs the same messages; the rest are copies).
CREATE OR REPLACE TEMP TABLE merged_context AS
WITH speaker AS (
    SELECT mb.unit, arg_min(mb.session, mb.member_rank) AS session
    FROM context c JOIN members mb USING (session)
    GROUP BY mb.unit
)
SELECT k.unit AS session, s.merged_seq AS seq, s.merged_ms AS t_ms, c.role, c.content,
       ms.ingest_id, c.domain, c.day
FROM context c
JOIN speaker k USING (session)
JOIN merged_sessions ms ON ms.session = k.unit
JOIN merged_order s ON s.session = c.session AND s.seq = c.seq;

-- name: merged_tools
CREATE OR REPLACE TEMP TABLE merged_tools AS
SELECT mb.unit AS session, mb.prefix || '::' || t.tool AS tool,
       t.* EXCLUDE (session, tool) REPLACE (ms.ingest_id AS ingest_id)
FROM tools t
JOIN members mb USING (session)
JOIN merged_sessions ms ON ms.session = mb.unit;
