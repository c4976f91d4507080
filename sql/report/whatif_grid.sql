-- The what-if scaling factor over line rate and compression, at the run's own rank count. From whatif.
SELECT bandwidth_gbps, compression, scaling_factor, exposed_ns / 1e6 AS exposed_ms, run_link
FROM whatif
WHERE run_id = getvariable('run_id') AND fusion = 'observed'
  AND ranks = (SELECT min(ranks) FROM whatif WHERE run_id = getvariable('run_id'))
ORDER BY bandwidth_gbps, compression
