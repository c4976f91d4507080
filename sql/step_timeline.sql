-- step_timeline: what each rank's timeline was doing, moment by moment, inside each step.
--
-- The pieces of `_segments` that fall inside a step's window (see `steps`), with neighbouring
-- pieces of the same state merged (gaps and islands: a new island starts wherever the state
-- changes). Summing `dur_ns` by state gives `step_breakdown`; the report draws one step of it as
-- the timeline chart. It says *when* communication was exposed, not only how much.
--
-- Grain: one row per run, rank, step and maximal stretch of one state.
--
-- Columns:
--   run_id VARCHAR  The run.
--   rank INTEGER  Global rank.
--   step BIGINT  Step number.
--   state VARCHAR  'compute', 'overlapped_comm', 'exposed_comm', 'other' or 'idle'.
--   start_ns BIGINT  Start of the stretch, ns since the Unix epoch.
--   end_ns BIGINT  End of the stretch.
--   dur_ns BIGINT  Its length in ns.
WITH windows AS (
  SELECT rank, step, window_start_ns, window_end_ns
  FROM steps
  WHERE window_start_ns IS NOT NULL AND window_end_ns > window_start_ns
),
in_window AS (
  SELECT w.rank, w.step, s.state, s.start_ns, s.end_ns
  FROM _segments AS s
  ASOF JOIN windows AS w ON s.rank = w.rank AND s.start_ns >= w.window_start_ns
  WHERE s.start_ns < w.window_end_ns
),
islands AS (
  SELECT
    *,
    sum(CASE WHEN state = previous_state THEN 0 ELSE 1 END)
      OVER (PARTITION BY rank, step ORDER BY start_ns ROWS UNBOUNDED PRECEDING) AS island
  FROM (
    SELECT *, lag(state) OVER (PARTITION BY rank, step ORDER BY start_ns) AS previous_state
    FROM in_window
  )
)
SELECT
  getvariable('run_id') AS run_id,
  rank,
  step,
  state,
  min(start_ns) AS start_ns,
  max(end_ns) AS end_ns,
  max(end_ns) - min(start_ns) AS dur_ns
FROM islands
GROUP BY rank, step, island, state
ORDER BY rank, step, start_ns
