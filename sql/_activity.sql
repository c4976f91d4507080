-- _activity: the intervals during which each rank's timeline was busy, and with what.
--
-- An intermediate table (not published) that the breakdowns sweep over. A rank is measured on its
-- device timeline when its trace has device events (kernels, copies, fills); each such event is
-- communication if it carries collective metadata or its name matches a communication pattern,
-- memory (class "other") if it is a copy, fill or DMA, and compute otherwise.
--
-- A rank with no device events (a CPU-only gloo run) is measured on its CPU timeline, thread by
-- thread, by what each thread is doing at each instant. Each thread's operators and annotations
-- nest, so a sweep over their starts (+1) and ends (-1), in time order with a parent's start
-- before its child's and a child's end before its parent's, gives at each instant how many events
-- are open, how many of them are communication (collective metadata or a communication name:
-- `gloo:*`, `c10d::*`, ...) and how many are non-communication operators. Between two consecutive
-- starts or ends the thread is in one piece of its timeline, which is:
--   * communication while any communication event is open: the collective's own work on gloo's
--     worker threads, and a training thread inside a communication call, including what it calls;
--   * communication while the thread waits for a collective: the piece begins where the thread
--     returned from a call into its caller (an end), the thread stays inside its caller, and a
--     collective running on another thread of the rank completes during the piece (the worker
--     closes its annotation before the waiting thread resumes). The trace has no event for the
--     wait itself: a blocking collective returns into an autograd function's or an FSDP region's
--     own time after issuing its work, and sits there until the work completes on the worker
--     thread, while its enclosing operators stay open;
--   * compute while a non-communication operator is open;
--   * nothing otherwise (an annotation's own time outside every operator, time outside every event).
-- Events without a usable time or duration are left out (see `parse_issues`).
--
-- Grain: one row per run, rank and interval of activity.
--
-- Columns:
--   rank INTEGER  Global rank.
--   timeline ENUM('device', 'cpu')  Which timeline the rank is measured on.
--   class ENUM('compute', 'comm', 'other')  What kept it busy. Enumerations, not strings: this table
--       holds every interval of the run, and strings nearly doubled its memory.
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
  SELECT
    u.rank, u.tid, u.start_ns, u.end_ns,
    CAST(u.collective IS NOT NULL OR coalesce(n.comm_name, false) AS INTEGER) AS comm,
    CAST(u.cat = 'cpu_op' AND NOT (u.collective IS NOT NULL OR coalesce(n.comm_name, false)) AS INTEGER) AS op
  FROM cpu_usable AS u
  LEFT JOIN cpu_names AS n ON n.name = u.name
),
_edges AS (
  -- `nesting` orders edges at one instant: ends before starts, outer starts first, inner ends first.
  SELECT rank, tid, start_ns AS t, 1 AS opens, comm, op, -end_ns AS nesting FROM cpu_classified
  UNION ALL
  SELECT rank, tid, end_ns AS t, -1 AS opens, -comm, -op, -start_ns AS nesting FROM cpu_classified
),
_threads AS (
  SELECT
    rank, tid, t, opens,
    sum(opens) OVER thread AS open_events,
    sum(comm) OVER thread AS open_comm,
    sum(op) OVER thread AS open_ops,
    comm < 0 AND sum(comm) OVER thread = 0 AS completes_comm,
    lead(t) OVER thread AS next_t
  FROM _edges
  WINDOW thread AS (PARTITION BY rank, tid ORDER BY t, opens, nesting ROWS UNBOUNDED PRECEDING)
),
_completions AS (
  SELECT rank, tid, t FROM _threads WHERE completes_comm
),
_pieces AS (
  SELECT rank, tid, t AS start_ns, next_t AS end_ns, opens, open_events, open_comm, open_ops
  FROM _threads
  WHERE next_t > t AND open_events > 0
),
_waits AS (
  SELECT DISTINCT p.rank, p.tid, p.start_ns
  FROM _pieces AS p
  JOIN _completions AS c
    ON c.rank = p.rank AND c.tid <> p.tid AND c.t > p.start_ns AND c.t <= p.end_ns
  WHERE p.opens < 0 AND p.open_comm = 0
),
cpu_intervals AS (
  SELECT
    p.rank,
    CASE WHEN p.open_comm > 0 OR w.start_ns IS NOT NULL THEN 'comm' WHEN p.open_ops > 0 THEN 'compute' END AS class,
    p.start_ns,
    p.end_ns
  FROM _pieces AS p
  LEFT JOIN _waits AS w USING (rank, tid, start_ns)
)
SELECT
  rank,
  'device' AS timeline,
  CASE WHEN is_comm THEN 'comm' WHEN is_memory THEN 'other' ELSE 'compute' END AS class,
  start_ns,
  end_ns
FROM _device_events
UNION ALL
SELECT rank, 'cpu' AS timeline, class, start_ns, end_ns
FROM cpu_intervals
WHERE class IS NOT NULL
