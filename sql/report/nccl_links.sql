-- Which rank talks to which, over what, for the communicators small enough to draw. From
-- nccl_connections.
SELECT
  coalesce(comm_id, '(unnamed, ' || host || ':' || pid || ')') AS comm,
  from_rank,
  to_rank,
  string_agg(DISTINCT transport, ', ') AS transport,
  count(DISTINCT channel) AS channels
FROM nccl_connections
WHERE run_id = getvariable('run_id')
GROUP BY ALL
HAVING max(greatest(from_rank, to_rank)) < 64
ORDER BY comm, from_rank, to_rank
