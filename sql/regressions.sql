-- regressions: for each run, whether it is worse than its job's baseline, and in what.
--
-- The baseline of a run is the runs of its job (job tag; a run without one has no baseline) with
-- the same world size that started before it: the latest one tagged `baseline` (`wirespeed
-- collect --tag baseline=1`) when there is one, else the last `baseline_runs` of them. Four
-- measures are compared, each as a distribution of per-step (or per-collective) samples:
--   step time: each step's mean over ranks, ms;
--   exposed share: each step's exposed communication over its step time, all ranks together;
--   waiting share: each step's exposed wait for other ranks (step_sync) over its step time;
--   bus bandwidth: each collective's transfer bus bandwidth (collective_bw), per kind (op, size
--     and link), Gbit/s; worse when lower.
-- The test is one-sided Mann-Whitney U on the run's samples against the pooled baseline samples
-- (normal approximation with tie correction and continuity correction): rank-based, so a
-- warm-up step or the profiler's teardown step does not swing it, and it assumes nothing about
-- the shape of step times. A measure regressed when the test says the run is worse (p at most
-- `regression_p_max`) and its median moved by at least the least change that matters: a
-- relative `step_change_min` for step time, `busbw_change_min` for bus bandwidth, and an
-- absolute `share_change_min` for the shares. Both are needed: the test alone fires on a small
-- but steady shift of a long run, the change alone on one noisy run.
--
-- Grain: one row per run with a baseline, measure and collective kind.
--
-- Columns:
--   run_id VARCHAR  The run judged.
--   job VARCHAR  Its job.
--   metric VARCHAR  'step time', 'exposed share', 'waiting share' or 'bus bandwidth'.
--   kind VARCHAR  For bus bandwidth, the collective kind ('allreduce 4.0 MiB (network)'); else ''.
--   baseline_runs BIGINT  Runs in the baseline.
--   baseline_run_ids VARCHAR[]  Which, latest first.
--   samples BIGINT  The run's samples (steps, or collectives of the kind).
--   baseline_samples BIGINT  The baseline's, pooled.
--   median DOUBLE  The run's median sample (ms, a share, or Gbit/s).
--   baseline_median DOUBLE  The baseline's median sample.
--   change DOUBLE  median / baseline_median - 1 for step time and bus bandwidth; median -
--       baseline_median for the shares.
--   p_value DOUBLE  One-sided Mann-Whitney p that the run's samples are no worse than the baseline's.
--   regressed BOOLEAN  p_value <= regression_p_max and the change is at least the least that matters, for the worse.
--   summary VARCHAR  The finding in words, with its numbers.
WITH run_times AS (
  SELECT run_id, job, world_size, coalesce(started_ns, ingested_at_ns) AS at_ns,
    coalesce(json_extract_string(tags, '$.baseline') IS NOT NULL, false) AS pinned
  FROM runs
  WHERE job IS NOT NULL
),
earlier AS (
  SELECT r.run_id, b.run_id AS baseline_run_id, b.at_ns, b.pinned,
    max(b.at_ns) FILTER (WHERE b.pinned) OVER (PARTITION BY r.run_id) AS pinned_at_ns,
    row_number() OVER (PARTITION BY r.run_id ORDER BY b.at_ns DESC, b.run_id) AS recency
  FROM run_times AS r
  JOIN run_times AS b ON b.job = r.job AND b.world_size IS NOT DISTINCT FROM r.world_size AND b.at_ns < r.at_ns
),
baselines AS (
  SELECT run_id, baseline_run_id, recency
  FROM earlier
  WHERE CASE WHEN pinned_at_ns IS NULL THEN recency <= getvariable('baseline_runs') ELSE pinned AND at_ns = pinned_at_ns END
),
step_totals AS (
  SELECT run_id, step, avg(step_ns) / 1e6 AS step_ms, sum(exposed_comm_ns) / sum(step_ns) AS exposed_share, sum(step_ns) AS step_ns
  FROM step_breakdown
  GROUP BY run_id, step
),
samples AS (
  SELECT run_id, 'step time' AS metric, '' AS kind, step_ms AS value FROM step_totals
  UNION ALL
  SELECT run_id, 'exposed share', '', exposed_share FROM step_totals
  UNION ALL
  SELECT t.run_id, 'waiting share', '', coalesce(s.exposed_wait_ns, 0) / t.step_ns
  FROM step_totals AS t LEFT JOIN step_sync AS s USING (run_id, step)
  UNION ALL
  SELECT run_id, 'bus bandwidth',
    any_value(op) || ' ' || format_bytes(any_value(bytes))
      || CASE any_value(scope) WHEN 'inter' THEN ' (network)' WHEN 'intra' THEN ' (within a host)' ELSE '' END,
    any_value(transfer_busbw_gbps)
  FROM collective_bw
  WHERE transfer_busbw_gbps IS NOT NULL
  GROUP BY run_id, collective_key
),
pooled AS (
  -- Signed so that larger is worse for every measure.
  SELECT s.run_id AS judged, true AS own, s.metric, s.kind, s.value,
    CASE s.metric WHEN 'bus bandwidth' THEN -s.value ELSE s.value END AS worse
  FROM samples AS s WHERE s.run_id IN (SELECT run_id FROM baselines)
  UNION ALL
  SELECT b.run_id, false, s.metric, s.kind, s.value, CASE s.metric WHEN 'bus bandwidth' THEN -s.value ELSE s.value END
  FROM baselines AS b JOIN samples AS s ON s.run_id = b.baseline_run_id
),
ranked AS (
  SELECT *,
    rank() OVER (PARTITION BY judged, metric, kind ORDER BY worse)
      + (count(*) OVER (PARTITION BY judged, metric, kind, worse) - 1) / 2.0 AS mean_rank
  FROM pooled
),
ties AS (
  SELECT judged, metric, kind, sum(t * t * t - t) AS correction
  FROM (SELECT judged, metric, kind, count(*) AS t FROM pooled GROUP BY judged, metric, kind, worse)
  GROUP BY ALL
),
tested AS (
  SELECT judged AS run_id, metric, kind,
    count(*) FILTER (WHERE own) AS n1,
    count(*) FILTER (WHERE NOT own) AS n2,
    sum(mean_rank) FILTER (WHERE own) - n1 * (n1 + 1) / 2.0 AS u,
    median(value) FILTER (WHERE own) AS median,
    median(value) FILTER (WHERE NOT own) AS baseline_median
  FROM ranked
  GROUP BY ALL
  HAVING n1 > 0 AND n2 > 0
),
judged AS (
  SELECT t.*,
    normal_sf(
      (t.u - t.n1 * t.n2 / 2.0 - 0.5)
        / nullif(sqrt(t.n1 * t.n2 / 12.0 * ((t.n1 + t.n2 + 1) - x.correction / ((t.n1 + t.n2) * (t.n1 + t.n2 - 1.0)))), 0)
    ) AS p_value,
    CASE WHEN t.metric IN ('step time', 'bus bandwidth') THEN t.median / nullif(t.baseline_median, 0) - 1
      ELSE t.median - t.baseline_median END AS change,
    CASE t.metric
      WHEN 'step time' THEN getvariable('step_change_min')
      WHEN 'bus bandwidth' THEN getvariable('busbw_change_min')
      ELSE getvariable('share_change_min')
    END AS change_min
  FROM tested AS t
  JOIN ties AS x ON x.judged = t.run_id AND x.metric = t.metric AND x.kind = t.kind
)
SELECT
  j.run_id,
  r.job,
  j.metric,
  j.kind,
  (SELECT count(*) FROM baselines AS b WHERE b.run_id = j.run_id) AS baseline_runs,
  (SELECT list(baseline_run_id ORDER BY recency) FROM baselines AS b WHERE b.run_id = j.run_id) AS baseline_run_ids,
  j.n1 AS samples,
  j.n2 AS baseline_samples,
  j.median,
  j.baseline_median,
  j.change,
  coalesce(j.p_value, 1.0) AS p_value,
  coalesce(j.p_value, 1.0) <= getvariable('regression_p_max')
    AND CASE j.metric WHEN 'bus bandwidth' THEN -j.change ELSE j.change END >= j.change_min AS regressed,
  j.metric || CASE WHEN j.kind <> '' THEN ' of ' || j.kind ELSE '' END || ' '
    || CASE WHEN j.metric IN ('step time', 'bus bandwidth') THEN printf('%+.1f%%', 100 * j.change)
      ELSE printf('%+.1f points', 100 * j.change) END
    || printf(' (%s against %s over %d baseline run%s, p = %.3g)',
      CASE j.metric WHEN 'step time' THEN printf('%.1f ms', j.median) WHEN 'bus bandwidth' THEN printf('%.3g Gbit/s', j.median)
        ELSE printf('%.1f%%', 100 * j.median) END,
      CASE j.metric WHEN 'step time' THEN printf('%.1f ms', j.baseline_median) WHEN 'bus bandwidth' THEN printf('%.3g Gbit/s', j.baseline_median)
        ELSE printf('%.1f%%', 100 * j.baseline_median) END,
      (SELECT count(*) FROM baselines AS b WHERE b.run_id = j.run_id),
      CASE WHEN (SELECT count(*) FROM baselines AS b WHERE b.run_id = j.run_id) = 1 THEN '' ELSE 's' END,
      coalesce(j.p_value, 1.0)) AS summary
FROM judged AS j
JOIN runs AS r USING (run_id)
ORDER BY j.run_id, j.metric, j.kind
