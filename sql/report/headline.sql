-- The run's headline: how much of its step time was exposed communication, and the run's facts.
-- From runs, step_breakdown and rank_breakdown (the latter for runs without steps).
WITH run AS (
  SELECT * FROM runs WHERE run_id = getvariable('run_id')
),
stepped AS (
  SELECT
    count(*) AS step_rows,
    count(DISTINCT step) AS steps,
    sum(step_ns) AS step_ns,
    sum(exposed_comm_ns) AS exposed_comm_ns,
    sum(comm_ns) AS comm_ns,
    sum(overlap_ns) AS overlap_ns,
    median(step_ns) AS median_step_ns
  FROM step_breakdown WHERE run_id = getvariable('run_id')
),
whole AS (
  SELECT sum(span_ns) AS span_ns, sum(exposed_comm_ns) AS exposed_comm_ns, sum(comm_ns) AS comm_ns,
    sum(overlap_ns) AS overlap_ns, sum(collectives) AS collectives
  FROM rank_breakdown WHERE run_id = getvariable('run_id')
)
SELECT
  run.*,
  stepped.steps,
  stepped.median_step_ns,
  CASE WHEN stepped.step_rows > 0 THEN 'steps' ELSE 'whole trace' END AS basis,
  coalesce(stepped.exposed_comm_ns / nullif(stepped.step_ns, 0), whole.exposed_comm_ns / nullif(whole.span_ns, 0)) AS exposed_comm_share,
  CASE WHEN stepped.step_rows > 0 THEN 100.0 * stepped.overlap_ns / nullif(stepped.comm_ns, 0)
       ELSE 100.0 * whole.overlap_ns / nullif(whole.comm_ns, 0) END AS overlap_pct,
  whole.collectives
FROM run, stepped, whole
