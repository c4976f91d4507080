-- Each job at a glance: its runs, its latest run and that run's verdict, how many of its runs
-- regressed, and its measured scaling. From runs, verdict, scaling and regressions.
WITH ordered AS (
  SELECT r.job, r.run_id, coalesce(r.started_ns, r.ingested_at_ns) AS at_ns, v.bottleneck, v.exposed_comm_share
  FROM runs AS r JOIN verdict AS v USING (run_id)
  WHERE r.job IS NOT NULL
)
SELECT
  job,
  count(*) AS runs,
  arg_max(run_id, at_ns) AS latest_run,
  arg_max(bottleneck, at_ns) AS latest_verdict,
  arg_max(exposed_comm_share, at_ns) AS latest_exposed_share,
  (SELECT count(DISTINCT g.run_id) FROM regressions AS g WHERE g.job = o.job AND g.regressed) AS regressed_runs,
  (SELECT min(s.world_size) || '-' || max(s.world_size) FROM scaling AS s WHERE s.job = o.job) AS rank_counts
FROM ordered AS o
GROUP BY job
ORDER BY job
