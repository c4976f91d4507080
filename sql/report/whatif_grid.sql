-- The what-if scaling factor over line rate and compression, at the run's own rank count, by the
-- replay where it has rows, else the paper's model; transfers as achieved in the run when its
-- line rate is known, else at the full line rate of each cell. From whatif.
SELECT bandwidth_gbps, compression, scaling_factor, exposed_ns / 1e6 AS exposed_ms, run_link, model, transfers
FROM whatif
WHERE run_id = getvariable('run_id') AND fusion = 'observed'
  -- As achieved when the run's line rate is known, else at full line rate (achieved needs it).
  AND transfers = (
    SELECT CASE WHEN bool_or(run_link) THEN min(transfers) ELSE max(transfers) END FROM whatif WHERE run_id = getvariable('run_id')
  )
  AND model = (SELECT max(model) FROM whatif WHERE run_id = getvariable('run_id'))
  AND ranks = (SELECT min(ranks) FROM whatif WHERE run_id = getvariable('run_id')
               AND model = (SELECT max(model) FROM whatif WHERE run_id = getvariable('run_id')))
ORDER BY bandwidth_gbps, compression
