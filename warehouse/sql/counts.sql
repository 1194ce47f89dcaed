-- The counts a flow is made of (../shared/spec/algorithms.md §2–4), as group-bys over steps.
-- Input: `learn_steps(session, step, action, kind, outcome, session_order, part)` — the steps
-- of the sessions to learn from, the order they are learned in, and the partition (domain and
-- day) each session is counted under — and `kinds(tool, kind)`. Every count is per `part`:
-- counts of disjoint sets of sessions add up (warehouse/daycounts.py sums them).
-- Histories are readable step names: `tool`, `tool (error)`, `respond` (a reply the user
-- answered), `respond (end)`; `<start>` pads a history shorter than two steps.

-- name: histories
-- Each step as small integers, its last two steps (for sites, the step before it and this
-- one are a call and the lookup after it) and the segment it is in (steps between two writes
-- share one; for reach) and its place `g` in learning order (from 1): one pass over the
-- sorted steps.
-- A step's names (action, symbol, part, kind flags) are few distinct rows, so they are kept
-- once in `step_names` and each step carries only its row's `id` (strings carried through
-- the window's sort, and hashed by every group-by, cost the pass most); the counts group by
-- ids and join the names back to their few groups. A session is its `session_order`.
CREATE OR REPLACE TEMP TABLE step_names AS
WITH seen AS (
    SELECT DISTINCT action, kind = 'tool' AS is_tool, outcome = 'failed' AS failed,
           outcome = 'reply' AS reply, part
    FROM learn_steps
)
SELECT (row_number() OVER ())::INTEGER AS id,
       (dense_rank() OVER (ORDER BY s.action))::INTEGER AS action_id,
       s.action, s.is_tool, s.failed, s.reply, s.part,
       CASE WHEN s.is_tool THEN s.action || CASE WHEN s.failed THEN ' (error)' ELSE '' END
            WHEN s.reply THEN {RESPOND}
            ELSE {RESPOND_END} END AS symbol,
       s.is_tool AND coalesce(k.kind = 'write', false) AS is_write,
       s.is_tool AND coalesce(k.kind = 'read', false) AS is_read
