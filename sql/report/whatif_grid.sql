-- The what-if scaling factor over line rate and compression, at the run's own rank count, by the
-- replay where it has rows, else the paper's model. From whatif.
SELECT bandwidth_gbps, compression, scaling_factor, exposed_ns / 1e6 AS exposed_ms, run_link, model
FROM whatif
WHERE run_id = getvariable('run_id') AND fusion = 'observed'
  AND transfers = (SELECT min(transfers) FROM whatif WHERE run_id = getvariable('run_id'))
  AND model = (SELECT max(model) FROM whatif WHERE run_id = getvariable('run_id'))
  AND ranks = (SELECT min(ranks) FROM whatif WHERE run_id = getvariable('run_id'))
ORDER BY bandwidth_gbps, compression
