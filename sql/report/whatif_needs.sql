-- What it takes to reach each target scaling factor, per rank count: the least uncompressed line
-- rate, and the least compression at each line rate of the grid, for all traffic, by the replay
-- where it has rows, else the paper's model. From whatif_targets.
SELECT
  ranks,
  target,
  any_value(min_bandwidth_gbps) AS min_bandwidth_gbps,
  string_agg(printf('%g Gbit/s: %s', bandwidth_gbps, coalesce(printf('%.2fx', min_compression), 'unreachable')), ', '
    ORDER BY bandwidth_gbps) AS min_compression_by_line_rate
FROM whatif_targets
WHERE run_id = getvariable('run_id') AND fusion = 'observed'
  AND transfers = (SELECT min(transfers) FROM whatif_targets WHERE run_id = getvariable('run_id')) AND dimension IN ('all', 'dp')
  AND model = (SELECT max(model) FROM whatif_targets WHERE run_id = getvariable('run_id'))
  AND (model = 'paper' OR dimension = 'all')
GROUP BY ranks, target
ORDER BY ranks, target
