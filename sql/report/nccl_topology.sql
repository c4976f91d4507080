-- The run's NCCL communicators: who takes part, where, and over which transports. From nccl_comms
-- and nccl_connections.
WITH links AS (
  SELECT comm_id,
    string_agg(DISTINCT detail, ', ' ORDER BY detail) AS links,
    count(*) AS connection_lines
  FROM nccl_connections
  WHERE run_id = getvariable('run_id')
  GROUP BY comm_id
)
SELECT
  coalesce(c.comm_id, '(no communicator named)') AS comm_id,
  any_value(c.nranks) AS nranks,
  count(DISTINCT c.rank) AS ranks_logged,
  string_agg(DISTINCT c.host, ', ') AS hosts,
  string_agg(DISTINCT CAST(c.device AS VARCHAR), ',') AS devices,
  any_value(c.network) AS network,
  any_value(c.nccl_version) AS nccl_version,
  any_value(l.links) AS links
FROM nccl_comms AS c
LEFT JOIN links AS l USING (comm_id)
WHERE c.run_id = getvariable('run_id')
GROUP BY c.comm_id
UNION ALL
SELECT '(no communicator named)', NULL, NULL, NULL, NULL, NULL, NULL, links
FROM links
WHERE comm_id IS NULL
ORDER BY nranks DESC NULLS LAST, comm_id
