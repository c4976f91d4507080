-- step_breakdown: where each step's time went on each rank, and how much communication was exposed.
--
-- Sums of `step_timeline` by state over each step's window. Because the stretches tile the
-- window, step_ns = compute_ns + exposed_comm_ns + other_ns + idle_ns holds exactly on every row.
-- Communication hidden under compute counts as compute (overlap_ns); only exposed communication
-- makes the step longer than its compute. overlap_pct is HTA's "comm/comp overlap" restricted to
-- one step; exposed_comm_ns is TraceLens's "exposed communication" restricted to one step.
--
-- Grain: one row per run, rank and step.
--
-- Columns:
--   run_id VARCHAR  The run.
--   rank INTEGER  Global rank.
--   step BIGINT  Step number.
--   timeline VARCHAR  'device' or 'cpu': the timeline measured.
--   window_start_ns BIGINT  Start of the measured window, ns since the Unix epoch.
--   window_end_ns BIGINT  End of the measured window.
--   step_ns BIGINT  Length of the window.
--   compute_ns BIGINT  Time any compute ran (union of compute intervals).
--   comm_ns BIGINT  Time any communication ran (union of communication intervals).
--   overlap_ns BIGINT  Time communication ran while compute ran too.
--   exposed_comm_ns BIGINT  Time communication ran with no compute: comm_ns - overlap_ns.
--   other_ns BIGINT  Time only copies, fills or DMA ran.
--   idle_ns BIGINT  Time nothing ran.
--   exposed_comm_share DOUBLE  exposed_comm_ns / step_ns.
--   overlap_pct DOUBLE  100 * overlap_ns / comm_ns; NULL when the step has no communication.
WITH by_state AS (
  SELECT rank, step, state, sum(dur_ns) AS ns
  FROM step_timeline
  WHERE step IS NOT NULL
  GROUP BY ALL
),
pivoted AS (
  SELECT
    rank,
    step,
    coalesce(sum(ns) FILTER (WHERE state IN ('compute', 'overlapped_comm')), 0) AS compute_ns,
    coalesce(sum(ns) FILTER (WHERE state IN ('overlapped_comm', 'exposed_comm')), 0) AS comm_ns,
    coalesce(sum(ns) FILTER (WHERE state = 'overlapped_comm'), 0) AS overlap_ns,
    coalesce(sum(ns) FILTER (WHERE state = 'exposed_comm'), 0) AS exposed_comm_ns,
    coalesce(sum(ns) FILTER (WHERE state = 'other'), 0) AS other_ns,
    coalesce(sum(ns) FILTER (WHERE state = 'idle'), 0) AS idle_ns
  FROM by_state
  GROUP BY rank, step
)
SELECT
  getvariable('run_id') AS run_id,
  s.rank,
  s.step,
  s.timeline,
  s.window_start_ns,
  s.window_end_ns,
  s.window_end_ns - s.window_start_ns AS step_ns,
  p.compute_ns,
  p.comm_ns,
  p.overlap_ns,
  p.exposed_comm_ns,
  p.other_ns,
  p.idle_ns,
  p.exposed_comm_ns / (s.window_end_ns - s.window_start_ns) AS exposed_comm_share,
  CASE WHEN p.comm_ns > 0 THEN 100.0 * p.overlap_ns / p.comm_ns END AS overlap_pct
FROM steps AS s
JOIN pivoted AS p USING (rank, step)
ORDER BY s.rank, s.step
