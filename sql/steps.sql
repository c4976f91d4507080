-- steps: each training step (profiler step) of each rank, and the window it is measured over.
--
-- Steps come from the `ProfilerStep#<n>` annotations that torch.profiler writes around each
-- `step()`. On the CPU the step is the annotation's span. The GPU runs behind the CPU, so on the
-- device timeline a step is measured over a window of its own: a device event belongs to the step
-- in which its launch (the runtime call with the same `correlation`) happened, as in HTA; the
-- window of step k starts with the first device event that step k launched and ends where step
-- k+1's window starts (the last step's window ends with the last device event it launched).
-- These windows tile the device timeline, so every nanosecond of device activity lands in exactly
-- one step. A device event without a launch in the trace counts for the step its start falls in.
-- On the CPU timeline (no device events) the window is the annotation's span.
--
-- Grain: one row per run, rank and step.
--
-- Columns:
--   run_id VARCHAR  The run.
--   rank INTEGER  Global rank.
--   step BIGINT  Step number, as the profiler counted it (the <n> of ProfilerStep#<n>).
--   start_ns BIGINT  Start of the step's annotation on the CPU, ns since the Unix epoch.
--   end_ns BIGINT  End of the step's annotation on the CPU.
--   timeline VARCHAR  'device' or 'cpu': the timeline the step's breakdown is measured on.
--   window_start_ns BIGINT  Start of the window the breakdown covers; NULL when the step
--       launched no device work on a device-timeline rank.
--   window_end_ns BIGINT  End of that window.
--   device_events BIGINT  Device events launched in the step (0 on the CPU timeline).
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
  GROUP BY ALL
),
timelines AS (
  SELECT DISTINCT rank, timeline FROM _activity
),
device_events AS (
  SELECT rank, start_ns, end_ns, coalesce(launched_ns, start_ns) AS launched_ns
  FROM _device_events
),
step_spans AS (
  -- Each step's span, cut short where the next one starts, so that an instant lies in at most one:
  -- the step an ASOF join would find (the latest to start at or before it, if not yet ended).
  SELECT rank, step, start_ns,
    least(end_ns, coalesce(lead(start_ns) OVER (PARTITION BY rank ORDER BY start_ns, step), end_ns)) AS end_ns
  FROM profiler_steps
),
time_bucket AS (
  SELECT greatest(CAST(median(end_ns - start_ns) AS BIGINT), 1) AS ns FROM step_spans WHERE end_ns > start_ns
),
step_time_buckets AS (
  SELECT s.rank, s.step, s.start_ns, s.end_ns, unnest(span_buckets(s.start_ns, s.end_ns, b.ns)) AS time_bucket
  FROM step_spans AS s, time_bucket AS b
  WHERE s.end_ns > s.start_ns
),
device_events_by_step AS (
  SELECT s.rank, s.step, min(d.start_ns) AS first_start_ns, max(d.end_ns) AS last_end_ns, count(*) AS device_events
  FROM (SELECT e.*, e.launched_ns // b.ns AS time_bucket FROM device_events AS e, time_bucket AS b) AS d
  JOIN step_time_buckets AS s
    ON s.rank = d.rank AND s.time_bucket = d.time_bucket AND d.launched_ns >= s.start_ns AND d.launched_ns < s.end_ns
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
FROM profiler_steps AS s
LEFT JOIN timelines AS t USING (rank)
LEFT JOIN device_windows AS w USING (rank, step)
ORDER BY s.rank, s.step
