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
  -- Busy stretches lie within the span and tile it with the idle ones, so idle time is what the
  -- span leaves: no join of tens of millions of stretches to the spans.
  SELECT
    rank,
    coalesce(sum(dur_ns) FILTER (WHERE state IN ('compute', 'overlapped_comm')), 0) AS compute_ns,
    coalesce(sum(dur_ns) FILTER (WHERE state IN ('overlapped_comm', 'exposed_comm')), 0) AS comm_ns,
    coalesce(sum(dur_ns) FILTER (WHERE state = 'overlapped_comm'), 0) AS overlap_ns,
    coalesce(sum(dur_ns) FILTER (WHERE state = 'exposed_comm'), 0) AS exposed_comm_ns,
    coalesce(sum(dur_ns) FILTER (WHERE state = 'other'), 0) AS other_ns
  FROM step_timeline
  WHERE state <> 'idle'
  GROUP BY rank
)
SELECT
  getvariable('run_id') AS run_id,
  s.rank,
  s.timeline,
  s.span_start_ns,
  s.span_end_ns,
  s.span_end_ns - s.span_start_ns AS span_ns,
  coalesce(b.compute_ns, 0) AS compute_ns,
  coalesce(b.comm_ns, 0) AS comm_ns,
  coalesce(b.overlap_ns, 0) AS overlap_ns,
  coalesce(b.exposed_comm_ns, 0) AS exposed_comm_ns,
  coalesce(b.other_ns, 0) AS other_ns,
  s.span_end_ns - s.span_start_ns - coalesce(b.compute_ns + b.exposed_comm_ns + b.other_ns, 0) AS idle_ns,
  coalesce(b.exposed_comm_ns, 0) / (s.span_end_ns - s.span_start_ns) AS exposed_comm_share,
  CASE WHEN b.comm_ns > 0 THEN 100.0 * b.overlap_ns / b.comm_ns END AS overlap_pct,
  (SELECT count(*) FROM steps WHERE steps.rank = s.rank) AS steps,
  (SELECT count(*) FROM collectives WHERE collectives.rank = s.rank) AS collectives
FROM spans AS s
LEFT JOIN by_rank AS b USING (rank)
ORDER BY s.rank
