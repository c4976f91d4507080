-- The steps the timeline offers, at most `max_timeline_steps`: the typical step (the one whose
-- length, averaged over ranks, is the median of the run's steps: neither the warm-up nor an
-- outlier) first, then the rest in order. From step_breakdown. The timeline opens on the first.
WITH per_step AS (
  SELECT step, avg(step_ns) AS mean_step_ns, sum(exposed_comm_ns) / nullif(sum(step_ns), 0) AS exposed_comm_share,
    count(*) AS ranks
  FROM step_breakdown
  WHERE run_id = getvariable('run_id')
  GROUP BY step
),
typical AS (
  SELECT step FROM per_step
  ORDER BY abs(mean_step_ns - (SELECT median(mean_step_ns) FROM per_step)), ranks DESC, step
  LIMIT 1
)
SELECT step, mean_step_ns / 1e6 AS mean_step_ms, exposed_comm_share, step = (SELECT step FROM typical) AS typical
FROM per_step
ORDER BY typical DESC, step
LIMIT getvariable('max_timeline_steps')
