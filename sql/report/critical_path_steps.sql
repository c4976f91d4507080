-- Per step and part of its critical path, an average rank's milliseconds on the path, for the
-- stacked chart of what each step waited for, chain by chain. From step_critical_path; the first
-- `max_steps` steps that have a path.
SELECT
  step,
  CASE WHEN part = 'communication'
    THEN 'communication: ' || dimension || CASE scope WHEN 'inter' THEN ' (network)' WHEN 'intra' THEN ' (within a host)' ELSE '' END
    ELSE part END AS part,
  sum(path_ns) / 1e6 / count(DISTINCT rank) AS path_ms,
  count(DISTINCT rank) AS ranks
FROM step_critical_path
WHERE run_id = getvariable('run_id')
  AND step IN (
    SELECT DISTINCT step FROM step_critical_path WHERE run_id = getvariable('run_id') ORDER BY step LIMIT getvariable('max_steps')
  )
GROUP BY step, 2
HAVING sum(path_ns) > 0
ORDER BY step, part
