-- Per step: the straggler, how often it arrived last, the worst arrival skew, and the share of
-- exposed communication that was waiting. From step_sync.
SELECT
  step,
  straggler_rank,
  straggler_last_arrivals AS last_arrivals,
  collectives,
  max_skew_ns / 1e6 AS max_skew_ms,
  exposed_comm_ns / 1e6 AS exposed_comm_ms,
  wait_share
FROM step_sync
WHERE run_id = getvariable('run_id')
ORDER BY step
