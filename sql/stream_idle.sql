-- stream_idle: how long each GPU stream sat idle between its device events, and why (HTA's idle-time breakdown).
--
-- As HTA's `get_idle_time_breakdown`: on each stream, in order of start, the gap from one device
-- event's end to the next one's start is idle time, of the next event's category:
--   'host_wait'    the next event was launched after the previous one ended: the CPU did not
--                  enqueue work fast enough;
--   'kernel_wait'  otherwise, a gap under 30 us (HTA's `consecutive_kernel_delay` as its
--                  reference outputs were made): the delay of launching back-to-back work;
--   'other'        the rest: the stream waited for something else (another stream's event, a
--                  synchronisation, work on another device).
-- A gap belongs to the step that launched the event ending it (as device events do, `steps`);
-- HTA's breakdown covers its whole trace, which is the sum over the steps it keeps (it drops the
-- last). Overlapping events on a stream give a negative gap, summed as HTA sums it. A device event
-- without a launch in the trace is never a host wait, and has no step.
--
-- Grain: one row per run, rank, step, stream and idle category that occurred.
--
-- Columns:
--   run_id VARCHAR  The run.
--   rank INTEGER  Global rank.
--   step BIGINT  The step that launched the events ending the gaps; NULL for events launched
--       outside every step or not at all.
--   stream BIGINT  GPU stream.
--   idle_category VARCHAR  'host_wait', 'kernel_wait' or 'other'.
--   idle_ns BIGINT  Idle time of the category on the stream.
--   gaps BIGINT  Gaps that make it up.
--   idle_share DOUBLE  Its share of the stream's idle time in the step (NULL where it has none).
WITH ordered AS (
  SELECT rank, stream, start_ns, launched_ns,
    lag(end_ns) OVER (PARTITION BY rank, stream ORDER BY start_ns, end_ns) AS previous_end_ns
  FROM _device_events
  WHERE stream IS NOT NULL
),
gaps AS (
  SELECT rank, stream, launched_ns, start_ns - previous_end_ns AS idle_ns,
    CASE
      WHEN launched_ns > previous_end_ns THEN 'host_wait'
      WHEN start_ns - previous_end_ns < 30000 THEN 'kernel_wait'
      ELSE 'other'
    END AS idle_category
  FROM ordered
  WHERE previous_end_ns IS NOT NULL
),
step_time_buckets AS (
  SELECT rank, step, start_ns, lookup_end_ns, unnest(span_buckets(start_ns, lookup_end_ns, bucket_ns)) AS time_bucket
  FROM _step_spans
  WHERE lookup_end_ns > start_ns
),
stepped AS (
  SELECT g.rank, s.step, g.stream, g.idle_category, g.idle_ns
  FROM (
    SELECT g.*, g.launched_ns // w.bucket_ns AS time_bucket
    FROM gaps AS g, (SELECT any_value(bucket_ns) AS bucket_ns FROM _step_spans) AS w
  ) AS g
  LEFT JOIN step_time_buckets AS s
    ON s.rank = g.rank AND s.time_bucket = g.time_bucket AND g.launched_ns >= s.start_ns AND g.launched_ns < s.lookup_end_ns
),
summed AS (
  SELECT rank, step, stream, idle_category, sum(idle_ns) AS idle_ns, count(*) AS gaps
  FROM stepped
  GROUP BY ALL
)
SELECT
  getvariable('run_id') AS run_id,
  rank, step, stream, idle_category,
  CAST(idle_ns AS BIGINT) AS idle_ns,
  gaps,
  idle_ns / nullif(sum(idle_ns) OVER (PARTITION BY rank, step, stream), 0) AS idle_share
FROM summed
ORDER BY rank, step, stream, idle_category
