-- step_timeline: what each rank's timeline was doing, moment by moment, and in which step.
--
-- The sweep, written out whole: each rank's timeline, from its first instant to its last, cut into
-- maximal stretches of one state, each with the step whose window holds it (NULL outside every
-- window: before the first step, after the last, between steps on the CPU timeline). Summing
-- `dur_ns` by state gives `step_breakdown` per step and `rank_breakdown` per rank; the report
-- draws one step as the timeline chart. It says *when* communication was exposed, not only how
-- much.
--
-- The sweep: every activity interval adds +1 to its class's counter at its start and -1 at its
-- end; the step windows add cut points that change nothing. A running sum per rank over the
-- changes in time order gives, after each change, how many compute, communication and other
-- intervals are running (the three counters travel packed in one integer, see `activity_change`
-- in macros.sql, so that one running sum keeps all three). The state follows from the counters,
-- compute first: communication under compute is overlapped, communication alone is exposed,
-- copies and fills alone are other, nothing at all is idle. A stretch starts at a change whose
-- state differs from the state just before it (the running sum less its own change) and at
-- every step-window edge, so no stretch crosses a window, and it ends where the next one starts.
-- The stretches tile each rank's timeline from its first instant to its last, so sums over them
-- add up exactly.
--
-- Changes at the same instant are not grouped first (nearly every instant is unique, and the
-- grouping cost as much as the sweep): they are ordered starts first, ends last, and intervals
-- of no length are left out, so no class can drop to zero and come back within an instant and
-- the stretches are the same maximal ones a grouped sweep finds. Several stretches may start at
-- one instant; all but the last end where they start and are dropped, and the last carries the
-- instant's final state, because the ends are found in the order of the sweep (`position`).
-- The same pass gives each change the instant of the next (`next_t`): a stretch ends there when
-- the next change starts a stretch too, as nearly every change does. The few that start none
-- come in runs of consecutive positions (position less its rank among them is the same along a
-- run), and a run carries the end of the stretch before it on to its last change's `next_t`;
-- a second sort of every change in sweep order, to find the next stretch's start, cost as much
-- as the sweep itself. The same pass counts the windows opened so far, which names the last one
-- opened: a stretch belongs to that window's step if it starts before the window ends (the
-- latest window starting at or before it, as an ASOF join would find, at the price of an
-- equality join on a few thousand windows). The sweep is the costliest step of the analysis, so its stretches go
-- straight to this table's Parquet file and every reader reads them from there.
--
-- Grain: one row per run, rank and maximal stretch of one state (a stretch never crosses a step
-- window's edge).
--
-- Columns:
--   run_id VARCHAR  The run.
--   rank INTEGER  Global rank.
--   step BIGINT  The step whose window holds the stretch; NULL outside every window.
--   state VARCHAR  'compute', 'overlapped_comm' (communication while compute runs),
--       'exposed_comm' (communication with no compute), 'other' or 'idle'.
--   start_ns BIGINT  Start of the stretch, ns since the Unix epoch.
--   end_ns BIGINT  End of the stretch.
--   dur_ns BIGINT  Its length in ns.
WITH windows AS (
  SELECT
    rank,
    step,
    window_start_ns,
    window_end_ns,
    row_number() OVER (PARTITION BY rank ORDER BY window_start_ns, step) AS opened
  FROM steps
  WHERE window_start_ns IS NOT NULL AND window_end_ns > window_start_ns
),
changes AS (
  SELECT rank, start_ns AS t, activity_change(class) AS change, 0 AS opens, false AS edge FROM _activity WHERE end_ns > start_ns
  UNION ALL
  SELECT rank, end_ns AS t, -activity_change(class) AS change, 0 AS opens, false AS edge FROM _activity WHERE end_ns > start_ns
  UNION ALL
  SELECT rank, window_start_ns AS t, 0 AS change, 1 AS opens, true AS edge FROM windows
  UNION ALL
  SELECT rank, window_end_ns AS t, 0 AS change, 0 AS opens, true AS edge FROM windows
),
running AS (
  SELECT
    rank,
    t,
    CAST(sum(opens) OVER sweep AS BIGINT) AS opened,
    row_number() OVER sweep AS position,
    lead(t) OVER sweep AS next_t,
    activity_state(CAST(sum(change) OVER sweep AS BIGINT)) AS state,
    edge OR state <> activity_state(CAST(sum(change) OVER sweep AS BIGINT) - change) AS starts
  FROM changes
  WINDOW sweep AS (PARTITION BY rank ORDER BY t, change DESC ROWS UNBOUNDED PRECEDING)
),
_carried AS (
  -- Runs of changes that start no stretch: each extends the stretch of the change just before it.
  SELECT rank, min(position) - 1 AS position, arg_max(next_t, position) AS end_ns
  FROM (
    SELECT rank, position, next_t, position - row_number() OVER (PARTITION BY rank ORDER BY position) AS run
    FROM running
    WHERE NOT starts
  )
  GROUP BY rank, run
),
stretches AS (
  SELECT
    r.rank,
    r.t AS start_ns,
    CASE WHEN c.position IS NULL THEN r.next_t ELSE c.end_ns END AS end_ns,
    r.state,
    r.opened
  FROM running AS r
  LEFT JOIN _carried AS c ON c.rank = r.rank AND c.position = r.position
  WHERE r.starts
)
SELECT
  getvariable('run_id') AS run_id,
  s.rank,
  w.step,
  s.state,
  s.start_ns,
  s.end_ns,
  s.end_ns - s.start_ns AS dur_ns
FROM stretches AS s
LEFT JOIN windows AS w ON w.rank = s.rank AND w.opened = s.opened AND s.start_ns < w.window_end_ns
WHERE s.end_ns > s.start_ns
