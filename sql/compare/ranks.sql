-- Which ranks changed most from run `run_a` to run `run_b`: per global rank in both runs, its
-- median step and its median exposed communication in each, the largest change in step first,
-- at most `max_ranks` of them. Ranks in one run only are left out (compare/steps gives both
-- runs' rank counts). From step_breakdown.
--
-- Grain: one row per global rank found in both runs.
--
-- Columns:
--   rank INTEGER  Global rank.
--   a_step_ms DOUBLE  Its median step in run_a, ms.
--   b_step_ms DOUBLE  The same in run_b.
--   delta_step_ms DOUBLE  b_step_ms - a_step_ms.
--   a_exposed_ms DOUBLE  Its median exposed communication per step in run_a, ms.
--   b_exposed_ms DOUBLE  The same in run_b.
--   delta_exposed_ms DOUBLE  b_exposed_ms - a_exposed_ms.
WITH per_rank AS (
  SELECT run_id, rank, median(step_ns) / 1e6 AS step_ms, median(exposed_comm_ns) / 1e6 AS exposed_ms
  FROM step_breakdown
  WHERE run_id IN (getvariable('run_a'), getvariable('run_b'))
  GROUP BY run_id, rank
)
SELECT
  a.rank,
  a.step_ms AS a_step_ms,
  b.step_ms AS b_step_ms,
  b.step_ms - a.step_ms AS delta_step_ms,
  a.exposed_ms AS a_exposed_ms,
  b.exposed_ms AS b_exposed_ms,
  b.exposed_ms - a.exposed_ms AS delta_exposed_ms
FROM per_rank AS a
JOIN per_rank AS b ON b.rank = a.rank AND b.run_id = getvariable('run_b')
WHERE a.run_id = getvariable('run_a')
ORDER BY abs(delta_step_ms) DESC, a.rank
LIMIT getvariable('max_ranks')
