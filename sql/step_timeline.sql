-- step_timeline: what each rank's timeline was doing, moment by moment, inside each step.
--
-- The stretches of `_segments` that fall inside a step's window (see `steps`); a stretch never
-- crosses a window's edge, so each belongs to one step whole. Summing `dur_ns` by state gives
-- `step_breakdown`; the report draws one step of it as the timeline chart. It says *when* communication was exposed, not only how much.
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
)
SELECT
  getvariable('run_id') AS run_id,
  s.rank,
  w.step,
  s.state,
  s.start_ns,
  s.end_ns,
  s.end_ns - s.start_ns AS dur_ns
FROM _segments AS s
ASOF JOIN windows AS w ON s.rank = w.rank AND s.start_ns >= w.window_start_ns
WHERE s.start_ns < w.window_end_ns
