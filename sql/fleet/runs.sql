-- Every run of every job, in the order they started, with the figures a fleet report trends:
-- median step, exposed share, achieved bus bandwidth, the verdict, and what regressed against the
-- job's baseline. From runs, scaling, verdict and regressions. Runs without a job tag are left out
-- (they have no trend), as are runs beyond the latest `max_fleet_runs` of their job.
WITH regressed AS (
  SELECT run_id, string_agg(summary, '; ' ORDER BY metric, kind) AS regressed
  FROM regressions WHERE regressed GROUP BY run_id
)
SELECT
  r.job,
  r.run_id,
  epoch_ms(coalesce(r.started_ns, r.ingested_at_ns) // 1000000) AS started,
  r.world_size AS ranks,
  s.median_step_ns / 1e6 AS step_ms,
  v.exposed_comm_share AS exposed_share,
  v.achieved_busbw_gbps AS busbw_gbps,
  v.bottleneck,
  g.regressed IS NOT NULL AS has_regressed,
  coalesce(g.regressed, '') AS regressed
FROM runs AS r
JOIN verdict AS v USING (run_id)
LEFT JOIN scaling AS s USING (run_id)
LEFT JOIN regressed AS g USING (run_id)
WHERE r.job IS NOT NULL
QUALIFY row_number() OVER (PARTITION BY r.job ORDER BY coalesce(r.started_ns, r.ingested_at_ns) DESC) <= getvariable('max_fleet_runs')
ORDER BY r.job, started
