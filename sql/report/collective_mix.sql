-- The mix of collectives per operation: how many, how large, how long. From collectives.
SELECT
  coalesce(op, '(unknown)') AS op,
  count(*) AS instances,
  count(DISTINCT rank) AS ranks,
  sum(bytes) / 1e6 AS total_mb,
  median(bytes) / 1e6 AS median_mb,
  median(dur_ns) / 1e3 AS median_us,
  any_value(metadata_source) AS metadata_source
FROM collectives
WHERE run_id = getvariable('run_id')
GROUP BY ALL
ORDER BY instances DESC
