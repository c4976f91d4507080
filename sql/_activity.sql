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
WITH device_ranks AS (
  SELECT DISTINCT rank FROM _device_events
),
cpu_usable AS (
  SELECT rank, cat, name, tid, collective, ts_ns AS start_ns, ts_ns + dur_ns AS end_ns
  FROM trace_events
  WHERE ph = 'X' AND cat IN ('cpu_op', 'user_annotation') AND is_valid_interval(ts_ns, dur_ns)
    AND rank NOT IN (SELECT rank FROM device_ranks)
),
cpu_names AS (
  SELECT name, is_comm_name(name) AS comm_name
  FROM (SELECT DISTINCT name FROM cpu_usable)
),
cpu_classified AS (
  SELECT u.*, u.collective IS NOT NULL OR coalesce(n.comm_name, false) AS is_comm
  FROM cpu_usable AS u
  LEFT JOIN cpu_names AS n ON n.name = u.name
),
training_threads AS (
  SELECT rank, tid
  FROM cpu_classified
  WHERE cat = 'cpu_op'
  GROUP BY rank, tid
  HAVING bool_or(NOT is_comm)
)
SELECT
  rank,
  'device' AS timeline,
  CASE WHEN is_comm THEN 'comm' WHEN is_memory THEN 'other' ELSE 'compute' END AS class,
  start_ns,
  end_ns
FROM _device_events
UNION ALL
SELECT
  u.rank,
  'cpu' AS timeline,
  CASE WHEN u.is_comm THEN 'comm' ELSE 'compute' END AS class,
  u.start_ns,
  u.end_ns
FROM cpu_classified AS u
LEFT JOIN training_threads AS training ON training.rank = u.rank AND training.tid = u.tid
WHERE u.is_comm OR (u.cat = 'cpu_op' AND training.tid IS NOT NULL)
