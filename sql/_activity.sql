-- _activity: the intervals during which each rank's timeline was busy, and with what.
--
-- An intermediate table (not published) that the breakdowns sweep over. A rank is measured on its
-- device timeline when its trace has device events (kernels, copies, fills); each such event is
-- communication if it carries collective metadata or its name matches a communication pattern,
-- memory (class "other") if it is a copy, fill or DMA, and compute otherwise. A rank with no
-- device events (a CPU-only gloo run) is measured on its CPU timeline instead: communication is
-- the work of the collectives (`gloo:*` annotations on gloo's worker threads, plus any other
-- event whose name matches a communication pattern), compute is the time the training threads
-- spend in non-communication operators. Nested operators are fine: the sweep takes the union.
-- Events without a usable time or duration are left out (see `parse_issues`).
--
-- Grain: one row per run, rank and interval of activity.
--
-- Columns:
--   rank INTEGER  Global rank.
--   timeline VARCHAR  'device' or 'cpu': which timeline the rank is measured on.
--   class VARCHAR  'compute', 'comm' or 'other'.
--   start_ns BIGINT  Start of the interval, ns since the Unix epoch.
--   end_ns BIGINT  End of the interval, ns since the Unix epoch.
WITH usable AS (
  SELECT
    rank,
    cat,
    name,
    tid,
    ts_ns,
    ts_ns + dur_ns AS end_ns,
    is_device_event(cat) AS on_device,
    is_comm_event(collective, name) AS is_comm
  FROM trace_events
  WHERE ph = 'X' AND is_valid_interval(ts_ns, dur_ns)
),
rank_timeline AS (
  SELECT rank, CASE WHEN bool_or(on_device) THEN 'device' ELSE 'cpu' END AS timeline
  FROM usable
  GROUP BY rank
),
-- Threads that only ever run collectives (gloo's worker threads) are not training threads.
training_threads AS (
  SELECT rank, tid
  FROM usable
  WHERE NOT on_device AND cat = 'cpu_op'
  GROUP BY rank, tid
  HAVING bool_or(NOT is_comm)
)
SELECT
  u.rank,
  t.timeline,
  CASE
    WHEN u.is_comm THEN 'comm'
    WHEN t.timeline = 'device' AND is_memory_event(u.cat, u.name) THEN 'other'
    ELSE 'compute'
  END AS class,
  u.ts_ns AS start_ns,
  u.end_ns
FROM usable AS u
JOIN rank_timeline AS t USING (rank)
LEFT JOIN training_threads AS training ON training.rank = u.rank AND training.tid = u.tid
WHERE
  (t.timeline = 'device' AND u.on_device)
  OR (
    t.timeline = 'cpu'
    AND (
      (u.is_comm AND u.cat IN ('cpu_op', 'user_annotation'))
      OR (NOT u.is_comm AND u.cat = 'cpu_op' AND training.tid IS NOT NULL)
    )
  )
