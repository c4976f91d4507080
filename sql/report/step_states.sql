-- Per rank and step, milliseconds in each state, for the stacked breakdown chart. From step_breakdown.
-- Compute is split into compute alone and compute with communication hidden under it. The first
-- `max_steps` steps only: a chart of thousands of steps says nothing a table does not.
SELECT rank, step, state, ms
FROM (
  SELECT
    rank,
    step,
    (compute_ns - overlap_ns) / 1e6 AS "compute",
    overlap_ns / 1e6 AS "overlapped communication",
    exposed_comm_ns / 1e6 AS "exposed communication",
    other_ns / 1e6 AS "other (copies, fills)",
    idle_ns / 1e6 AS "idle"
  FROM step_breakdown
  WHERE run_id = getvariable('run_id')
    AND step IN (
      SELECT DISTINCT step FROM step_breakdown WHERE run_id = getvariable('run_id') ORDER BY step LIMIT getvariable('max_steps')
    )
)
UNPIVOT (ms FOR state IN ("compute", "overlapped communication", "exposed communication", "other (copies, fills)", "idle"))
ORDER BY rank, step
