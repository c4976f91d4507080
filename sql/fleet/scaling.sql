-- The scaling curve of every job: each run's measured scaling factor against its job's baseline,
-- by its number of ranks, where the job has runs of more than one size. From scaling.
SELECT job, run_id, world_size AS ranks, measured_sf AS sf
FROM scaling
WHERE measured_sf IS NOT NULL
  AND job IN (SELECT job FROM scaling GROUP BY job HAVING count(DISTINCT world_size) > 1)
ORDER BY job, ranks
