-- Ingest one batch of session logs (docs/formats.md §1) into the warehouse's tables.
-- Input: the temp table `batch(file, content_hash, size_bytes, domain_hint, ingest_id)` and
-- the parameter $files (the same files, as a list). Each statement below is run in order;
-- the last ones build the rows written to Parquet (see warehouse/ingest.py).

-- name: macros
-- One parse of a JSON-RPC message (or a context message) into the fields the warehouse uses.
CREATE OR REPLACE TEMP MACRO parse_message(m) AS json_transform(m, '{
    "method": "JSON", "id": "JSON",
    "params": {"name": "JSON", "arguments": "JSON", "requestId": "JSON",
               "clientInfo": {"name": "JSON"}},
    "result": {"content": [{"type": "JSON", "text": "JSON"}], "isError": "JSON",
               "structuredContent": "JSON", "tools": "JSON"},
    "error": {"message": "JSON"},
    "role": "JSON", "content": "JSON"}');
-- A wire line's message, parsed (`m`: its text as parsed; see `wire`): `p` as the wire
-- statement parsed it, or, for a line in the proxy's own form (there only checked), here.
CREATE OR REPLACE TEMP MACRO wire_message(canon, p, m) AS
    CASE WHEN NOT canon THEN p WHEN starts_with(m, '{') THEN parse_message(m) END;

