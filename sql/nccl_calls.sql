-- nccl_calls: every collective and point-to-point call NCCL logged (`NCCL_DEBUG_SUBSYS=COLL`).
--
-- NCCL logs a call when it is enqueued, on the calling thread: op, element count, type, root (the
-- peer for send and recv), communicator. There is no duration in these lines: they say what was
-- called and in which order, not how long it took (the traces say that). `seq` is the call's
-- position among its communicator's calls in this process, which is the call order whatever
-- `op_count` means in the NCCL version at hand. `message_bytes` is nccl-tests' message size S:
-- count x element size, times the ranks for allgather, reducescatter and alltoall, whose counts
-- are per rank. Calls recorded by NCCL's profiler plugin (JSON records) are included too.
--
-- Grain: one row per run, process and logged call.
--
-- Columns:
--   run_id VARCHAR  The run.
--   host VARCHAR  Host of the calling process.
--   pid BIGINT  Calling process.
--   tid BIGINT  Calling thread.
--   device INTEGER  CUDA device of the calling thread.
--   comm VARCHAR  Communicator pointer in the process.
--   comm_id VARCHAR  Cross-rank communicator id (see nccl_comms); NULL if its Init line is missing.
--   rank INTEGER  The process's rank in the communicator; NULL if its Init line is missing.
--   op VARCHAR  allreduce, allgather, reducescatter, broadcast, reduce, send, recv, alltoall, ...
--   op_count BIGINT  NCCL's opCount, as logged (hex in the log).
--   seq BIGINT  Position among the communicator's calls in this process, from 0.
--   count BIGINT  Elements, as passed to the call.
--   dtype VARCHAR  Element type (float32, bfloat16, ...).
--   bytes BIGINT  count x element size: the call's buffer.
--   message_bytes BIGINT  Message size S (nccl-tests convention).
--   root INTEGER  Root of broadcast and reduce; the peer of send and recv.
--   reduce_op VARCHAR  sum, prod, max, min, avg for reductions.
--   nranks INTEGER  Ranks in the communicator.
--   logged_at_ns BIGINT  When it was logged (NCCL 2.26+ timestamps), ns since the Unix epoch.
--   source VARCHAR  'debug log' or 'profiler plugin'.
--   log_file VARCHAR  The log file.
--   line BIGINT  Line in it.
WITH call_lines AS (
  -- Most call lines were read by pipelines/nccl/lines.py, the rest by logfile.py; each call is
  -- joined to its communicator as it stood at the call's line.
  SELECT * FROM read_parquet(getvariable('nccl_call_files'))
  UNION ALL BY NAME
  SELECT * FROM _nccl_call_lines
),
numbered AS (
  SELECT *, row_number() OVER (PARTITION BY log_file, host, pid, comm ORDER BY line) - 1 AS seq
  FROM call_lines
),
versions AS (
  SELECT *, lead(line) OVER (PARTITION BY log_file, host, pid, comm ORDER BY line) AS until_line
  FROM _nccl_comm_versions
),
named AS (
  SELECT n.*, v.comm_id, v.rank, COALESCE(NULLIF(n.nranks, 0), v.nranks) AS call_nranks
  FROM numbered AS n
  LEFT JOIN versions AS v
    ON n.log_file = v.log_file AND n.host = v.host AND n.pid = v.pid AND n.comm = v.comm
   AND n.line > v.line AND (v.until_line IS NULL OR n.line < v.until_line)
)
SELECT
  c.run_id, c.host, c.pid, c.tid, c.device, c.comm, c.comm_id, c.rank, c.op, c.op_count, c.seq, c.count,
  COALESCE(d.name, 'code ' || c.datatype) AS dtype,
  c.count * d.size AS bytes,
  c.count * d.size * CASE WHEN list_contains(getvariable('nccl_per_rank_ops'), c.op) AND c.call_nranks <> 0
                          THEN c.call_nranks ELSE 1 END AS message_bytes,
  c.root,
  CASE WHEN list_contains(getvariable('nccl_reductions'), c.op) THEN COALESCE(r.name, 'code ' || c.reduce_op) END AS reduce_op,
  c.call_nranks AS nranks, c.logged_at_ns, 'debug log' AS source, c.log_file, c.line
FROM named AS c
LEFT JOIN _nccl_datatypes AS d ON d.code = TRY_CAST(c.datatype AS BIGINT)
LEFT JOIN _nccl_reduce_ops AS r ON r.code = TRY_CAST(c.reduce_op AS BIGINT)
UNION ALL BY NAME
SELECT * FROM _nccl_profiler_calls
