-- The scaling factor of every run of this run's job, against its number of ranks: measured against
-- the job's baseline, predicted at full line rate by the what-if, and estimated from exposure.
-- From scaling and verdict (recomputed for the report).
WITH job_runs AS (
  SELECT s.run_id, s.world_size AS ranks, v.measured_sf, v.full_rate_sf, v.estimated_sf
  FROM scaling AS s
  JOIN verdict AS v USING (run_id)
  WHERE s.job = (SELECT job FROM scaling WHERE run_id = getvariable('run_id'))
)
SELECT run_id, ranks, kind, sf
FROM job_runs
UNPIVOT (sf FOR kind IN (measured_sf AS 'measured', full_rate_sf AS 'predicted at full line rate', estimated_sf AS 'estimated from exposure'))
ORDER BY ranks, kind
