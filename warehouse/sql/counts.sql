-- The counts a flow is made of (../shared/spec/algorithms.md §2–4), as group-bys over steps.
-- Input: `learn_steps(session, step, action, kind, outcome, session_order, part)` — the steps
-- of the sessions to learn from, the order they are learned in, and the partition (domain and
-- day) each session is counted under — and `kinds(tool, kind)`. Every count is per `part`:
-- counts of disjoint sets of sessions add up (warehouse/daycounts.py sums them).
-- Histories are readable step names: `tool`, `tool (error)`, `respond` (a reply the user
-- answered), `respond (end)`; `<start>` pads a history shorter than two steps.

-- name: histories
-- Each step with its name, its last two steps, the segment it is in (steps between two writes
-- share one; for reach) and the step after it (for sites): one pass over the steps.
CREATE OR REPLACE TEMP TABLE histories AS
WITH named AS (
    SELECT s.session, s.step, s.action, s.kind, s.outcome, s.session_order, s.part,
           CASE WHEN s.kind = 'tool'
                    THEN s.action || CASE WHEN s.outcome = 'failed' THEN ' (error)' ELSE '' END
                WHEN s.outcome = 'reply' THEN 'respond'
                ELSE 'respond (end)' END AS symbol,
           s.kind = 'tool' AND coalesce(k.kind = 'write', false) AS is_write,
           CASE WHEN s.kind = 'tool' THEN coalesce(k.kind, 'generic') END AS tool_kind
    FROM learn_steps s LEFT JOIN kinds k ON k.tool = s.action
)
SELECT session, step, action, is_write, kind, outcome, session_order, part,
       coalesce(lag(symbol, 1) OVER w, '<start>') AS h1,
       coalesce(lag(symbol, 2) OVER w, '<start>') AS h2,
       coalesce(sum(is_write::INTEGER) OVER (w ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING),
                0) AS segment,
       lead(action) OVER w AS next_action, lead(kind) OVER w AS next_kind,
       lead(tool_kind) OVER w AS next_tool_kind
FROM named
WINDOW w AS (PARTITION BY session ORDER BY step);

-- name: habit
-- n(c, a): at each level, how often action a followed history c.
SELECT part, CASE WHEN h1 IS NULL THEN 0 WHEN h2 IS NULL THEN 1 ELSE 2 END AS level,
       h2, h1, action, count(*)::DOUBLE AS n
FROM histories
GROUP BY GROUPING SETS ((part, action), (part, h1, action), (part, h2, h1, action));

-- name: reach
-- m(c, a): at each level, from how many steps after history c action a occurred (at that
-- step or later) before the agent's next write. A step's reach is the actions of its segment
-- from that step on, so a occurs in it when the step comes at or before a's last place in
-- the segment; writes never count, and a write's own reach is empty.
WITH last_place AS (
    SELECT session, segment, action, max(step) AS last_step
    FROM histories WHERE NOT is_write GROUP BY ALL
)
SELECT h.part, CASE WHEN h.h1 IS NULL THEN 0 WHEN h.h2 IS NULL THEN 1 ELSE 2 END AS level,
       h.h2, h.h1, l.action, count(*)::DOUBLE AS n
FROM (SELECT session, segment, step, h1, h2, part FROM histories) h
JOIN last_place l ON l.session = h.session AND l.segment = h.segment AND h.step <= l.last_step
GROUP BY GROUPING SETS ((h.part, l.action), (h.part, h.h1, l.action),
                        (h.part, h.h2, h.h1, l.action));

-- name: sites
-- After each call that succeeded or failed: the reads the agent made right after it.
SELECT part, action AS after, outcome = 'failed' AS failed, next_action AS lookup,
       count(*) AS n
FROM histories
WHERE kind = 'tool' AND next_kind = 'tool' AND next_tool_kind = 'read'
GROUP BY ALL;

-- name: part_steps
-- How many steps each part holds.
SELECT part, count(*) AS n FROM histories GROUP BY part;

-- name: prequential
-- For fitting α: the steps of the first sessions (up to $max_steps steps, whole sessions) in
-- learning order, each with what an online learner had seen before it, at each level: n(c)
-- and n(c, a) over the steps before it.
WITH sizes AS (
    SELECT session_order, count(*) AS n FROM histories GROUP BY session_order
), cutoff AS (
    SELECT coalesce(max(session_order), -1) AS last_order FROM (
        SELECT session_order, sum(n) OVER (ORDER BY session_order) AS upto FROM sizes)
    WHERE upto <= $max_steps
), early AS (
    SELECT *, row_number() OVER (ORDER BY session_order, step) AS g
    FROM histories WHERE session_order <= (SELECT last_order FROM cutoff)
)
SELECT
    count(*) OVER (ORDER BY g ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS n0,
    count(*) OVER (PARTITION BY action ORDER BY g
                   ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS na0,
    count(*) OVER (PARTITION BY h1 ORDER BY g
                   ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS n1,
    count(*) OVER (PARTITION BY h1, action ORDER BY g
                   ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS na1,
    count(*) OVER (PARTITION BY h2, h1 ORDER BY g
                   ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS n2,
    count(*) OVER (PARTITION BY h2, h1, action ORDER BY g
                   ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS na2
FROM early;
