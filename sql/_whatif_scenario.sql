-- _whatif_scenario: the one bucket timeline of a run that the what-if model replays.
--
-- An intermediate table (not published). When every rank and step has the same buckets (same
-- count, same sizes, as with DDP), each bucket's ready time and the backward length are averaged
-- over all rank-steps, and the communication-free step time is their median (as the replay's: a
-- trace's last step often holds the profiler's own teardown). Otherwise the rank-step whose
-- length is closest to the median stands for the run. The CLI replaces this table when it replays
-- a timeline file or re-fuses the buckets with another policy.
--
-- Grain: one row per bucket of the scenario.
--
-- Columns:
--   bucket BIGINT  Position in ready order, from 1.
--   ready_ns BIGINT  When the bucket is ready, ns after backward began (r_j).
--   bytes BIGINT  Bucket size (S_j).
--   backward_ns BIGINT  Length of backward (T_bk).
--   compute_ns BIGINT  Step time without communication (t_1).
--   ranks INTEGER  Ranks of the run (N).
--   description VARCHAR  Where the scenario comes from.
WITH shapes AS (
  SELECT rank, step, list(bytes ORDER BY bucket) AS sizes, any_value(step_ns) AS step_ns
  FROM gradient_buckets
  GROUP BY rank, step
),
uniform AS (
  SELECT count(DISTINCT sizes) = 1 AS same, count(*) AS scenarios FROM shapes
),
averaged AS (
  SELECT
    bucket,
    CAST(round(avg(ready_ns)) AS BIGINT) AS ready_ns,
    any_value(bytes) AS bytes,
    CAST(round(avg(backward_ns)) AS BIGINT) AS backward_ns,
    CAST(round(median(compute_ns)) AS BIGINT) AS compute_ns,
    max(ranks) AS ranks,
    'mean of ' || count(*) || ' rank-steps with the same buckets' AS description
  FROM gradient_buckets
  GROUP BY bucket
),
typical AS (
  SELECT rank, step
  FROM shapes
  ORDER BY abs(step_ns - (SELECT median(step_ns) FROM shapes)), step, rank
  LIMIT 1
)
SELECT * FROM averaged WHERE (SELECT same FROM uniform)
UNION ALL
SELECT g.bucket, g.ready_ns, g.bytes, g.backward_ns, g.compute_ns, g.ranks,
  'rank ' || g.rank || ', step ' || g.step || ' (the typical step; buckets differ between steps)'
FROM gradient_buckets AS g
JOIN typical AS t USING (rank, step)
WHERE NOT (SELECT same FROM uniform)
ORDER BY bucket
