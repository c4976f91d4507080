-- fr_mismatches: where the ranks' Flight Recorders disagree, and why a job hung, in plain words.
--
-- Matching, as torchfrtrace does it: each rank numbers the collectives of a process group in the
-- order it issues them (`collective_seq_id`), so the n-th collective of a group is one call on
-- every member. For each group and sequence id that every member's buffer still holds (the ring
-- buffer drops the oldest), the members' entries are compared:
--
-- 1. A member whose dump has no entry for it never entered it ('rank missing'), if the dump was
--    taken at least a second after the first member entered it, or when is unknown (torch's own
--    dumps), or as its process ended (any reason but a request that lets the job go on, SIGUSR1 or
--    SIGINT: collectors/flight_recorder.py CONTINUING): a dump taken sooner by a process that
--    went on may just precede the call. A member without any dump is unknown.
-- 2. The members that entered it must agree on the op, then the sizes, then the element types
--    (one call, all parts in order, for a coalesced collective); the ranks whose call differs
--    from what most called are mismatched ('op mismatch', 'size mismatch', 'dtype mismatch').
--    Sizes are not compared for all_to_all, gather and scatter, whose splits may differ; an
--    all_to_all is a size mismatch when what all ranks send and receive does not add up.
-- 3. When every member entered it (or left no dump) and they agree, but some had not finished it
--    when dumped and it had been in flight longer than its timeout, the collective itself hung
--    ('stuck').
--
-- Point-to-point ops are not matched: only two ranks of a group take part in each (and gloo does
-- not record them). Later problems of a group often follow from its first (`is_first`). The
-- verdict says it in words: who never entered what, who waited in it and for how long they could,
-- what the missing rank did last and where its stack was when it was dumped (docs/flight-recorder.md).
--
-- Grain: one row per run, process group and sequence id with a problem.
-- Empty without: fr_entries
--
-- Columns:
--   run_id VARCHAR  The run.
--   recorder VARCHAR  'generic' (gloo and CPU collectives) or 'nccl' (see fr_dumps).
--   pg_name VARCHAR  Process group name.
--   pg_desc VARCHAR  Its description (default_pg, or what the program called it).
--   group_ranks VARCHAR  Its members' global ranks, as a JSON list.
--   seq_id BIGINT  The collective's sequence id in the group (fr_entries.collective_seq_id).
--   op VARCHAR  What most members that entered it called, in the recorder's words (all_reduce).
--   problem VARCHAR  'rank missing', 'op mismatch', 'size mismatch', 'dtype mismatch' or 'stuck'.
--   entered_ranks VARCHAR  Members whose dump has it, JSON.
--   missing_ranks VARCHAR  Members whose dump, taken after the others entered it, does not: JSON.
--   unfinished_ranks VARCHAR  Members that entered it and had not finished it (neither completed
--       nor retired) when dumped, JSON.
--   mismatched_ranks VARCHAR  Members whose call differs from what most called, JSON.
--   unknown_ranks VARCHAR  Members without a dump, JSON: whether they entered it is unknown.
--   detail VARCHAR  Each different call and who made it: 'ranks 0, 1: broadcast [[64]] Float; ...'.
--   first_created_ns BIGINT  When the first member entered it, ns since the Unix epoch.
--   timeout_ns BIGINT  The group's timeout for it.
--   is_first BOOLEAN  Whether it is its group's first problem.
--   verdict VARCHAR  The problem in plain words.
WITH params AS (
  -- A member whose dump came this long after the first member entered a collective and has no
  -- entry for it never entered it.
  SELECT 1000000000 AS late_ns
),
calls AS MATERIALIZED (
  -- One call per rank and collective; a coalesced collective's parts joined in record order.
  SELECT
    g.group_key,
    e.seq_id,
    e.rank,
    any_value(e.recorder) AS recorder,
    any_value(e.pg_name) AS pg_name,
    any_value(e.pg_desc) AS pg_desc,
    string_agg(e.fr_op, ' + ' ORDER BY e.record_id) AS ops,
    string_agg(e.input_sizes || ' -> ' || e.output_sizes, ' + ' ORDER BY e.record_id) AS sizes,
    string_agg(e.input_dtypes || ' -> ' || e.output_dtypes, ' + ' ORDER BY e.record_id) AS dtypes,
    string_agg(
      e.fr_op || ' ' || CASE WHEN e.input_sizes = e.output_sizes THEN e.input_sizes ELSE e.input_sizes || ' -> ' || e.output_sizes END
        || ' ' || regexp_replace(
          CASE WHEN e.input_dtypes = e.output_dtypes THEN e.input_dtypes ELSE e.input_dtypes || ' -> ' || e.output_dtypes END,
          '[\["\] ]', '', 'g'),
      ' + ' ORDER BY e.record_id
    ) AS call_text,
    bool_or(e.op IN ('alltoall', 'gather', 'scatter')) AS uneven,
    bool_or(e.op = 'alltoall') AS alltoall,
    sum(dims_elements(e.input_sizes)) AS in_elements,
    sum(dims_elements(e.output_sizes)) AS out_elements,
    min(e.time_created_ns) AS created_ns,
    bool_and(e.state = 'completed' OR coalesce(e.retired, false)) AS finished,
    max(e.timeout_ns) AS timeout_ns
  FROM fr_entries AS e
  JOIN _fr_groups AS g USING (rank, recorder, pg_name)
  WHERE NOT e.is_p2p
  GROUP BY g.group_key, e.seq_id, e.rank
),
coverage AS (
  -- From which sequence id on every member that recorded the group still holds its entries.
  SELECT group_key, max(first_seq) AS from_seq
  FROM (SELECT group_key, rank, min(seq_id) AS first_seq FROM calls GROUP BY group_key, rank)
  GROUP BY group_key
),
collectives AS MATERIALIZED (
  SELECT
    c.group_key, c.seq_id, any_value(c.recorder) AS recorder, any_value(c.pg_name) AS pg_name,
    any_value(c.pg_desc) AS pg_desc, min(c.created_ns) AS first_created_ns,
    max(c.timeout_ns) AS timeout_ns, bool_or(c.uneven) AS uneven, bool_or(c.alltoall) AS alltoall,
    sum(c.in_elements) AS in_total, sum(c.out_elements) AS out_total
  FROM calls AS c
  JOIN coverage AS v USING (group_key)
  WHERE c.seq_id >= v.from_seq
  GROUP BY c.group_key, c.seq_id
),
groups AS (
  SELECT DISTINCT group_key, members FROM _fr_groups
),
signatures AS MATERIALIZED (
  SELECT group_key, seq_id, ops, sizes, dtypes, any_value(call_text) AS call_text,
    list_sort(list(rank)) AS ranks, count(*) AS n
  FROM calls
  GROUP BY group_key, seq_id, ops, sizes, dtypes
),
majority AS MATERIALIZED (
  -- What most members called; on a tie, what the lowest rank called.
  SELECT *, n > coalesce(lead(n) OVER (PARTITION BY group_key, seq_id ORDER BY n DESC, ranks[1]), 0) AS has_majority
  FROM signatures
  QUALIFY row_number() OVER (PARTITION BY group_key, seq_id ORDER BY n DESC, ranks[1]) = 1
),
members AS (
  SELECT
    x.group_key,
    x.seq_id,
    x.rank,
    c.rank IS NOT NULL AS entered,
    d.rank IS NULL AS without_dump,
    c.rank IS NULL AND d.rank IS NOT NULL
      AND (d.dumped_at_ns IS NULL OR d.dumped_at_ns >= x.first_created_ns + p.late_ns
           OR coalesce(d.reason NOT IN ('SIGUSR1', 'SIGINT'), false)) AS missing,
    c.rank IS NOT NULL AND NOT c.finished AS unfinished,
    c.ops <> m.ops AS op_differs,
    NOT x.uneven AND c.sizes <> m.sizes AS size_differs,
    c.dtypes <> m.dtypes AS dtype_differs,
    NOT c.finished AND d.dumped_at_ns - c.created_ns >= c.timeout_ns AS overdue
  FROM (
    SELECT k.group_key, k.seq_id, k.recorder, k.first_created_ns, k.uneven, unnest(g.members) AS rank
    FROM collectives AS k JOIN groups AS g USING (group_key)
  ) AS x
  CROSS JOIN params AS p
  JOIN majority AS m USING (group_key, seq_id)
  LEFT JOIN calls AS c ON c.group_key = x.group_key AND c.seq_id = x.seq_id AND c.rank = x.rank
  LEFT JOIN fr_dumps AS d ON d.rank = x.rank AND d.recorder = x.recorder
),
judged AS (
  SELECT
    group_key,
    seq_id,
    coalesce(list_sort(list(rank) FILTER (WHERE entered)), []) AS entered_ranks,
    coalesce(list_sort(list(rank) FILTER (WHERE missing)), []) AS missing_ranks,
    coalesce(list_sort(list(rank) FILTER (WHERE unfinished)), []) AS unfinished_ranks,
    coalesce(list_sort(list(rank) FILTER (WHERE op_differs OR size_differs OR dtype_differs)), []) AS mismatched_ranks,
    coalesce(list_sort(list(rank) FILTER (WHERE without_dump)), []) AS unknown_ranks,
    coalesce(bool_or(op_differs), false) AS op_mismatch,
    coalesce(bool_or(size_differs), false) AS size_mismatch,
    coalesce(bool_or(dtype_differs), false) AS dtype_mismatch,
    bool_and(entered) AS all_entered,
    coalesce(bool_or(overdue), false) AS overdue
  FROM members
  GROUP BY group_key, seq_id
),
problems AS MATERIALIZED (
  SELECT
    k.*,
    j.* EXCLUDE (group_key, seq_id),
    g.members,
    m.ops AS majority_ops,
    m.has_majority,
    CASE
      WHEN len(j.missing_ranks) > 0 THEN 'rank missing'
      WHEN j.op_mismatch THEN 'op mismatch'
      WHEN j.size_mismatch OR (k.alltoall AND j.all_entered AND k.in_total <> k.out_total) THEN 'size mismatch'
      WHEN j.dtype_mismatch THEN 'dtype mismatch'
      WHEN j.overdue AND len(j.entered_ranks) + len(j.unknown_ranks) = len(g.members) THEN 'stuck'
    END AS problem,
    group_text(k.pg_desc, k.pg_name) AS group_words,
    m.ops || ' #' || k.seq_id || ' of ' || group_text(k.pg_desc, k.pg_name) AS call_words,
    printf('%g s', k.timeout_ns / 1e9) AS timeout_words
  FROM collectives AS k
  JOIN judged AS j USING (group_key, seq_id)
  JOIN groups AS g USING (group_key)
  JOIN majority AS m USING (group_key, seq_id)
  WHERE len(j.missing_ranks) > 0 OR j.op_mismatch OR j.size_mismatch OR j.dtype_mismatch OR j.overdue
    OR (k.alltoall AND j.all_entered AND k.in_total <> k.out_total)
),
details AS (
  SELECT s.group_key, s.seq_id, string_agg(ranks_text(s.ranks) || ': ' || s.call_text, '; ' ORDER BY s.ranks[1]) AS detail
  FROM signatures AS s
  SEMI JOIN problems AS p USING (group_key, seq_id)
  GROUP BY s.group_key, s.seq_id
),
latest AS (
  -- Each rank's newest entry in its recorder, whatever its group: what it was doing last.
  SELECT rank, recorder, arg_max(pg_name, record_id) AS pg_name,
    arg_max(fr_op || ' #' || seq_id || ' of ' || group_text(pg_desc, pg_name)
      || CASE WHEN state = 'completed' OR coalesce(retired, false) THEN '' ELSE ', still in flight when dumped' END, record_id) AS words
  FROM fr_entries
  GROUP BY rank, recorder
),
whereabouts AS (
  -- For each missing rank of a problem: its last collective in the group, its newest entry
  -- elsewhere if that came later, and its stack when dumped.
  SELECT
    p.group_key,
    p.seq_id,
    string_agg(
      'rank ' || r.rank || '''s last collective there was '
        || coalesce(b.ops || ' #' || b.seq_id || CASE WHEN b.finished THEN '' ELSE ', still in flight when dumped' END,
                    'none its buffer holds')
        || CASE WHEN l.pg_name IS DISTINCT FROM p.pg_name AND l.words IS NOT NULL THEN ', and its newest entry ' || l.words ELSE '' END
        || coalesce('; its stack when dumped: ' || stack_brief(d.stack, 4), ''),
      '; ' ORDER BY r.rank
    ) AS words
  FROM problems AS p
  CROSS JOIN LATERAL (SELECT unnest(p.missing_ranks) AS rank) AS r
  LEFT JOIN (
    SELECT group_key, rank, seq_id, ops, finished FROM calls
  ) AS b ON b.group_key = p.group_key AND b.rank = r.rank
    AND b.seq_id = (SELECT max(seq_id) FROM calls AS o WHERE o.group_key = p.group_key AND o.rank = r.rank AND o.seq_id < p.seq_id)
  LEFT JOIN latest AS l ON l.rank = r.rank AND l.recorder = p.recorder
  LEFT JOIN fr_dumps AS d ON d.rank = r.rank AND d.recorder = p.recorder
  GROUP BY p.group_key, p.seq_id
)
SELECT
  getvariable('run_id') AS run_id,
  p.recorder,
  p.pg_name,
  p.pg_desc,
  to_json(p.members) AS group_ranks,
  p.seq_id,
  p.majority_ops AS op,
  p.problem,
  to_json(p.entered_ranks) AS entered_ranks,
  to_json(p.missing_ranks) AS missing_ranks,
  to_json(p.unfinished_ranks) AS unfinished_ranks,
  to_json(p.mismatched_ranks) AS mismatched_ranks,
  to_json(p.unknown_ranks) AS unknown_ranks,
  t.detail,
  p.first_created_ns,
  p.timeout_ns,
  row_number() OVER (PARTITION BY p.group_key ORDER BY p.seq_id) = 1 AS is_first,
  CASE p.problem
    WHEN 'rank missing' THEN
      ranks_text(p.missing_ranks) || ' never entered ' || p.call_words
        || CASE WHEN len(p.entered_ranks) > 0 THEN ': ' || ranks_text(p.entered_ranks) || ' waited in it (timeout ' || p.timeout_words || ')' ELSE '' END
        || coalesce('; ' || w.words, '')
    WHEN 'stuck' THEN
      ranks_text(p.unfinished_ranks) || ' had not finished ' || p.call_words || ' when dumped, past its '
        || p.timeout_words || ' timeout, and every member '
        || CASE WHEN len(p.unknown_ranks) > 0 THEN 'that left a dump ' ELSE '' END
        || 'entered it: the collective itself hung (the network, a device or the library), not the order of calls'
    ELSE
      CASE WHEN p.has_majority
        THEN ranks_text(p.mismatched_ranks) || '''s collective #' || p.seq_id || ' of ' || p.group_words || ' differs from '
          || ranks_text(list_filter(p.entered_ranks, lambda r: NOT list_contains(p.mismatched_ranks, r))) || '''s'
        ELSE 'the ranks disagree on collective #' || p.seq_id || ' of ' || p.group_words
      END || ' (a ' || replace(p.problem, 'dtype', 'element type') || '): ' || t.detail
  END
    || CASE WHEN len(p.unknown_ranks) > 0 THEN '; ' || ranks_text(p.unknown_ranks) || ' left no dump' ELSE '' END AS verdict
FROM problems AS p
JOIN details AS t USING (group_key, seq_id)
LEFT JOIN whereabouts AS w USING (group_key, seq_id)
WHERE p.problem IS NOT NULL
ORDER BY p.first_created_ns, p.pg_name, p.seq_id
