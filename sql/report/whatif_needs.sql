-- What it takes to reach each target scaling factor, per rank count: the least uncompressed line
-- rate, and the least compression at each line rate of the grid where some compression reaches
-- it, for all traffic, by the replay where it has rows, else the paper's model. From whatif_targets.
-- Both are text, saying so when nothing reaches the target.
SELECT
  ranks,
  target,
  coalesce(printf('%.1f Gbit/s', any_value(min_bandwidth_gbps)), 'none: no line rate alone reaches it') AS least_line_rate,
  coalesce(
    string_agg(printf('%g Gbit/s: %.2fx', bandwidth_gbps, min_compression), ', ' ORDER BY bandwidth_gbps)
      FILTER (WHERE min_compression IS NOT NULL),
    'none: no compression reaches it at any line rate of the grid'
  ) AS least_compression_by_line_rate
FROM whatif_targets
WHERE run_id = getvariable('run_id') AND fusion = 'observed'
  AND transfers = (
    SELECT CASE WHEN bool_or(run_link) THEN min(transfers) ELSE max(transfers) END FROM whatif WHERE run_id = getvariable('run_id')
  )
  AND dimension IN ('all', 'dp')
  AND model = (SELECT max(model) FROM whatif_targets WHERE run_id = getvariable('run_id'))
  AND (model = 'paper' OR dimension = 'all')
GROUP BY ranks, target
ORDER BY ranks, target
