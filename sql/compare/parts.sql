-- What the typical step of run `run_a` and of run `run_b` is made of, in parts that add up to it.
--
-- The typical step is the interquartile mean over each run's rank-steps: the mean of those whose
-- length lies between the run's quartiles. Like a median it ignores the warm-up and the
-- profiler's teardown step; unlike a median its parts add up exactly to it, because each part is
-- the mean of that part over the same rank-steps (step = compute + exposed communication + other
-- + idle, on every rank-step). Exposed communication is split into waiting for other ranks (each
-- step's exposed wait, step_sync, shared among its ranks in proportion to their exposure) and the
-- rest, per parallel dimension and link (step_comm_groups), each dimension's exposure less its
-- share of the wait. From step_breakdown, step_sync and step_comm_groups.
--
-- Grain: one row per part.
--
-- Columns:
--   part VARCHAR  'compute', 'waiting for other ranks', 'exposed communication: <dimension>
--       (<link>)', 'other (copies, fills)' or 'idle'.
--   a_ms DOUBLE  The part in run_a's typical step, ms; 0 where the run has none of it.
--   b_ms DOUBLE  The same in run_b's.
--   delta_ms DOUBLE  b_ms - a_ms.
--   part_order INTEGER  Where the part comes in the step: compute, waiting, dimensions, other, idle.
WITH rank_steps AS (
  SELECT b.run_id, b.rank, b.step, b.step_ns, b.compute_ns, b.exposed_comm_ns, b.other_ns, b.idle_ns,
    coalesce(s.exposed_wait_ns * b.exposed_comm_ns / nullif(s.exposed_comm_ns, 0), 0) AS wait_ns
  FROM step_breakdown AS b
  LEFT JOIN step_sync AS s USING (run_id, step)
  WHERE b.run_id IN (getvariable('run_a'), getvariable('run_b'))
),
quartiles AS (
  SELECT run_id, quantile_cont(step_ns, 0.25) AS q1, quantile_cont(step_ns, 0.75) AS q3 FROM rank_steps GROUP BY run_id
),
typical AS (
  SELECT r.*, count(*) OVER (PARTITION BY r.run_id) AS rank_steps
  FROM rank_steps AS r JOIN quartiles AS q USING (run_id)
  WHERE r.step_ns BETWEEN q.q1 AND q.q3
),
dimensions AS (
  SELECT t.run_id,
    'exposed communication: ' || g.dimension
      || CASE g.scope WHEN 'inter' THEN ' (network)' WHEN 'intra' THEN ' (within a host)' ELSE '' END AS part,
    sum(g.exposed_comm_ns * (1 - t.wait_ns / nullif(t.exposed_comm_ns, 0))) / any_value(t.rank_steps) AS ns
  FROM step_comm_groups AS g
  JOIN typical AS t USING (run_id, rank, step)
  WHERE g.exposed_comm_ns > 0
  GROUP BY ALL
),
parts AS (
  SELECT run_id, part, ns, part_order
  FROM (
    SELECT run_id, avg(compute_ns) AS "compute", avg(wait_ns) AS "waiting for other ranks",
      avg(other_ns) AS "other (copies, fills)", avg(idle_ns) AS "idle"
    FROM typical
    GROUP BY run_id
  )
  UNPIVOT (ns FOR part IN ("compute", "waiting for other ranks", "other (copies, fills)", "idle"))
  JOIN (VALUES ('compute', 1), ('waiting for other ranks', 2), ('other (copies, fills)', 4), ('idle', 5)) AS o(part, part_order)
    USING (part)
  UNION ALL
  SELECT run_id, part, ns, 3 FROM dimensions
)
SELECT
  part,
  coalesce(sum(ns) FILTER (WHERE run_id = getvariable('run_a')), 0) / 1e6 AS a_ms,
  coalesce(sum(ns) FILTER (WHERE run_id = getvariable('run_b')), 0) / 1e6 AS b_ms,
  b_ms - a_ms AS delta_ms,
  any_value(part_order) AS part_order
FROM parts
GROUP BY part
ORDER BY part_order, part
