-- Per rank, over its steps (or whole trace when it has none): the shares that matter. From
-- step_breakdown and rank_breakdown.
WITH stepped AS (
  SELECT rank, count(*) AS steps, median(step_ns) / 1e6 AS median_step_ms,
    sum(exposed_comm_ns) / sum(step_ns) AS exposed_comm_share,
    100.0 * sum(overlap_ns) / nullif(sum(comm_ns), 0) AS overlap_pct,
    sum(idle_ns) / sum(step_ns) AS idle_share
  FROM step_breakdown WHERE run_id = getvariable('run_id')
  GROUP BY rank
)
SELECT
  r.rank,
  r.timeline,
  coalesce(s.steps, 0) AS steps,
  s.median_step_ms,
  coalesce(s.exposed_comm_share, r.exposed_comm_share) AS exposed_comm_share,
  coalesce(s.overlap_pct, r.overlap_pct) AS overlap_pct,
  s.idle_share,
  r.collectives
FROM rank_breakdown AS r
LEFT JOIN stepped AS s USING (rank)
WHERE r.run_id = getvariable('run_id')
ORDER BY r.rank
