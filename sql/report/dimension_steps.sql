-- Per step and parallel dimension, the exposed milliseconds of an average rank, for the stacked
-- chart of which dimension each step waited for. From step_comm_groups; the first `max_steps` steps.
SELECT
  step,
  dimension || CASE scope WHEN 'inter' THEN ' (network)' WHEN 'intra' THEN ' (within a host)' ELSE '' END AS dimension,
  sum(exposed_comm_ns) / 1e6 / (SELECT count(DISTINCT rank) FROM step_comm_groups WHERE run_id = getvariable('run_id')) AS exposed_ms
FROM step_comm_groups
WHERE run_id = getvariable('run_id')
  AND step IN (
    SELECT DISTINCT step FROM step_comm_groups WHERE run_id = getvariable('run_id') ORDER BY step LIMIT getvariable('max_steps')
  )
GROUP BY ALL
HAVING sum(exposed_comm_ns) > 0
ORDER BY step, dimension
