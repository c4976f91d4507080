-- scaling: each run's measured scaling factor against the smallest run of its job, and its compute inflation.
--
-- Runs are grouped by their job tag (a run without one is a job of its own). The baseline of a job
-- is its run with the fewest ranks (the latest, if several): a single device ('device'), a single
-- host ('node'), or, failing both, just the smallest run ('smallest run'; then SF compares against
-- it, not against perfect scaling). With the per-device batch fixed (weak scaling), a run's
-- measured SF = baseline step time / its step time (median steps), for runs with more ranks than
-- the baseline; a single device's SF is 1. Any other run has nothing to scale against: two runs
-- of one size at two line rates would give an SF above 1 (the faster link's run against the
-- slower's), so its SF is NULL and the verdict estimates one. Compute inflation compares the
-- median compute per step with the baseline's: the paper found compute grows by up to 15% with
-- the number of workers; more than `compute_inflation_max` means part of the scaling loss is
-- compute, not the network.
--
-- Grain: one row per run.
--
-- Columns:
--   run_id VARCHAR  The run.
--   job VARCHAR  Its job (the run id when it has no job tag).
--   world_size INTEGER  Its ranks.
--   hosts INTEGER  Its hosts, where known.
--   median_step_ns BIGINT  Its median step over ranks and steps.
--   median_compute_ns BIGINT  Its median compute per step (step_breakdown.compute_ns).
--   job_runs BIGINT  Runs of the job in the warehouse.
--   baseline_run_id VARCHAR  The job's baseline run.
--   baseline_kind VARCHAR  'device', 'node' or 'smallest run'.
--   baseline_world_size INTEGER  The baseline's ranks.
--   measured_sf DOUBLE  Baseline step / this run's step, for a run with more ranks than the
--       baseline; 1 for a single device; NULL otherwise, and when the job has a single run.
--   compute_inflation DOUBLE  This run's compute per step over the baseline's, minus 1, for a run
--       with more ranks than the baseline; 0 for the baseline of a job with other runs; NULL otherwise.
--   compute_inflated BOOLEAN  Whether compute_inflation exceeds compute_inflation_max.
WITH per_run AS (
  SELECT
    r.run_id,
    coalesce(r.job, r.run_id) AS job,
    r.world_size,
    r.hosts,
    r.ingested_at_ns,
    CAST(median(b.step_ns) AS BIGINT) AS median_step_ns,
    CAST(median(b.compute_ns) AS BIGINT) AS median_compute_ns
  FROM runs AS r
  LEFT JOIN step_breakdown AS b USING (run_id)
  GROUP BY r.run_id, r.job, r.world_size, r.hosts, r.ingested_at_ns
),
ranked AS (
  SELECT
    *,
    count(*) OVER (PARTITION BY job) AS job_runs,
    row_number() OVER (PARTITION BY job ORDER BY world_size, ingested_at_ns DESC) AS size_rank
  FROM per_run
),
baselines AS (
  SELECT job, run_id AS baseline_run_id, world_size AS baseline_world_size, hosts AS baseline_hosts,
    median_step_ns AS baseline_step_ns, median_compute_ns AS baseline_compute_ns
  FROM ranked
  WHERE size_rank = 1
)
SELECT
  r.run_id,
  r.job,
  r.world_size,
  r.hosts,
  r.median_step_ns,
  r.median_compute_ns,
  r.job_runs,
  b.baseline_run_id,
  CASE WHEN b.baseline_world_size = 1 THEN 'device' WHEN b.baseline_hosts = 1 THEN 'node' ELSE 'smallest run' END AS baseline_kind,
  b.baseline_world_size,
  CASE
    WHEN r.job_runs < 2 THEN NULL
    WHEN r.world_size = 1 THEN 1.0
    WHEN r.world_size > b.baseline_world_size THEN CAST(b.baseline_step_ns AS DOUBLE) / r.median_step_ns
  END AS measured_sf,
  inflation AS compute_inflation,
  inflation > getvariable('compute_inflation_max') AS compute_inflated
FROM ranked AS r
JOIN baselines AS b USING (job),
LATERAL (SELECT CASE
  WHEN r.job_runs < 2 THEN NULL
  WHEN r.run_id = b.baseline_run_id THEN 0.0
  WHEN r.world_size > b.baseline_world_size THEN CAST(r.median_compute_ns AS DOUBLE) / b.baseline_compute_ns - 1
END AS inflation)
ORDER BY r.job, r.world_size, r.run_id
