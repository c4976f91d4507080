-- step_timeline: what each rank's timeline was doing, moment by moment, inside each step.
--
-- The stretches of `_segments` that fall inside a step's window (see `steps`); a stretch never
-- crosses a window's edge, so each belongs to one step whole, found by the sweep itself. Summing `dur_ns` by state gives
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
SELECT
  getvariable('run_id') AS run_id,
  rank,
  step,
  state,
  start_ns,
  end_ns,
  end_ns - start_ns AS dur_ns
FROM _segments
WHERE step IS NOT NULL