FROM seen s LEFT JOIN kinds k ON k.tool = s.action;
CREATE OR REPLACE TEMP TABLE histories AS
WITH coded AS (
    SELECT s.session_order, s.step, n.id, n.action_id, n.is_write
    FROM learn_steps s JOIN step_names n
      ON s.action IS NOT DISTINCT FROM n.action
     AND (s.kind = 'tool') IS NOT DISTINCT FROM n.is_tool
     AND (s.outcome = 'failed') IS NOT DISTINCT FROM n.failed
     AND (s.outcome = 'reply') IS NOT DISTINCT FROM n.reply
     AND s.part IS NOT DISTINCT FROM n.part
    ORDER BY s.session_order, s.step
), walked AS (
    -- Windows over () stream over the sorted steps (one sort, no per-session partitions: a
    -- partitioned window costs several times the sort); a neighbour counts only when it is of
    -- the same session. `written` counts the writes up to each step in that order, so the steps
    -- of one session between two writes share a value: their segment.
    SELECT *, lag(id, 1) OVER () AS p1, lag(session_order, 1) OVER () AS p1_order,
           lag(id, 2) OVER () AS p2, lag(session_order, 2) OVER () AS p2_order,
           row_number() OVER () AS g,
           -- (a running count, not a sum: DuckDB sums integers as HUGEINT, at twice the cost)
           count(*) FILTER (WHERE is_write)
               OVER (ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS written
    FROM coded
)
SELECT session_order, step, id, action_id, is_write,
       CASE WHEN p1_order = session_order THEN p1 END AS p1,
       CASE WHEN p2_order = session_order THEN p2 END AS p2,
       (written - coalesce(is_write, false)::INTEGER)::BIGINT AS segment, g
FROM walked;

-- name: habit
-- n(c, a): at each level, how often action a followed history c (grouped by ids, then named).
WITH coded AS (
    SELECT id, p1, p2, count(*) AS n FROM histories GROUP BY ALL
), named AS (
    SELECT a.part, a.action, coalesce(s1.symbol, '<start>') AS h1,
           coalesce(s2.symbol, '<start>') AS h2, c.n
    FROM coded c JOIN step_names a ON a.id = c.id
    LEFT JOIN step_names s1 ON s1.id = c.p1 LEFT JOIN step_names s2 ON s2.id = c.p2
)
SELECT part, CASE WHEN h1 IS NULL THEN 0 WHEN h2 IS NULL THEN 1 ELSE 2 END AS level,
       h2, h1, action, sum(n)::DOUBLE AS n
FROM named
GROUP BY GROUPING SETS ((part, action), (part, h1, action), (part, h2, h1, action));

-- name: reach
-- m(c, a): at each level, from how many steps after history c action a occurred (at that
-- step or later) before the agent's next write. A step's reach is the actions of its segment
-- from that step on, so a occurs in it when the step comes at or before a's last place in
-- the segment; writes never count, and a write's own reach is empty.
-- (The action is carried as its action_id, not a step's id: fewer groups to count.)
WITH last_place AS (
    SELECT session_order, segment, action_id, max(step) AS last_step
    FROM histories WHERE NOT is_write GROUP BY session_order, segment, action_id
), coded AS (
    SELECT h.id AS at, h.p1, h.p2, l.action_id, count(*) AS n
    FROM (SELECT session_order, segment, step, id, p1, p2 FROM histories) h
    JOIN last_place l
      ON l.session_order = h.session_order AND l.segment = h.segment AND h.step <= l.last_step
    GROUP BY ALL
), named AS (
    SELECT t.part, a.action, coalesce(s1.symbol, '<start>') AS h1,
           coalesce(s2.symbol, '<start>') AS h2, c.n
    FROM coded c JOIN step_names t ON t.id = c.at
    JOIN (SELECT DISTINCT action_id, action FROM step_names) a ON a.action_id = c.action_id
    LEFT JOIN step_names s1 ON s1.id = c.p1 LEFT JOIN step_names s2 ON s2.id = c.p2
)
SELECT part, CASE WHEN h1 IS NULL THEN 0 WHEN h2 IS NULL THEN 1 ELSE 2 END AS level,
       h2, h1, action, sum(n)::DOUBLE AS n
FROM named
GROUP BY GROUPING SETS ((part, action), (part, h1, action), (part, h2, h1, action));

-- name: sites
-- After each call that succeeded or failed: the reads the agent made right after it.
WITH coded AS (
    SELECT p1, id, count(*) AS n FROM histories WHERE p1 IS NOT NULL GROUP BY ALL
)
SELECT a.part, a.action AS after, a.failed, b.action AS lookup, sum(c.n) AS n
FROM coded c JOIN step_names a ON a.id = c.p1 JOIN step_names b ON b.id = c.id
WHERE a.is_tool AND b.is_read
GROUP BY ALL;

-- name: part_steps
-- How many steps each part holds.
SELECT n.part, sum(c.n) AS n
FROM (SELECT id, count(*) AS n FROM histories GROUP BY id) c JOIN step_names n USING (id)
GROUP BY n.part;

-- name: prequential_stop
-- The session of the step just past the walk's limit (none: every session fits): the walk
-- ends before it. Its own statement, so that the walk's bound is a constant the scan of
-- `histories` can filter on.
SELECT session_order FROM histories WHERE g = greatest($max_steps - $prior_steps + 1, 1);

-- name: prequential_steps
-- For fitting α: the steps an online learner walks, in learning order. It walks the first
-- sessions, whole, while the steps so far stay within a limit: those before session
-- $before (`prequential_stop`). The sessions of `histories` come after steps already walked
-- (warehouse/alphafit.py keeps a walk and continues it). Sessions are whole runs of `g`; the
-- walked steps keep their `g`. Keys number the names (a history's with '<start>'), equal
-- where the names are, for the walk's running counts.
CREATE OR REPLACE TEMP TABLE prequential_steps AS
WITH symbols AS (
    SELECT symbol, row_number() OVER () AS key
    FROM (SELECT symbol FROM step_names UNION SELECT '<start>')
), named AS (
    SELECT h.session_order, h.g, a.action, a.action_id AS action_key,
           coalesce(s1.symbol, '<start>') AS h1, coalesce(s2.symbol, '<start>') AS h2
    FROM histories h JOIN step_names a ON a.id = h.id
    LEFT JOIN step_names s1 ON s1.id = h.p1 LEFT JOIN step_names s2 ON s2.id = h.p2
    WHERE h.session_order < $before
)
SELECT n.session_order, n.action, n.h1, n.h2, n.g, n.action_key, k1.key AS h1_key,
       k2.key AS h2_key
FROM named n JOIN symbols k1 ON k1.symbol = n.h1 JOIN symbols k2 ON k2.symbol = n.h2;

-- name: prequential
-- Each walked step, in learning order: its keys, and n(c) and n(c, a) at each level over the
-- steps walked before this walk only (`prior(level, h2, h1, action, n)`: n(c, a) over them,
-- h2 and h1 NULL where the level does not use them). warehouse/alphafit.py adds the counts
-- over this walk's own earlier steps, each key's running count, with one stable sort per key
-- (five partitioned windows here cost several times more).
WITH c1 AS (
    SELECT h1, sum(n) AS n FROM prior WHERE level = 1 GROUP BY h1
), c2 AS (
    SELECT h2, h1, sum(n) AS n FROM prior WHERE level = 2 GROUP BY h2, h1
)
SELECT w.g, w.action_key, w.h1_key, w.h2_key,
       coalesce(a0.n, 0) AS na0, coalesce(c1.n, 0) AS n1, coalesce(a1.n, 0) AS na1,
       coalesce(c2.n, 0) AS n2, coalesce(a2.n, 0) AS na2
FROM prequential_steps w
LEFT JOIN prior a0 ON a0.level = 0 AND a0.action = w.action
LEFT JOIN c1 ON c1.h1 = w.h1
LEFT JOIN prior a1 ON a1.level = 1 AND a1.h1 = w.h1 AND a1.action = w.action
LEFT JOIN c2 ON c2.h2 = w.h2 AND c2.h1 = w.h1
LEFT JOIN prior a2 ON a2.level = 2 AND a2.h2 = w.h2 AND a2.h1 = w.h1 AND a2.action = w.action
ORDER BY w.g;

-- name: prequential_seen
-- n(c, a) over the walked steps at each level (added to `prior` for the walk's next part).
SELECT CASE WHEN h1 IS NULL THEN 0 WHEN h2 IS NULL THEN 1 ELSE 2 END AS level,
       h2, h1, action, count(*) AS n
FROM prequential_steps
GROUP BY GROUPING SETS ((action), (h1, action), (h2, h1, action));