-- name: file_text
-- Each file's text. A byte-order mark at the start of a file is an encoding mark, not text:
-- it is dropped. ({files}: the batch's paths, as a list literal.)
CREATE OR REPLACE TEMP VIEW file_text AS
SELECT filename AS file,
       CASE WHEN starts_with(content, chr(65279)) THEN substr(content, 2) ELSE content END AS text
FROM read_text({files});

-- name: file_bytes
-- Instead of file_text when a file of the batch is not all valid UTF-8: NULL text for such
-- a file (warehouse/ingest.py then splits it into `undecodable`, marking its bad lines).
CREATE OR REPLACE TEMP TABLE file_text AS
WITH decoded AS (SELECT filename AS file, try(decode(content)) AS text FROM read_blob({files}))
SELECT file, CASE WHEN starts_with(text, chr(65279)) THEN substr(text, 2) ELSE text END AS text
FROM decoded;

-- name: lines
-- Every line of every file, numbered from 1. Only "\n" ends a line. The empty piece after a
-- final newline is not a line. A line is blank when it holds only JSON whitespace (space,
-- tab, CR). (Lines of a file that is not all UTF-8 are added from `undecodable`, with
-- `bad_utf8`; `repaired` is filled for the rare line with a lone surrogate escape:
-- warehouse/ingest.py.)
CREATE OR REPLACE TEMP TABLE lines AS
WITH split AS (
    SELECT file, string_split(text, chr(10)) AS parts,
           suffix(text, chr(10)) OR text = '' AS complete
    FROM file_text WHERE text IS NOT NULL
), files AS (
    -- once per file (beside the unnest below, these would be evaluated once per line)
    SELECT file, parts, complete, len(parts) AS n,
           -- the header is the first non-blank line (nearly always line 1)
           CASE WHEN trim(parts[1], ' ' || chr(9) || chr(13)) <> '' THEN 1
                ELSE list_position(list_transform(parts,
                    lambda x: trim(x, ' ' || chr(9) || chr(13)) <> ''), true) END AS header_no
    FROM split
), numbered AS (
    SELECT file, complete, n, header_no,
           unnest(parts) AS line, generate_subscripts(parts, 1) AS line_no
    FROM files
)
SELECT file, line_no::INTEGER AS line_no, line, header_no::INTEGER AS header_no,
       NOT complete AND line_no = n AS unterminated, false AS bad_utf8,
       NULL::VARCHAR AS repaired
FROM numbered
WHERE NOT (complete AND line_no = n);

-- name: undecodable_lines
INSERT INTO lines
WITH numbered AS (
    SELECT file, complete, len(parts) AS n,
           list_position(list_transform(parts,
               lambda x: trim(x, ' ' || chr(9) || chr(13)) <> ''), true) AS header_no,
           unnest(parts) AS line, unnest(bad) AS bad_utf8, generate_subscripts(parts, 1) AS line_no
    FROM undecodable
)
SELECT file, line_no::INTEGER, line, header_no::INTEGER, NOT complete AND line_no = n,
       bad_utf8, NULL::VARCHAR
FROM numbered
WHERE NOT (complete AND line_no = n);

-- name: headers
-- The first non-blank line of each file is its header; a file-level problem quarantines the
-- whole file with the reason (`forced_error`: discovery already found one, a session id
-- conflict). Every JSON function reads `h`, NULL unless the header is a JSON object.
CREATE OR REPLACE TEMP TABLE headers AS
WITH first AS (
    SELECT b.file, b.rel, b.content_hash, b.size_bytes, b.domain_hint, b.ingest_id,
           b.forced_error, h.header_no
    FROM batch b
    LEFT JOIN (SELECT DISTINCT file, header_no FROM lines WHERE line_no = 1) h USING (file)
), parsed AS (
    SELECT f.*, coalesce(l.repaired, l.line) AS header, l.bad_utf8,
           CASE WHEN NOT l.bad_utf8 AND try(json_type(coalesce(l.repaired, l.line))) = 'OBJECT'
                THEN coalesce(l.repaired, l.line) END AS h
    FROM first f
    LEFT JOIN lines l ON l.file = f.file AND l.line_no = f.header_no
)
SELECT * EXCLUDE (h), h AS header_json,
    CASE
        WHEN forced_error IS NOT NULL THEN forced_error
        WHEN header IS NULL AND header_no IS NULL AND EXISTS (SELECT 1 FROM lines l WHERE l.file = parsed.file)
            THEN 'empty: only blank lines, no header'
        WHEN header IS NULL THEN 'empty: no header line'
        WHEN bad_utf8 THEN 'line ' || header_no || ': not valid UTF-8'
        WHEN h IS NULL AND NOT json_valid(header) THEN 'line ' || header_no || ': not JSON'
        WHEN h IS NULL THEN 'line ' || header_no || ': the header must be a JSON object'
        WHEN json_type(h, '$.stretto_mcp_log') IS NULL
            THEN 'line ' || header_no || ': field `stretto_mcp_log`: missing; this is not a stretto session log'
        WHEN json_type(h, '$.stretto_mcp_log') NOT IN ('UBIGINT', 'BIGINT')
            THEN 'line ' || header_no || ': field `stretto_mcp_log`: expected an integer'
        WHEN (h ->> '$.stretto_mcp_log') NOT IN ({LOG_VERSIONS_READ})
            THEN 'line ' || header_no || ': field `stretto_mcp_log`: unknown session-log version '
                 || (h ->> '$.stretto_mcp_log') || ' (this stretto reads versions ' || {LOG_VERSIONS_SAID} || ')'
        WHEN json_type(h, '$.session') IS DISTINCT FROM 'VARCHAR' OR (h ->> '$.session') = ''
            THEN 'line ' || header_no || ': field `session`: expected a non-empty string'
        WHEN json_type(h, '$.started_unix_ms') NOT IN ('UBIGINT', 'BIGINT')
            THEN 'line ' || header_no || ': field `started_unix_ms`: expected an integer'
        WHEN TRY_CAST(h ->> '$.started_unix_ms' AS BIGINT) IS NULL
             OR TRY_CAST(h ->> '$.started_unix_ms' AS BIGINT) NOT BETWEEN 0 AND 253402300799999
            THEN 'line ' || header_no || ': field `started_unix_ms`: expected ms since 1970, before the year 10000'
        WHEN coalesce(json_type(h, '$.server_command'), 'ARRAY') <> 'ARRAY'
            OR list_bool_or(list_transform(
                coalesce(json_extract(h, '$.server_command[*]'), []::JSON[]),
                lambda x: json_type(x) <> 'VARCHAR'))
            THEN 'line ' || header_no || ': field `server_command`: expected a list of strings'
        WHEN coalesce(json_type(h, '$.domain'), 'NULL') NOT IN ('NULL', 'VARCHAR')
            THEN 'line ' || header_no || ': field `domain`: expected a string or null'
        WHEN json_type(h, '$.domain') = 'VARCHAR'
             AND NOT regexp_full_match(h ->> '$.domain', '{domain_pattern}')
            THEN 'line ' || header_no || ': field `domain`: ' || to_json(h ->> '$.domain')
                 || ' is not a valid domain name (letters, digits, -, _ and ., not starting with . or -)'
        WHEN coalesce(json_type(h, '$.agent_model'), 'NULL') NOT IN ('NULL', 'VARCHAR')
            THEN 'line ' || header_no || ': field `agent_model`: expected a string or null'
        WHEN coalesce(json_type(h, '$.reward'), 'NULL') NOT IN ('NULL', 'DOUBLE', 'UBIGINT', 'BIGINT')
            THEN 'line ' || header_no || ': field `reward`: expected a number or null'
    END AS file_error
FROM parsed;

-- name: wire
-- Each line after the header, checked; `problem` says why a line is not ingested. `body` is
-- the message's JSON text (the line's own bytes in the form stretto-proxy writes,
-- {"t_ms":N,"from":"S","message":...}; re-serialized otherwise). `canon`: the line is in that
-- form, its message only checked here (parsed where it is read: wire_message); otherwise `p`
-- holds the message's parsed fields.
CREATE OR REPLACE TEMP TABLE wire AS
WITH body AS (
    SELECT l.file, h.session, l.line_no AS seq, l.line, l.unterminated, l.bad_utf8,
           coalesce(l.repaired, l.line) AS src,  -- the text parsed (lone surrogates repaired)
           CASE WHEN strlen(l.line) > 64 THEN false
                ELSE trim(l.line, ' ' || chr(9) || chr(13)) = '' END AS blank,
           regexp_extract(l.line, '^\{"t_ms":(0|[1-9][0-9]*),"from":"([a-z]+)","message":',
                          ['t_ms', 'sender']) AS head
    FROM lines l
    JOIN (SELECT file, header_json ->> '$.session' AS session FROM headers WHERE file_error IS NULL) h
      USING (file)
    WHERE l.line_no > l.header_no
), fast AS (
    SELECT *,
           CASE WHEN head.t_ms <> '' AND suffix(line, '}') THEN
               -- {"t_ms": 8 + N + ,"from":" 9 + S + ","message": 12, then the message, then }
               -- (substr counts characters, so the line's length in characters, not bytes)
               substr(line, 30 + strlen(head.t_ms) + strlen(head.sender),
                      length(line) - 30 - strlen(head.t_ms) - strlen(head.sender))
           END AS canon_body,
           -- the same piece of the parsed text (a repair keeps lengths: the same offsets)
           CASE WHEN head.t_ms <> '' AND suffix(line, '}') AND src IS DISTINCT FROM line THEN
               substr(src, 30 + strlen(head.t_ms) + strlen(head.sender),
                      length(src) - 30 - strlen(head.t_ms) - strlen(head.sender))
           END AS canon_repaired
    FROM body
), fast_parsed AS (
    SELECT *, coalesce(canon_body IS NOT NULL
                       AND json_valid(coalesce(canon_repaired, canon_body)), false) AS canon
    FROM fast
), general AS (
    -- every other line: one generic parse (the message's fields parsed below, lazily)
    SELECT *,
           CASE WHEN NOT canon AND NOT bad_utf8 THEN try(json_transform(src,
               '{"t_ms": "JSON", "from": "JSON", "message": "JSON", "raw": "JSON"}')) END AS f
    FROM fast_parsed
), typed AS (
    SELECT *, f.raw AS raw_json,
           -- (a CASE, not OR: OR would check every line with json_valid, a CASE only the rest)
           NOT bad_utf8 AND CASE WHEN canon OR f IS NOT NULL THEN true
                                 ELSE json_valid(src) END AS valid,
           -- JSON null reads as absent: look closer only where that could be (rare lines)
           CASE WHEN canon THEN true
                WHEN f IS NULL THEN false WHEN f.message IS NOT NULL THEN true
                WHEN contains(line, '"message"') THEN json_exists(src, '$.message')
                ELSE false END AS has_message,
           CASE WHEN canon THEN false
                WHEN f IS NULL THEN false WHEN f.raw IS NOT NULL THEN true
                WHEN contains(line, '"raw"') THEN json_exists(src, '$.raw')
                ELSE false END AS has_raw,
           CASE WHEN canon THEN true
                WHEN f IS NULL THEN false
                WHEN f.t_ms IS NOT NULL OR f."from" IS NOT NULL OR f.message IS NOT NULL
                     OR f.raw IS NOT NULL THEN true
                ELSE starts_with(ltrim(line), '{') END AS is_object,
           CASE WHEN canon THEN TRY_CAST(head.t_ms AS BIGINT)
                WHEN json_type(f.t_ms) IN ('UBIGINT', 'BIGINT') THEN TRY_CAST(f.t_ms AS BIGINT) END AS t_ms,
           CASE WHEN canon THEN head.sender
                WHEN json_type(f."from") = 'VARCHAR' THEN f."from" ->> '$' END AS sender
    FROM general
), checked AS (
    SELECT file, session, seq, line, t_ms, sender, canon,
           -- the message as logged (kept), and as parsed (lone surrogates repaired)
           CASE WHEN has_message AND NOT has_raw
                -- (not the proxy's form: the piece after "message": may hold more keys)
                THEN CASE WHEN canon THEN canon_body ELSE coalesce(f.message::VARCHAR, 'null') END
           END AS body,
           CASE WHEN has_message AND NOT has_raw AND src IS DISTINCT FROM line
                THEN CASE WHEN canon THEN canon_repaired
                          ELSE coalesce(f.message::VARCHAR, 'null') END
           END AS parse_body,
           CASE WHEN NOT canon AND has_message AND NOT has_raw AND f.message IS NOT NULL
                     AND starts_with(f.message, '{') THEN parse_message(f.message)
           END AS p,
           CASE WHEN has_raw AND NOT has_message THEN raw_json ->> '$' END AS raw,
           CASE
               WHEN blank THEN 'dropped: blank line'
               WHEN bad_utf8 AND unterminated
                   THEN 'dropped: the last line is cut off (a crash mid-write?)'
               WHEN bad_utf8 THEN 'quarantined: not valid UTF-8'
               WHEN NOT valid AND unterminated
                   THEN 'dropped: the last line is cut off (a crash mid-write?)'
               WHEN NOT valid THEN 'quarantined: not JSON'
               WHEN NOT is_object THEN 'quarantined: a log line must be a JSON object'
               WHEN t_ms IS NULL OR t_ms < 0
                   THEN 'quarantined: field `t_ms`: expected a non-negative integer'
               WHEN sender IS NULL OR sender NOT IN ('client', 'server', 'proxy', 'context')
                   THEN 'quarantined: field `from`: expected one of client, server, proxy, context'
               WHEN has_message = has_raw
                   THEN 'quarantined: field `message`: a line needs exactly one of `message` and `raw`'
               WHEN has_raw AND json_type(raw_json) IS DISTINCT FROM 'VARCHAR'
                   THEN 'quarantined: field `raw`: expected a string'
           END AS problem
    FROM typed
)
-- the text of a line is kept only where it is needed: lines that are not ingested
SELECT * EXCLUDE (line), CASE WHEN problem IS NOT NULL THEN line END AS line FROM checked;

-- name: line_counts
-- For every file: lines read = ingested + quarantined + dropped.
CREATE OR REPLACE TEMP TABLE line_counts AS
WITH whole AS (
    -- files quarantined whole: their blank lines are dropped, the others quarantined
    SELECT l.file, count(*) AS n,
           count(*) FILTER (WHERE trim(l.line, ' ' || chr(9) || chr(13)) = '') AS blank
    FROM lines l SEMI JOIN headers h ON h.file = l.file AND h.file_error IS NOT NULL
    GROUP BY l.file
), read AS (
    SELECT file, count(*) AS n FROM lines GROUP BY file
), checked AS (
    SELECT file, count(*) FILTER (WHERE problem IS NULL) AS ingested,
           count(*) FILTER (WHERE problem LIKE 'quarantined:%') AS quarantined,
           count(*) FILTER (WHERE problem LIKE 'dropped:%') AS dropped,
           coalesce(bool_or(problem LIKE 'dropped: the last line%'), false) AS torn
    FROM wire GROUP BY file
)
SELECT h.file,
       coalesce(r.n, 0) AS lines_read,
       CASE WHEN h.file_error IS NULL THEN 1 + coalesce(c.ingested, 0) ELSE 0 END
           AS lines_ingested,
       CASE WHEN h.file_error IS NULL THEN coalesce(c.quarantined, 0)
            ELSE coalesce(w.n - w.blank, 0) END AS lines_quarantined,
       -- blank lines before the header, and the lines dropped after it
       CASE WHEN h.file_error IS NULL THEN h.header_no - 1 + coalesce(c.dropped, 0)
            ELSE coalesce(w.blank, 0) END AS lines_dropped,
       coalesce(c.torn, false) AS torn_last_line
FROM headers h
LEFT JOIN read r USING (file)
LEFT JOIN checked c USING (file)
LEFT JOIN whole w USING (file);

-- name: rpc
-- Every JSON-RPC message of the ingested lines, batches flattened (`sub` = index in the batch),
-- reduced to what the warehouse keeps: small fields, and for a response its content
-- (docs/formats.md §1.3). `m` is read only for rare shapes (a null result, an error that is
-- not an object, a result with neither text nor structuredContent). The messages sent alone
-- (nearly all) are read first, then the items of batches (rpc_batches), each through the
-- view rpc_fields over `rpc_items`: one statement over the UNION ALL of the two cost a fifth
-- more CPU.
CREATE OR REPLACE TEMP VIEW rpc_items AS
SELECT session, seq, t_ms, sender, 0 AS sub, coalesce(parse_body, body) AS m,
       wire_message(canon, p, coalesce(parse_body, body)) AS p
FROM wire
WHERE problem IS NULL AND body IS NOT NULL AND sender <> 'context'
  AND starts_with(coalesce(parse_body, body), '{');
CREATE OR REPLACE TEMP VIEW rpc_fields AS
WITH fields AS (
    SELECT *,
        CASE WHEN json_type(p.method) = 'VARCHAR' THEN p.method ->> '$' END AS method,
        CASE json_type(p.id) WHEN 'VARCHAR' THEN p.id ->> '$' ELSE p.id::VARCHAR END AS rpc_id,
        -- `"result": null` reads as absent: look closer only at such messages
        CASE WHEN p.error IS NOT NULL OR p.result IS NOT NULL THEN true
             WHEN p.method IS NOT NULL OR p.id IS NULL THEN false
             ELSE json_exists(m, '$.error') OR json_exists(m, '$.result') END AS is_response,
        CASE WHEN p.error IS NOT NULL THEN true
             WHEN p.result IS NOT NULL OR p.method IS NOT NULL OR p.id IS NULL THEN false
             ELSE json_exists(m, '$.error') END AS has_error,
        -- the text parts of the content (a JSON value here is written compactly: a string is
        -- one that starts with a quote); one part, the usual, without a list's lambdas
        CASE WHEN len(p.result.content) = 1 AND p.result.content[1].type = '"text"'
                  AND starts_with(p.result.content[1].text, '"')
             THEN p.result.content[1].text ->> '$' END AS text1,
        CASE WHEN len(p.result.content) > 1 THEN
            list_transform(list_filter(p.result.content,
                                       lambda x: x.type = '"text"' AND starts_with(x.text, '"')),
                           lambda x: x.text ->> '$') END AS texts
    FROM rpc_items
)
SELECT session, seq, sub, t_ms, sender, method, rpc_id, is_response, has_error,
       CASE WHEN method = 'tools/call' AND json_type(p.params.name) = 'VARCHAR'
            THEN p.params.name ->> '$' END AS tool,
       CASE WHEN starts_with(p.params.arguments, '{') THEN p.params.arguments
            ELSE '{}' END::JSON AS arguments,
       CASE WHEN json_type(p.params.clientInfo.name) = 'VARCHAR'
            THEN p.params.clientInfo.name ->> '$' END AS client_name,
       CASE json_type(p.params.requestId) WHEN 'VARCHAR' THEN p.params.requestId ->> '$'
            ELSE p.params.requestId::VARCHAR END AS request_id,
       has_error OR coalesce(p.result.isError::VARCHAR = 'true', false) AS failed,
       CASE
           WHEN NOT is_response THEN NULL
           WHEN has_error THEN
               CASE WHEN json_type(p.error.message) = 'VARCHAR' THEN p.error.message ->> '$'
                    ELSE json_extract(m, '$.error')::VARCHAR END
           WHEN text1 IS NOT NULL THEN text1
           WHEN len(texts) > 0 THEN array_to_string(texts, chr(10))
           WHEN p.result.structuredContent IS NOT NULL THEN p.result.structuredContent::VARCHAR
           ELSE json_extract(m, '$.result')::VARCHAR
       END AS content,
       -- a tools/list answer, as {"tools": [...]} (whether it answers tools/list is known later)
       CASE WHEN is_response AND NOT has_error AND starts_with(p.result.tools, '[')
            THEN '{"tools":' || p.result.tools || '}' END AS tool_list
FROM fields;
CREATE OR REPLACE TEMP TABLE rpc AS SELECT * FROM rpc_fields;

-- name: rpc_batches
-- The items of JSON-RPC batches (rare), added to `rpc` through the same view.
CREATE OR REPLACE TEMP VIEW rpc_items AS
SELECT w.session, w.seq, w.t_ms, w.sender, (e.key)::INTEGER AS sub, e.value AS m,
       parse_message(e.value) AS p
FROM (SELECT session, seq, t_ms, sender, coalesce(parse_body, body) AS body
      FROM wire
      WHERE problem IS NULL AND body IS NOT NULL AND sender <> 'context'
        AND starts_with(coalesce(parse_body, body), '[')) w,
     json_each(w.body) AS e
WHERE starts_with(e.value, '{');
INSERT INTO rpc SELECT * FROM rpc_fields;

-- name: requests
-- Requests from the host or the proxy: tools/call and the others (to match answers to them).
CREATE OR REPLACE TEMP TABLE requests AS
SELECT session, seq, sub, t_ms, sender, method, rpc_id, tool, arguments
FROM rpc
WHERE sender IN ('client', 'proxy') AND method IS NOT NULL AND rpc_id IS NOT NULL;

-- name: answers
-- Each response from the server or the proxy, matched to the latest request with its id sent
-- before it; `first_answer` marks the first response a request got (the first one wins).
-- Only keys travel through the windows; the messages stay in `rpc`.
CREATE OR REPLACE TEMP TABLE answers AS
WITH responses AS (
    SELECT session, seq, sub, rpc_id FROM rpc
    WHERE sender IN ('server', 'proxy') AND method IS NULL AND rpc_id IS NOT NULL AND is_response
), matched AS (
    SELECT r.session, r.seq, r.sub, q.seq AS req_seq, q.sub AS req_sub, q.method AS req_method,
           q.tool,
           row_number() OVER (PARTITION BY r.session, r.seq, r.sub
                              ORDER BY q.seq DESC, q.sub DESC) AS latest
    FROM responses r JOIN requests q
      ON q.session = r.session AND q.rpc_id = r.rpc_id
     AND (q.seq < r.seq OR (q.seq = r.seq AND q.sub < r.sub))
)
SELECT session, seq, sub, req_seq, req_sub, req_method, tool,
       row_number() OVER (PARTITION BY session, req_seq, req_sub ORDER BY seq, sub) = 1
           AS first_answer
FROM matched WHERE latest = 1;

-- name: tool_lists
-- The first answer to each tools/list request; `snapshot` identifies the listing.
CREATE OR REPLACE TEMP TABLE tool_lists AS
SELECT a.session, a.seq, r.tool_list AS result, md5(r.tool_list) AS snapshot
FROM answers a JOIN rpc r USING (session, seq, sub)
WHERE a.first_answer AND a.req_method = 'tools/list' AND starts_with(r.tool_list, '{');

-- name: results
-- The first answer of each tools/call: failed or not, and its content.
CREATE OR REPLACE TEMP TABLE results AS
SELECT a.session, a.req_seq, a.req_sub, a.seq, a.sub, r.t_ms, r.sender, r.failed, r.content
FROM answers a JOIN rpc r USING (session, seq, sub)
WHERE a.first_answer AND a.req_method = 'tools/call' AND a.tool IS NOT NULL;

-- name: said
-- Conversation lines, as the host wrote them.
CREATE OR REPLACE TEMP TABLE said AS
SELECT session, seq, t_ms,
       CASE WHEN json_type(p.role) = 'VARCHAR' THEN p.role ->> '$' END AS role,
       CASE json_type(p.content)
           WHEN 'VARCHAR' THEN p.content ->> '$'
           WHEN 'NULL' THEN ''
           ELSE coalesce(p.content::VARCHAR, '')
       END AS content,
       starts_with(body, '{') AS is_object
FROM (SELECT session, seq, t_ms, body, wire_message(canon, p, coalesce(parse_body, body)) AS p
      FROM wire WHERE problem IS NULL AND sender = 'context' AND body IS NOT NULL);

-- name: speaks
-- What counts as said for turns and steps: any user message, an assistant reply with text.
CREATE OR REPLACE TEMP TABLE speaks AS
SELECT session, seq, t_ms, role, content FROM said
WHERE is_object AND (role = 'user' OR (role = 'assistant'
      AND trim(content, ' ' || chr(9) || chr(10) || chr(11) || chr(12) || chr(13)) <> ''));

-- name: candidates
-- The calls whose turn may hinge on the new-value exception (stretto/logs/turns.py): the host's
-- calls made at most SAME_TURN_MS after the session's latest result. For every other call the rule
-- never looks at values, so their `source` is not computed.
CREATE OR REPLACE TEMP TABLE candidates AS
WITH timeline AS (
    SELECT session, seq, sub, t_ms, true AS is_call, sender = 'client' AS by_host
    FROM requests WHERE tool IS NOT NULL
    UNION ALL
    SELECT session, seq, sub, t_ms, false, false FROM results
), marked AS (
    SELECT *, max(CASE WHEN NOT is_call THEN t_ms END) OVER (
               PARTITION BY session ORDER BY seq, sub
               ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS last_result_ms
    FROM timeline
)
SELECT q.session, q.seq, q.sub, q.arguments
FROM marked m JOIN requests q USING (session, seq, sub)
WHERE m.is_call AND m.by_host AND m.t_ms - m.last_result_ms <= {SAME_TURN_MS};

-- name: call_values
-- The strings and integers (2 characters or more) each candidate call passes.
CREATE OR REPLACE TEMP TABLE call_values AS
SELECT DISTINCT c.session, c.seq, c.sub,
       CASE WHEN t.type = 'VARCHAR' THEN t.value ->> '$' ELSE t.value::VARCHAR END AS v
FROM candidates c, json_tree(c.arguments) AS t
WHERE t.type IN ('VARCHAR', 'BIGINT', 'UBIGINT')
  AND length(CASE WHEN t.type = 'VARCHAR' THEN t.value ->> '$' ELSE t.value::VARCHAR END) >= 2;

-- name: value_pairs
-- The candidate values, and the first results that may hold them: texts narrowed with a
-- substring test (a value of plain characters appears verbatim wherever it is a JSON leaf).
-- Tables of their own: inlined in value_hits, DuckDB pushed its two JSON tests into the scan
-- of `results`, running json_valid over every result rather than over these few.
CREATE OR REPLACE TEMP TABLE wanted AS
SELECT session, v, max(seq) AS before_seq,
       regexp_full_match(v, '[A-Za-z0-9 _.:#@+,=-]*') AS plain
FROM call_values GROUP BY session, v;
CREATE OR REPLACE TEMP TABLE result_pairs AS
SELECT w.session, w.v, r.seq, r.req_seq, r.content, json_valid(r.content) AS is_json
FROM wanted w JOIN results r ON r.session = w.session AND r.seq < w.before_seq
WHERE contains(r.content, w.v) OR (NOT w.plain AND contains(r.content, '\'));

-- name: value_hits
-- Where each candidate value occurs before its call: in a first result's values (JSON leaves,
-- or the text and its lines) or in an earlier call's arguments, checked exactly.
CREATE OR REPLACE TEMP TABLE value_hits AS
WITH result_leaves AS (
    SELECT p.session, p.v, p.seq, p.req_seq,
           CASE WHEN t.type = 'VARCHAR' THEN t.value ->> '$' ELSE t.value::VARCHAR END AS leaf
    FROM result_pairs p, json_tree(p.content) AS t
    WHERE p.is_json AND t.type IN ('VARCHAR', 'BIGINT', 'UBIGINT')
    UNION ALL
    SELECT session, v, seq, req_seq,
           trim(unnest(list_prepend(content, string_split(content, chr(10)))),
                ' ' || chr(9) || chr(10) || chr(11) || chr(12) || chr(13))
    FROM result_pairs WHERE NOT is_json
), arg_pairs AS (
    SELECT w.session, w.v, q.seq, q.arguments
    FROM wanted w JOIN requests q ON q.session = w.session AND q.seq < w.before_seq
    WHERE q.tool IS NOT NULL
      AND (contains(q.arguments::VARCHAR, w.v) OR (NOT w.plain AND contains(q.arguments::VARCHAR, '\')))
), arg_leaves AS (
    SELECT p.session, p.v, p.seq,
           CASE WHEN t.type = 'VARCHAR' THEN t.value ->> '$' ELSE t.value::VARCHAR END AS leaf
    FROM arg_pairs p, json_tree(p.arguments) AS t
    WHERE t.type IN ('VARCHAR', 'BIGINT', 'UBIGINT')
)
SELECT session, v, 'result' AS place, seq, req_seq FROM result_leaves WHERE leaf = v
UNION ALL
SELECT session, v, 'call', seq, NULL FROM arg_leaves WHERE leaf = v;

-- name: call_sources
-- For each candidate call: the newest call whose result was the first place one of its values
-- appeared, unless the value had been said before that result (see stretto/logs/turns.py).
CREATE OR REPLACE TEMP TABLE call_sources AS
WITH first_result AS (
    SELECT session, v, arg_min(req_seq, seq) AS req_seq, min(seq) AS seq
    FROM value_hits WHERE place = 'result' GROUP BY session, v
), first_arg AS (
    SELECT session, v, min(seq) AS seq FROM value_hits WHERE place = 'call' GROUP BY session, v
), sources AS (
    SELECT r.session, r.v, r.req_seq, r.seq
    FROM first_result r LEFT JOIN first_arg a USING (session, v)
    WHERE (a.seq IS NULL OR r.seq < a.seq)
      AND NOT EXISTS (SELECT 1 FROM speaks s
                      WHERE s.session = r.session AND s.seq < r.seq AND contains(s.content, r.v))
)
SELECT c.session, c.seq, c.sub, max(s.req_seq) AS source
FROM call_values c JOIN sources s USING (session, v)
WHERE s.seq < c.seq
GROUP BY ALL;

-- name: turn_events
-- What stretto.turns.TurnTracker is fed, per session in log order.
CREATE OR REPLACE TEMP TABLE turn_events AS
SELECT session, seq, sub, 'call' AS event, t_ms, q.rpc_id AS call_id,
       q.sender = 'proxy' AS by_proxy, coalesce(cs.source, -1) AS source, NULL AS role
FROM requests q LEFT JOIN call_sources cs USING (session, seq, sub)
WHERE q.tool IS NOT NULL
UNION ALL
SELECT r.session, r.seq, r.sub, 'result', r.t_ms, q.rpc_id, NULL, NULL, NULL
FROM results r JOIN requests q ON q.session = r.session AND q.seq = r.req_seq AND q.sub = r.req_sub
UNION ALL
SELECT session, seq, sub, 'cancel', t_ms, request_id, NULL, NULL, NULL
FROM rpc
WHERE sender = 'client' AND method = 'notifications/cancelled' AND request_id IS NOT NULL
UNION ALL
SELECT session, seq, 0, 'said', t_ms, NULL, NULL, NULL, role
FROM speaks
ORDER BY session, seq, sub;
