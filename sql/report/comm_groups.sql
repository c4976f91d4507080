-- Each process group over the whole run: its dimension, link, traffic, bus bandwidth and the share
-- of the run's exposed communication it accounts for. From step_comm_groups; the bus bandwidth is
-- the mean of the steps' own, weighted by their communication time.
SELECT
  coalesce(pg, '(no group)') AS pg,
  any_value(pg_desc) AS pg_desc,
  any_value(dimension) AS dimension,
  any_value(dimension_source) AS dimension_from,
  any_value(scope) AS scope,
  max(group_size) AS group_size,
  count(DISTINCT rank) AS ranks,
  sum(collectives) AS collectives,
  sum(bytes) / 1e6 AS total_mb,
  sum(exposed_comm_ns) / 1e6 / count(DISTINCT rank) AS exposed_ms_per_rank,
  sum(exposed_comm_ns) / nullif(sum(sum(exposed_comm_ns)) OVER (), 0) AS exposed_share,
  sum(busbw_gbps * comm_ns) FILTER (WHERE busbw_gbps IS NOT NULL)
    / sum(comm_ns) FILTER (WHERE busbw_gbps IS NOT NULL) AS busbw_gbps
FROM step_comm_groups
WHERE run_id = getvariable('run_id')
GROUP BY pg
ORDER BY exposed_share DESC NULLS LAST, pg
