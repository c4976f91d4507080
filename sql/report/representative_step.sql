-- The step whose length (averaged over ranks) is the median of the run's steps: a typical step,
-- neither the warm-up nor an outlier. From step_breakdown.
WITH per_step AS (
  SELECT step, avg(step_ns) AS mean_step_ns, count(*) AS ranks
  FROM step_breakdown
  WHERE run_id = getvariable('run_id')
  GROUP BY step
)
SELECT step, mean_step_ns
FROM per_step
ORDER BY abs(mean_step_ns - (SELECT median(mean_step_ns) FROM per_step)), ranks DESC, step
LIMIT 1
