-- nccl_crosscheck: do the collectives in a rank's trace agree with the calls its NCCL log records?
--
-- For each rank and NCCL communicator, the trace's collectives (in start order) are laid against
-- the communicator's logged calls of the same process (in call order). The log usually covers the
-- whole run and the trace only the profiled steps, so the trace is slid along the log to the
-- offset where the most (op, message size) pairs agree. Training repeats itself, so several
-- offsets often agree equally; then the one whose logged time is closest to the trace's first
-- collective wins (NCCL 2.26+ logs have times), else the latest offset at which the whole trace
-- still fits in the log (profiling usually covers later steps). Then every trace collective is compared
-- with the call at its place: same op and size, a different op (the calls are out of step), a
-- different size, or no call at all (the log ends first). Disagreement means the trace and the log
-- see different communication: a wrong communicator match, a missing rank file, or a desync.
--
-- Grain: one row per run, rank and NCCL communicator.
--
-- Columns:
--   run_id VARCHAR  The run.
--   rank INTEGER  Global rank.
--   comm_id VARCHAR  The NCCL communicator.
--   trace_collectives BIGINT  Collectives of the communicator in the rank's trace.
--   log_calls BIGINT  Calls logged for it by the rank's process.
--   offset_calls BIGINT  Log position of the trace's first collective.
--   matched BIGINT  Trace collectives whose logged call has the same op and size.
--   op_mismatches BIGINT  ... whose call has another op.
--   size_mismatches BIGINT  ... whose call has the same op but another size.
--   missing_in_log BIGINT  ... with no call at their place.
--   first_mismatch VARCHAR  The first disagreement, in words; NULL when all agree.
WITH traced AS (
  SELECT c.rank, c.comm_id, c.op, c.bytes, c.start_ns, p.host, p.pid,
    row_number() OVER (PARTITION BY c.rank, c.comm_id ORDER BY c.start_ns) - 1 AS position,
    count(*) OVER (PARTITION BY c.rank, c.comm_id) AS traced_count
  FROM collectives AS c
  JOIN (SELECT DISTINCT rank, split_part(host, '.', 1) AS host, pid FROM ranks) AS p USING (rank)
  WHERE c.comm_id IS NOT NULL
),
logged AS (
  SELECT split_part(host, '.', 1) AS host, pid, comm_id, seq, op, message_bytes, logged_at_ns,
    count(*) OVER (PARTITION BY host, pid, comm_id) AS logged_count
  FROM nccl_calls
  -- Only communicators the traces used: a log-only run, or a huge log, costs nothing here.
  WHERE comm_id IN (SELECT comm_id FROM traced) AND source = 'debug log'
),
candidates AS (
  SELECT t.rank, t.comm_id, l.seq - t.position AS offset_calls, count(*) AS agreeing,
    any_value(l.seq - t.position + t.traced_count <= l.logged_count) AS fits
  FROM traced AS t
  JOIN logged AS l ON l.host = t.host AND l.pid = t.pid AND l.comm_id = t.comm_id AND l.op = t.op AND l.message_bytes = t.bytes
  WHERE l.seq >= t.position
  GROUP BY ALL
),
timed AS (
  -- How far the logged call at each candidate offset is, in time, from the trace's first collective.
  SELECT c.*, abs(l.logged_at_ns - t.start_ns) AS time_gap_ns
  FROM candidates AS c
  JOIN traced AS t ON t.rank = c.rank AND t.comm_id = c.comm_id AND t.position = 0
  LEFT JOIN logged AS l ON l.host = t.host AND l.pid = t.pid AND l.comm_id = c.comm_id AND l.seq = c.offset_calls
),
best AS (
  SELECT rank, comm_id, offset_calls
  FROM (
    SELECT *, row_number() OVER (
      PARTITION BY rank, comm_id ORDER BY agreeing DESC, time_gap_ns ASC NULLS LAST, fits DESC, offset_calls DESC
    ) AS preference
    FROM timed
  )
  WHERE preference = 1
),
compared AS (
  SELECT
    t.rank,
    t.comm_id,
    t.position,
    coalesce(b.offset_calls, 0) AS offset_calls,
    CASE
      WHEN l.seq IS NULL THEN 'missing'
      WHEN l.op <> t.op THEN 'op'
      WHEN l.message_bytes IS DISTINCT FROM t.bytes THEN 'size'
      ELSE 'match'
    END AS outcome,
    printf('trace collective #%d (%s, %s bytes) vs logged call #%s (%s, %s bytes)',
      t.position, t.op, coalesce(CAST(t.bytes AS VARCHAR), '?'), coalesce(CAST(l.seq AS VARCHAR), '-'),
      coalesce(l.op, 'none'), coalesce(CAST(l.message_bytes AS VARCHAR), '?')) AS description
  FROM traced AS t
  LEFT JOIN best AS b USING (rank, comm_id)
  LEFT JOIN logged AS l
    ON l.host = t.host AND l.pid = t.pid AND l.comm_id = t.comm_id AND l.seq = t.position + coalesce(b.offset_calls, 0)
),
log_sizes AS (
  SELECT p.rank, l.comm_id, count(*) AS log_calls
  FROM logged AS l
  JOIN (SELECT DISTINCT rank, split_part(host, '.', 1) AS host, pid FROM ranks) AS p USING (host, pid)
  GROUP BY ALL
)
SELECT
  getvariable('run_id') AS run_id,
  c.rank,
  c.comm_id,
  count(*) AS trace_collectives,
  coalesce(any_value(s.log_calls), 0) AS log_calls,
  any_value(c.offset_calls) AS offset_calls,
  count(*) FILTER (WHERE outcome = 'match') AS matched,
  count(*) FILTER (WHERE outcome = 'op') AS op_mismatches,
  count(*) FILTER (WHERE outcome = 'size') AS size_mismatches,
  count(*) FILTER (WHERE outcome = 'missing') AS missing_in_log,
  arg_min(description, position) FILTER (WHERE outcome <> 'match') AS first_mismatch
FROM compared AS c
LEFT JOIN log_sizes AS s USING (rank, comm_id)
GROUP BY c.rank, c.comm_id
ORDER BY c.rank, c.comm_id
