-- Which sessions train the habit, and how much each counts (issue 18: `learn --half-life H`,
-- `--rewards FILE`; ../shared/spec/algorithms.md §2.4): the weighted counterparts of
-- counts.sql's `habit` and `reach`, and the `wanted` table that gives each session its weight.
-- Without a half-life every weight is 1 and the counts equal counts.sql's exactly.

-- name: wanted
-- Input: the `sessions` view, `rewards(session, reward)` (empty without a rewards file),
-- $domain (NULL: every domain), $sessions (a list of session ids, NULL: every session; staging
-- and the surprise gate's folds learn from such subsets), $success (the reward a success
-- needs), $half_life (NULL: no decay). A session's age is its place among the domain's sessions in start order, failed
-- ones included (age is time): the newest weighs 1, one `half_life` sessions older 1/2.
-- A reward from the file wins over the log's; a session with neither is successful.
CREATE OR REPLACE TEMP TABLE wanted AS
WITH given AS (
    SELECT s.session, s.agent_model, coalesce(r.reward, s.reward) AS reward,
           row_number() OVER (ORDER BY s.started_unix_ms, s.session) - 1 AS age_order,
           count(*) OVER () AS n
    FROM sessions s LEFT JOIN rewards r USING (session)
    WHERE ($domain IS NULL OR s.domain = $domain)
      AND ($sessions IS NULL OR list_contains($sessions, s.session))
)
SELECT session, agent_model,
       (row_number() OVER (ORDER BY age_order) - 1)::BIGINT AS session_order,
       CASE WHEN $half_life IS NULL THEN 1.0
            ELSE pow(0.5, (n - 1 - age_order)::DOUBLE / $half_life) END AS weight
FROM given
WHERE reward IS NULL OR reward >= $success
ORDER BY session_order;

-- name: habit
-- n(c, a) weighted: counts.sql's `habit` with each step counting its session's weight (summed
-- by the steps' ids first, then named: counts.sql's `histories` keeps ids, not names).
WITH coded AS (
    SELECT h.id, h.p1, h.p2, sum(w.weight) AS n
    FROM histories h JOIN wanted w USING (session_order) GROUP BY ALL
), named AS (
    SELECT a.action, coalesce(s1.symbol, '<start>') AS h1, coalesce(s2.symbol, '<start>') AS h2, c.n
    FROM coded c JOIN step_names a ON a.id = c.id
    LEFT JOIN step_names s1 ON s1.id = c.p1 LEFT JOIN step_names s2 ON s2.id = c.p2
)
SELECT CASE WHEN h1 IS NULL THEN 0 WHEN h2 IS NULL THEN 1 ELSE 2 END AS level,
       h2, h1, action, sum(n)::DOUBLE AS n
FROM named
GROUP BY GROUPING SETS ((action), (h1, action), (h2, h1, action));

-- name: reach
-- m(c, a) weighted: counts.sql's `reach` with each step counting its session's weight.
WITH last_place AS (
    SELECT session_order, segment, action_id, any_value(id) AS id, max(step) AS last_step
    FROM histories WHERE NOT is_write GROUP BY session_order, segment, action_id
), coded AS (
    SELECT h.p1, h.p2, l.id, sum(w.weight) AS n
    FROM (SELECT session_order, segment, step, p1, p2 FROM histories) h
    JOIN wanted w USING (session_order)
    JOIN last_place l
      ON l.session_order = h.session_order AND l.segment = h.segment AND h.step <= l.last_step
    GROUP BY ALL
), named AS (
    SELECT a.action, coalesce(s1.symbol, '<start>') AS h1, coalesce(s2.symbol, '<start>') AS h2, c.n
    FROM coded c JOIN step_names a ON a.id = c.id
    LEFT JOIN step_names s1 ON s1.id = c.p1 LEFT JOIN step_names s2 ON s2.id = c.p2
)
SELECT CASE WHEN h1 IS NULL THEN 0 WHEN h2 IS NULL THEN 1 ELSE 2 END AS level,
       h2, h1, action, sum(n)::DOUBLE AS n
FROM named
GROUP BY GROUPING SETS ((action), (h1, action), (h2, h1, action));
