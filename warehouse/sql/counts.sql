-- The counts a flow is made of (../shared/spec/algorithms.md §2–4), as group-bys over steps.
-- Input: `learn_steps(session, step, action, kind, outcome, session_order, part)` — the steps
-- of the sessions to learn from, the order they are learned in, and the partition (domain and
-- day) each session is counted under — and `kinds(tool, kind)`. Every count is per `part`:
-- counts of disjoint sets of sessions add up (warehouse/daycounts.py sums them).
-- Histories are readable step names: `tool`, `tool (error)`, `respond` (a reply the user
-- answered), `respond (end)`; `<start>` pads a history shorter than two steps.

-- name: histories
-- Each step with its name, its last two steps, the segment it is in (steps between two writes
-- share one; for reach) and the step after it (for sites): one pass over the steps. Only
-- what the counts read is kept, as booleans where it can be (strings cost the pass most), and
-- a session is its `session_order` (one per session, an integer to sort and join on).
CREATE OR REPLACE TEMP TABLE histories AS
WITH named AS (
    SELECT s.step, s.action, s.session_order, s.part,
           CASE WHEN s.kind = 'tool'
                    THEN s.action || CASE WHEN s.outcome = 'failed' THEN ' (error)' ELSE '' END
                WHEN s.outcome = 'reply' THEN 'respond'
                ELSE 'respond (end)' END AS symbol,
           s.kind = 'tool' AS is_tool,
           s.outcome = 'failed' AS failed,
           s.kind = 'tool' AND coalesce(k.kind = 'write', false) AS is_write,
           s.kind = 'tool' AND coalesce(k.kind = 'read', false) AS is_read
    FROM learn_steps s LEFT JOIN kinds k ON k.tool = s.action
)
SELECT session_order, step, action, is_write, is_tool, failed, part,
       coalesce(lag(symbol, 1) OVER w, '<start>') AS h1,
       coalesce(lag(symbol, 2) OVER w, '<start>') AS h2,
       coalesce(sum(is_write::INTEGER) OVER (w ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING),
                0)::INTEGER AS segment,
       lead(action) OVER w AS next_action,
       coalesce(lead(is_read) OVER w, false) AS next_read
FROM named
WINDOW w AS (PARTITION BY session_order ORDER BY step);

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
    SELECT session_order, segment, action, max(step) AS last_step
    FROM histories WHERE NOT is_write GROUP BY ALL
)
SELECT h.part, CASE WHEN h.h1 IS NULL THEN 0 WHEN h.h2 IS NULL THEN 1 ELSE 2 END AS level,
       h.h2, h.h1, l.action, count(*)::DOUBLE AS n
FROM (SELECT session_order, segment, step, h1, h2, part FROM histories) h
JOIN last_place l
  ON l.session_order = h.session_order AND l.segment = h.segment AND h.step <= l.last_step
GROUP BY GROUPING SETS ((h.part, l.action), (h.part, h.h1, l.action),
                        (h.part, h.h2, h.h1, l.action));

-- name: sites
-- After each call that succeeded or failed: the reads the agent made right after it.
SELECT part, action AS after, failed, next_action AS lookup, count(*) AS n
FROM histories
WHERE is_tool AND next_read
GROUP BY ALL;

-- name: part_steps
-- How many steps each part holds.
SELECT part, count(*) AS n FROM histories GROUP BY part;

-- name: prequential_steps
-- For fitting α: the steps an online learner walks, in learning order. It walks the first
-- sessions, whole, while the steps so far stay within $max_steps; the sessions of `histories`
-- come after $prior_steps steps already walked (warehouse/alphafit.py keeps a walk and
-- continues it), so these are the whole sessions that keep the total within the limit.
CREATE OR REPLACE TEMP TABLE prequential_steps AS
WITH sizes AS (
    SELECT session_order, count(*) AS n FROM histories GROUP BY session_order
), cutoff AS (
    SELECT coalesce(max(session_order), -1) AS last_order FROM (
        SELECT session_order, sum(n) OVER (ORDER BY session_order) AS upto FROM sizes)
    WHERE upto <= $max_steps - $prior_steps
)
SELECT session_order, action, h1, h2, row_number() OVER (ORDER BY session_order, step) AS g
FROM histories WHERE session_order <= (SELECT last_order FROM cutoff);

-- name: prequential
-- Each walked step with what the learner had seen before it, at each level: n(c) and n(c, a)
-- over the steps before it — those walked before (`prior(level, h2, h1, action, n)`: n(c, a)
-- over the $prior_steps earlier steps, h2 and h1 NULL where the level does not use them) and
-- the earlier steps of this walk — in learning order.
WITH walked AS (
    SELECT g, action, h1, h2,
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
    FROM prequential_steps
), c1 AS (
    SELECT h1, sum(n) AS n FROM prior WHERE level = 1 GROUP BY h1
), c2 AS (
    SELECT h2, h1, sum(n) AS n FROM prior WHERE level = 2 GROUP BY h2, h1
)
SELECT $prior_steps + w.n0 AS n0,
       w.na0 + coalesce(a0.n, 0) AS na0,
       w.n1 + coalesce(c1.n, 0) AS n1,
       w.na1 + coalesce(a1.n, 0) AS na1,
       w.n2 + coalesce(c2.n, 0) AS n2,
       w.na2 + coalesce(a2.n, 0) AS na2
FROM walked w
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

-- name: prequential_stopped
-- The first session of `histories` not walked (it did not fit), or NULL.
SELECT min(session_order) FROM histories
WHERE session_order > coalesce((SELECT max(session_order) FROM prequential_steps), -1);
