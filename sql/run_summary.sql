-- run_summary: one line per run, to compare runs at a glance (a roll-up over all runs).
--
-- Rebuilt on a schedule from the per-run tables. exposed_comm_share is over all steps and ranks
-- of the run (over whole traces when the run has no steps).
--
-- Grain: one row per run.
--
-- Columns:
--   run_id VARCHAR  The run.
--   job VARCHAR  Job tag, to group runs of one job.
--   world_size INTEGER  Ranks in the job.
--   ranks_found INTEGER  Ranks with a trace.
--   backend VARCHAR  Process-group backend.
--   link_gbps DOUBLE  Line rate of the link, Gbit/s, where known.
--   steps BIGINT  Distinct profiler steps.
--   median_step_ns BIGINT  Median step length over steps and ranks.
--   exposed_comm_share DOUBLE  Exposed communication over step time (or span).
--   overlap_pct DOUBLE  Share of communication time hidden under compute, in %.
--   collectives BIGINT  Collective instances over all ranks.
--   parse_errors INTEGER  Problems that made ingestion skip data.
--   ingested_at_ns BIGINT  When the run's current version was ingested.
WITH stepped AS (
  SELECT run_id, count(DISTINCT step) AS steps, median(step_ns) AS median_step_ns,
    sum(exposed_comm_ns) / nullif(sum(step_ns), 0) AS exposed_comm_share,
    100.0 * sum(overlap_ns) / nullif(sum(comm_ns), 0) AS overlap_pct
  FROM step_breakdown
  GROUP BY run_id
),
whole AS (
  SELECT run_id, sum(exposed_comm_ns) / nullif(sum(span_ns), 0) AS exposed_comm_share,
    100.0 * sum(overlap_ns) / nullif(sum(comm_ns), 0) AS overlap_pct, sum(collectives) AS collectives
  FROM rank_breakdown
  GROUP BY run_id
)
SELECT
  r.run_id,
  r.job,
  r.world_size,
  r.ranks_found,
  r.backend,
  r.link_gbps,
  coalesce(s.steps, 0) AS steps,
  s.median_step_ns,
  coalesce(s.exposed_comm_share, w.exposed_comm_share) AS exposed_comm_share,
  coalesce(s.overlap_pct, w.overlap_pct) AS overlap_pct,
  coalesce(w.collectives, 0) AS collectives,
  r.parse_errors,
  r.ingested_at_ns
FROM runs AS r
LEFT JOIN stepped AS s USING (run_id)
LEFT JOIN whole AS w USING (run_id)
ORDER BY r.ingested_at_ns DESC
