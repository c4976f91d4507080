-- _segments: each rank's timeline cut into maximal stretches of one state.
--
-- An intermediate table (not published) shared by the step and rank breakdowns. The sweep: every
-- activity interval adds +1 to its class's counter at its start and -1 at its end; the step
-- windows add cut points that change nothing. Summing the changes at each instant and taking a
-- running sum per rank gives, from each instant to the next, how many compute, communication
-- and other intervals are running (the three counters travel packed in one integer, see
-- `activity_change` in macros.sql, so that one running sum keeps all three). The state follows
-- from the counters, compute first: communication under compute is overlapped, communication
-- alone is exposed, copies and fills alone are other, nothing at all is idle. A stretch starts
-- at an instant whose state differs from the state just before it (the running sum less that
-- instant's own change) and at every step-window edge, so no stretch crosses a window, and it
-- ends where the next one starts. The stretches tile each rank's timeline from its first
-- instant to its last, so sums over them add up exactly. Deriving the previous state from the
-- change, rather than from the previous row, keeps the sweep to one pass over the sorted
-- instants: it is the costliest step of the analysis. The same pass counts the windows opened so
-- far, which names the last one opened: a stretch belongs to that window's step if it starts
-- before the window ends (the latest window starting at or before it, as an ASOF join would find,
-- at the price of an equality join on a few thousand windows).
--
-- Grain: one row per run, rank and stretch of the timeline.
--
-- Columns:
--   rank INTEGER  Global rank.
--   start_ns BIGINT  Start of the stretch, ns since the Unix epoch.
--   end_ns BIGINT  End of the stretch.
--   state VARCHAR  'compute', 'overlapped_comm' (communication while compute runs),
--       'exposed_comm' (communication with no compute), 'other' or 'idle'.
--   step BIGINT  The step whose window holds the stretch; NULL outside every window.
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
  SELECT rank, start_ns AS t, activity_change(class) AS change, 0 AS opens, false AS edge FROM _activity
  UNION ALL
  SELECT rank, end_ns AS t, -activity_change(class) AS change, 0 AS opens, false AS edge FROM _activity
  UNION ALL
  SELECT rank, window_start_ns AS t, 0 AS change, 1 AS opens, true AS edge FROM windows
  UNION ALL
  SELECT rank, window_end_ns AS t, 0 AS change, 0 AS opens, true AS edge FROM windows
),
instants AS (
  SELECT rank, t, bool_or(edge) AS edge, CAST(sum(change) AS BIGINT) AS change, CAST(sum(opens) AS BIGINT) AS opens
  FROM changes
  GROUP BY rank, t
),
running AS (
  SELECT
    rank,
    t,
    edge,
    change,
    CAST(sum(change) OVER sweep AS BIGINT) AS active,
    CAST(sum(opens) OVER sweep AS BIGINT) AS opened
  FROM instants
  WINDOW sweep AS (PARTITION BY rank ORDER BY t ROWS UNBOUNDED PRECEDING)
),
stretches AS (
  SELECT
    rank,
    t AS start_ns,
    lead(t) OVER (PARTITION BY rank ORDER BY t) AS end_ns,
    activity_state(active) AS state,
    opened
  FROM running
  WHERE edge OR activity_state(active) <> activity_state(active - change)
)
SELECT s.rank, s.start_ns, s.end_ns, s.state, w.step
FROM stretches AS s
LEFT JOIN windows AS w ON w.rank = s.rank AND w.opened = s.opened AND s.start_ns < w.window_end_ns
WHERE s.end_ns > s.start_ns
