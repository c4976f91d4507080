-- Per step, exposed communication split into waiting for other ranks and moving data (ms, summed
-- over ranks). From step_sync; the first `max_steps` steps, as in the step breakdown.
SELECT step, part, ms
FROM (
  SELECT step, exposed_wait_ns / 1e6 AS "waiting for other ranks", exposed_transfer_ns / 1e6 AS "transfer"
  FROM step_sync
  WHERE run_id = getvariable('run_id')
    AND step IN (SELECT DISTINCT step FROM step_sync WHERE run_id = getvariable('run_id') ORDER BY step LIMIT getvariable('max_steps'))
)
UNPIVOT (ms FOR part IN ("waiting for other ranks", "transfer"))
ORDER BY step
