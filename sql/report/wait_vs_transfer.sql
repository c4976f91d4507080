-- Per step, exposed communication split into waiting for other ranks and moving data (ms, summed
-- over ranks). From step_sync.
SELECT step, part, ms
FROM (
  SELECT step, exposed_wait_ns / 1e6 AS "waiting for other ranks", exposed_transfer_ns / 1e6 AS "transfer"
  FROM step_sync
  WHERE run_id = getvariable('run_id')
)
UNPIVOT (ms FOR part IN ("waiting for other ranks", "transfer"))
ORDER BY step
