-- _step_spans: each rank's steps, and the span each one claims when instants look up their step.
--
-- An intermediate table (not published) read by `steps` and `_bucket_readiness`, which both need
-- the step that holds each of millions of instants (a device event's launch, a CPU operator's
-- start). A step is the span of its `ProfilerStep#<n>` annotation, numbered n; or, where the user
-- chose an annotation (`step_annotation`: `wirespeed ingest --step-annotation`, wirespeed.toml
-- [steps]), the span of each of its instances (`is_step_instance` in macros.sql), numbered 0, 1,
-- 2, ... in order of start on each rank, as HTA numbers them. For the lookup it is cut short
-- where the next step starts, so that an instant lies in at most one step: the one an ASOF join
-- would find, the latest to start at or before the instant, if it has not yet ended. Readers list
-- each step once per bucket of `bucket_ns` it touches (`span_buckets` in macros.sql) and join
-- instants to steps on (rank, bucket) with a range check: a hash join, where an ASOF join would
-- sort all the instants. Buckets as wide as the run's median step list a typical step about twice.
--
-- Grain: one row per run, rank and step.
--
-- Columns:
--   rank INTEGER  Global rank.
--   step BIGINT  Step number: the <n> of ProfilerStep#<n>, or the instance's place on its rank,
--       from 0.
--   start_ns BIGINT  Start of the step's annotation on the CPU, ns since the Unix epoch.
--   end_ns BIGINT  End of the step's annotation on the CPU.
--   lookup_end_ns BIGINT  End of the span the step claims in lookups: end_ns, or the next
--       step's start where that comes first.
--   bucket_ns BIGINT  Width of the lookup buckets, the same on every row: the run's median
--       lookup span, at least 1 ns.
WITH profiler_steps AS (
  SELECT
    rank,
    CAST(regexp_extract(name, '^ProfilerStep#(\d+)$', 1) AS BIGINT) AS step,
    min(ts_ns) AS start_ns,
    max(ts_ns + dur_ns) AS end_ns
  FROM trace_events
  -- The prefix test first: a regular expression on every event's name costs seconds on a big run.
  WHERE ph = 'X' AND starts_with(name, 'ProfilerStep#') AND regexp_matches(name, '^ProfilerStep#\d+$')
    AND cat <> 'gpu_user_annotation'
    AND is_valid_interval(ts_ns, dur_ns)
    AND getvariable('step_annotation') IS NULL
  GROUP BY ALL
),
annotation_steps AS (
  -- Of instances that start together, the longer (the outer, where they nest) comes first.
  SELECT
    rank,
    row_number() OVER (PARTITION BY rank ORDER BY ts_ns, dur_ns DESC, name) - 1 AS step,
    ts_ns AS start_ns,
    ts_ns + dur_ns AS end_ns
  FROM trace_events
  WHERE is_step_instance(ph, cat, name, ts_ns, dur_ns)
),
spans AS (
  SELECT rank, step, start_ns, end_ns,
    least(end_ns, coalesce(lead(start_ns) OVER (PARTITION BY rank ORDER BY start_ns, step), end_ns)) AS lookup_end_ns
  FROM (FROM profiler_steps UNION ALL FROM annotation_steps)
),
width AS (
  SELECT greatest(CAST(median(lookup_end_ns - start_ns) AS BIGINT), 1) AS bucket_ns
  FROM spans
  WHERE lookup_end_ns > start_ns
)
SELECT s.rank, s.step, s.start_ns, s.end_ns, s.lookup_end_ns, w.bucket_ns
FROM spans AS s, width AS w
