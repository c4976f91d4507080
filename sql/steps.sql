-- steps: each training step (profiler step) of each rank, and the window it is measured over.
--
-- Steps come from the `ProfilerStep#<n>` annotations that torch.profiler writes around each
-- `step()`. Where a trace has none (a benchmark, inference), `wirespeed ingest --step-annotation
-- NAME` or wirespeed.toml [steps] makes each instance of another annotation a step: every span on
-- the CPU whose name holds NAME, as HTA matches an annotation, numbered 0, 1, 2, ... in order of
-- start on each rank. On the CPU the step is the annotation's span. The GPU runs behind the CPU, so on the
-- device timeline a step is measured over a window of its own: a device event belongs to the step
-- in which its launch (the runtime call with the same `correlation`) happened, as in HTA; the
-- window of step k starts with the first device event that step k launched and ends where step
-- k+1's window starts (the last step's window ends with the last device event it launched).
-- These windows tile the device timeline, so every nanosecond of device activity lands in exactly
-- one step. A device event without a launch in the trace counts for the step its start falls in.
-- On the CPU timeline (no device events) the window is the annotation's span. How a launch finds
-- its step among the annotations is in sql/_step_spans.sql.
--
-- Grain: one row per run, rank and step.
--
-- Columns:
--   run_id VARCHAR  The run.
--   rank INTEGER  Global rank.
--   step BIGINT  Step number, as the profiler counted it (the <n> of ProfilerStep#<n>); with a
--       step annotation, the instance's place on its rank, from 0.
--   start_ns BIGINT  Start of the step's annotation on the CPU, ns since the Unix epoch.
--   end_ns BIGINT  End of the step's annotation on the CPU.
--   timeline VARCHAR  'device' or 'cpu': the timeline the step's breakdown is measured on.
--   window_start_ns BIGINT  Start of the window the breakdown covers; NULL when the step
--       launched no device work on a device-timeline rank.
--   window_end_ns BIGINT  End of that window.
--   device_events BIGINT  Device events launched in the step (0 on the CPU timeline).
WITH timelines AS (
  SELECT DISTINCT rank, timeline FROM _activity
),
device_events AS (
  SELECT rank, start_ns, end_ns, coalesce(launched_ns, start_ns) AS launched_ns
  FROM _device_events
),
step_time_buckets AS (
  SELECT rank, step, start_ns, lookup_end_ns, unnest(span_buckets(start_ns, lookup_end_ns, bucket_ns)) AS time_bucket
  FROM _step_spans
  WHERE lookup_end_ns > start_ns
),
device_events_by_step AS (
  SELECT s.rank, s.step, min(d.start_ns) AS first_start_ns, max(d.end_ns) AS last_end_ns, count(*) AS device_events
  FROM (
    SELECT e.*, e.launched_ns // w.bucket_ns AS time_bucket
    FROM device_events AS e, (SELECT any_value(bucket_ns) AS bucket_ns FROM _step_spans) AS w
  ) AS d
  JOIN step_time_buckets AS s
    ON s.rank = d.rank AND s.time_bucket = d.time_bucket AND d.launched_ns >= s.start_ns AND d.launched_ns < s.lookup_end_ns
  GROUP BY ALL
),
device_windows AS (
  SELECT
    rank,
    step,
    first_start_ns AS window_start_ns,
    coalesce(lead(first_start_ns) OVER (PARTITION BY rank ORDER BY first_start_ns), last_end_ns) AS window_end_ns,
    device_events
  FROM device_events_by_step
)
SELECT
  getvariable('run_id') AS run_id,
  s.rank,
  s.step,
  s.start_ns,
  s.end_ns,
  coalesce(t.timeline, 'cpu') AS timeline,
  CASE WHEN t.timeline = 'device' THEN w.window_start_ns ELSE s.start_ns END AS window_start_ns,
  CASE WHEN t.timeline = 'device' THEN w.window_end_ns ELSE s.end_ns END AS window_end_ns,
  coalesce(w.device_events, 0) AS device_events
FROM _step_spans AS s
LEFT JOIN timelines AS t USING (rank)
LEFT JOIN device_windows AS w USING (rank, step)
ORDER BY s.rank, s.step
