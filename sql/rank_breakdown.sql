-- rank_breakdown: where each rank's time went over its whole trace, steps or no steps.
--
-- The same measures as `step_breakdown`, summed over the rank's span: from the start of its
-- first activity interval to the end of its last. It exists for traces without ProfilerStep
-- annotations and for comparison with HTA's and TraceLens's whole-trace numbers
-- (TraceLens: computation, exposed communication, total communication, idle, span; HTA:
-- comm/comp overlap %). Again span_ns = compute_ns + exposed_comm_ns + other_ns + idle_ns.
--
-- Grain: one row per run and rank.
--
-- Columns:
--   run_id VARCHAR  The run.
--   rank INTEGER  Global rank.
--   timeline VARCHAR  'device' or 'cpu': the timeline measured.
--   span_start_ns BIGINT  Start of the first activity, ns since the Unix epoch.
--   span_end_ns BIGINT  End of the last activity.
--   span_ns BIGINT  span_end_ns - span_start_ns.
--   compute_ns BIGINT  Time any compute ran.
--   comm_ns BIGINT  Time any communication ran.
--   overlap_ns BIGINT  Time communication ran while compute ran too.
--   exposed_comm_ns BIGINT  Time communication ran with no compute.
--   other_ns BIGINT  Time only copies, fills or DMA ran.
--   idle_ns BIGINT  Time nothing ran.
--   exposed_comm_share DOUBLE  exposed_comm_ns / span_ns.
--   overlap_pct DOUBLE  100 * overlap_ns / comm_ns; NULL when the rank has no communication.
--   steps BIGINT  Profiler steps found on the rank.
--   collectives BIGINT  Collective instances found on the rank (see `collectives`).
WITH spans AS (
  SELECT rank, any_value(timeline) AS timeline, min(start_ns) AS span_start_ns, max(end_ns) AS span_end_ns
  FROM _activity
  GROUP BY rank
),
by_rank AS (
  SELECT
    g.rank,
    coalesce(sum(g.end_ns - g.start_ns) FILTER (WHERE g.state IN ('compute', 'overlapped_comm')), 0) AS compute_ns,
    coalesce(sum(g.end_ns - g.start_ns) FILTER (WHERE g.state IN ('overlapped_comm', 'exposed_comm')), 0) AS comm_ns,
    coalesce(sum(g.end_ns - g.start_ns) FILTER (WHERE g.state = 'overlapped_comm'), 0) AS overlap_ns,
    coalesce(sum(g.end_ns - g.start_ns) FILTER (WHERE g.state = 'exposed_comm'), 0) AS exposed_comm_ns,
    coalesce(sum(g.end_ns - g.start_ns) FILTER (WHERE g.state = 'other'), 0) AS other_ns,
    coalesce(sum(g.end_ns - g.start_ns) FILTER (WHERE g.state = 'idle'), 0) AS idle_ns
  FROM step_timeline AS g
  JOIN spans AS s ON g.rank = s.rank AND g.start_ns >= s.span_start_ns AND g.end_ns <= s.span_end_ns
  GROUP BY g.rank
)
SELECT
  getvariable('run_id') AS run_id,
  s.rank,
  s.timeline,
  s.span_start_ns,
  s.span_end_ns,
  s.span_end_ns - s.span_start_ns AS span_ns,
  b.compute_ns,
  b.comm_ns,
  b.overlap_ns,
  b.exposed_comm_ns,
  b.other_ns,
  b.idle_ns,
  b.exposed_comm_ns / (s.span_end_ns - s.span_start_ns) AS exposed_comm_share,
  CASE WHEN b.comm_ns > 0 THEN 100.0 * b.overlap_ns / b.comm_ns END AS overlap_pct,
  (SELECT count(*) FROM steps WHERE steps.rank = s.rank) AS steps,
  (SELECT count(*) FROM collectives WHERE collectives.rank = s.rank) AS collectives
FROM spans AS s
JOIN by_rank AS b USING (rank)
ORDER BY s.rank
