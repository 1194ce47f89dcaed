-- Where each lookup's arguments came from (../shared/spec/algorithms.md §5.1), as joins of
-- argument values to the leaves of earlier results. Input: `wanted(session, session_order,
-- part)`, `wanted_calls` (the calls of the wanted parts' partitions: partcount.set_wanted) and
-- `kinds(tool, kind)`. Every count is per `part` (counts of disjoint sets of
-- sessions add up).

-- name: binding_path
-- A string leaf's json_tree fullkey as a binding path (docs/formats.md §3, read by jsonpath-ng):
-- every array index as [*], but not inside a quoted key (`$."br[0]acket"` stays as it is), and
-- jsonpath's reserved words `where` and `wherenot` quoted, as DuckDB leaves them bare.
CREATE OR REPLACE TEMP MACRO binding_path(fullkey) AS array_to_string(list_transform(
    regexp_extract_all(fullkey, '\$|\[[0-9]+\]|\."(?:[^"\\]|\\.)*"|\.[^".\[]+'),
    lambda step: CASE
        WHEN step[1] = '[' THEN '[*]'
        WHEN step IN ('.where', '.wherenot') THEN '."' || step[2:] || '"'
        ELSE step
    END), '');

-- name: read_calls
-- Every call of a read tool in the sessions learned from.
CREATE OR REPLACE TEMP TABLE read_calls AS
SELECT c.session, w.part, c.sent_seq, c.sent_sub, c.tool, c.arguments
FROM wanted_calls c JOIN wanted w USING (session)
WHERE c.tool IN (SELECT tool FROM kinds WHERE kind = 'read');

-- name: args
-- For each lookup: its calls, how many passed no argument at all (`arg` ''), and how many
-- passed each argument.
SELECT part, tool, NULL AS arg, count(*) AS n FROM read_calls GROUP BY part, tool
UNION ALL
SELECT part, tool, '', count(*) FROM read_calls WHERE arguments::VARCHAR = '{}'
GROUP BY part, tool
UNION ALL
SELECT r.part, r.tool, e.key, count(*) FROM read_calls r, json_each(r.arguments) AS e
GROUP BY ALL;

-- name: constants
-- Each argument of a lookup: in how many calls, with how many distinct values, and one of
-- them (an argument that took one and the same value everywhere may become a constant:
-- stretto.binding decides). Summed over parts: constant where every part saw the one value.
SELECT r.part, r.tool, e.key AS arg, min(e.value::VARCHAR) AS value, count(*) AS n,
       count(DISTINCT e.value::VARCHAR) AS distinct_values
FROM read_calls r, json_each(r.arguments) AS e
GROUP BY r.part, r.tool, e.key;

-- name: string_values
-- Each string an argument of a lookup took.
CREATE OR REPLACE TEMP TABLE string_values AS
SELECT r.session, r.part, r.sent_seq, r.sent_sub, r.tool, e.key AS arg, e.value ->> '$' AS v,
       regexp_full_match(e.value ->> '$', '[A-Za-z0-9 _.:#@+,=-]*') AS plain
FROM read_calls r, json_each(r.arguments) AS e
WHERE json_type(e.value) = 'VARCHAR';

-- name: sources
-- For each string value: the most recent earlier successful result holding it as a string
-- leaf (the first path in document order, binding_path); a result that is not JSON
-- is its lines (`$[*]`) when it has two or more, else its text (`$`).
WITH outputs AS (
    SELECT session, tool AS source, answered_seq, result_text,
           json_valid(result_text) AS is_json
    FROM wanted_calls SEMI JOIN wanted USING (session)
    WHERE status = 'ok'
), pairs AS (
    SELECT v.session, v.sent_seq, v.sent_sub, v.tool, v.arg, v.v,
           o.source, o.answered_seq, o.result_text, o.is_json
    FROM string_values v JOIN outputs o
      ON o.session = v.session AND o.answered_seq < v.sent_seq
     AND (contains(o.result_text, v.v) OR (NOT v.plain AND contains(o.result_text, '\')))
), json_hits AS (
    SELECT p.session, p.sent_seq, p.sent_sub, p.tool, p.arg, p.source, p.answered_seq,
           binding_path(t.fullkey) AS path, t.id AS position
    FROM pairs p, json_tree(p.result_text) AS t
    WHERE p.is_json AND t.type = 'VARCHAR' AND t.value ->> '$' = p.v
), text_hits AS (
    SELECT session, sent_seq, sent_sub, tool, arg, source, answered_seq,
           CASE WHEN len(lines) >= 2 THEN '$[*]' ELSE '$' END AS path, 0 AS position
    FROM (SELECT *, list_filter(list_transform(string_split(result_text, chr(10)),
                                               lambda x: trim(x)), lambda x: x <> '') AS lines
          FROM pairs WHERE NOT is_json)
    WHERE (len(lines) >= 2 AND list_contains(lines, v)) OR (len(lines) < 2 AND result_text = v)
), hits AS (
    SELECT * FROM json_hits UNION ALL SELECT * FROM text_hits
), first_hit AS (
    SELECT * FROM hits
    QUALIFY row_number() OVER (PARTITION BY session, sent_seq, sent_sub, arg
                               ORDER BY answered_seq DESC, position) = 1
)
SELECT v.part, v.tool, v.arg, count(*) AS "values",
       list(struct_pack(source := h.source, path := h.path)) FILTER (WHERE h.source IS NOT NULL)
           AS found
FROM string_values v
LEFT JOIN first_hit h USING (session, sent_seq, sent_sub, arg)
GROUP BY v.part, v.tool, v.arg;

-- name: lists
-- Arguments that took a list of strings: for each such list, the most recent earlier
-- successful result with a path holding every value of it (the path is found by locating the
-- list's first value; binding_path; a result that is not JSON is its lines, `$[*]`).
WITH list_values AS (
    SELECT r.session, r.part, r.sent_seq, r.sent_sub, r.tool, e.key AS arg,
           CAST(e.value AS VARCHAR[]) AS items
    FROM read_calls r, json_each(r.arguments) AS e
    WHERE json_type(e.value) = 'ARRAY' AND json_array_length(e.value) > 0
      AND list_bool_and(list_transform(json_extract(e.value, '$[*]'),
                                       lambda x: json_type(x) = 'VARCHAR'))
), outputs AS (
    SELECT session, tool AS source, answered_seq, result_text, json_valid(result_text) AS is_json
    FROM wanted_calls SEMI JOIN wanted USING (session)
    WHERE status = 'ok'
), pairs AS (
    SELECT l.*, o.source, o.answered_seq, o.result_text, o.is_json
    FROM list_values l JOIN outputs o
      ON o.session = l.session AND o.answered_seq < l.sent_seq
     AND contains(o.result_text, l.items[1])
), json_paths AS (
    -- every string at each path of the output, for the paths where the first value is
    SELECT p.session, p.sent_seq, p.sent_sub, p.arg, p.items, p.source, p.answered_seq,
           binding_path(t.fullkey) AS path,
           list(t.value ->> '$') AS strings, bool_or(t.value ->> '$' = p.items[1]) AS has_first,
           min(t.id) AS position
    FROM pairs p, json_tree(p.result_text) AS t
    WHERE p.is_json AND t.type = 'VARCHAR'
    GROUP BY ALL
), text_paths AS (
    SELECT session, sent_seq, sent_sub, arg, items, source, answered_seq, '$[*]' AS path,
           list_filter(list_transform(string_split(result_text, chr(10)), lambda x: trim(x)),
                       lambda x: x <> '') AS strings, true AS has_first, 0 AS position
    FROM pairs WHERE NOT is_json
), hits AS (
    SELECT * FROM json_paths WHERE has_first AND list_has_all(strings, items)
    UNION ALL
    SELECT * FROM text_paths WHERE list_has_all(strings, items)
), first_hit AS (
    SELECT * FROM hits
    QUALIFY row_number() OVER (PARTITION BY session, sent_seq, sent_sub, arg
                               ORDER BY answered_seq DESC, position) = 1
)
SELECT l.part, l.tool, l.arg, count(*) AS "values",
       list(struct_pack(source := h.source, path := h.path)) FILTER (WHERE h.source IS NOT NULL)
           AS found
FROM list_values l
LEFT JOIN first_hit h USING (session, sent_seq, sent_sub, arg)
GROUP BY l.part, l.tool, l.arg;

-- name: shapes
-- What each lookup argument's strings looked like (stretto.model.shape), per part: how many
-- strings it took (alone, or as items of a list), their shortest and longest length in
-- characters, and every distinct character in them (as one string); and, for values with `/`
-- or `\`, the folder each is in (`''` for one at the top of an absolute path; the rest,
-- normalised and those inside another dropped, by stretto.model.shape.minimal_roots).
WITH strings AS (
    SELECT part, tool, arg, v FROM string_values
    UNION ALL
    SELECT r.part, r.tool, e.key, i.value ->> '$'
    FROM read_calls r, json_each(r.arguments) AS e, json_each(e.value) AS i
    WHERE json_type(e.value) = 'ARRAY' AND json_type(i.value) = 'VARCHAR'
)
SELECT part, tool, arg, count(*) AS "values", min(length(v)) AS shortest,
       max(length(v)) AS longest,
       array_to_string(list_filter(list_distinct(flatten(list(string_split(v, '')))),
                                   lambda c: c <> ''), '') AS chars,
       list_distinct(list(CASE WHEN contains(replace(v, '\', '/'), '/')
                               THEN regexp_extract(replace(v, '\', '/'), '^(.*)/[^/]*$', 1)
                               ELSE '.' END)) AS folders
FROM strings
GROUP BY part, tool, arg;
