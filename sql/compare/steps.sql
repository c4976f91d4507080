-- The typical step of run `run_a` and of run `run_b` (the interquartile mean over rank-steps,
-- as in compare/parts, which add up to it), with each run's median step, ranks and line rate, so
-- a comparison can say what it cannot compare. From step_breakdown and runs.
--
-- Grain: one row per run given (run_a first).
--
-- Columns:
--   run_id VARCHAR  The run.
--   step_ms DOUBLE  Its typical step: the mean of its rank-steps between the quartiles, ms.
--   median_step_ms DOUBLE  Its median rank-step, ms.
--   rank_steps BIGINT  Rank-steps measured (all, not only the typical ones).
--   ranks BIGINT  Ranks with a measured step.
--   world_size INTEGER  The run's world size.
--   link_gbps DOUBLE  The run's network line rate, where known.
--   backend VARCHAR  The run's backend.
--   job VARCHAR  The run's job tag.
WITH rank_steps AS (
  SELECT run_id, rank, step_ns FROM step_breakdown WHERE run_id IN (getvariable('run_a'), getvariable('run_b'))
),
quartiles AS (
  SELECT run_id, quantile_cont(step_ns, 0.25) AS q1, quantile_cont(step_ns, 0.75) AS q3, median(step_ns) AS median_ns,
    count(*) AS rank_steps, count(DISTINCT rank) AS ranks
  FROM rank_steps
  GROUP BY run_id
)
SELECT
  r.run_id,
  (SELECT avg(s.step_ns) FROM rank_steps AS s WHERE s.run_id = r.run_id AND s.step_ns BETWEEN q.q1 AND q.q3) / 1e6 AS step_ms,
  q.median_ns / 1e6 AS median_step_ms,
  coalesce(q.rank_steps, 0) AS rank_steps,
  coalesce(q.ranks, 0) AS ranks,
  r.world_size,
  r.link_gbps,
  r.backend,
  r.job
FROM runs AS r
LEFT JOIN quartiles AS q USING (run_id)
WHERE r.run_id IN (getvariable('run_a'), getvariable('run_b'))
ORDER BY r.run_id <> getvariable('run_a')
