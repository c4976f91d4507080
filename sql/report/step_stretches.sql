-- The busy stretches of the timeline's steps (timeline_steps, given as `timeline_steps`) on every
-- rank, in ms from the start of that rank's window. From step_timeline and steps. Idle is the
-- background, so it is left out; each step keeps its `max_stretches_per_step` longest stretches,
-- so huge traces still draw.
SELECT
  t.step,
  t.rank,
  CASE t.state
    WHEN 'compute' THEN 'compute'
    WHEN 'overlapped_comm' THEN 'overlapped communication'
    WHEN 'exposed_comm' THEN 'exposed communication'
    ELSE 'other (copies, fills)'
  END AS state,
  (t.start_ns - s.window_start_ns) / 1e6 AS start_ms,
  (t.end_ns - s.window_start_ns) / 1e6 AS end_ms,
  t.dur_ns / 1e3 AS dur_us
FROM step_timeline AS t
JOIN steps AS s USING (run_id, rank, step)
WHERE t.run_id = getvariable('run_id') AND list_contains(getvariable('timeline_steps'), t.step) AND t.state <> 'idle'
QUALIFY row_number() OVER (PARTITION BY t.step ORDER BY t.dur_ns DESC, t.rank, t.start_ns) <= getvariable('max_stretches_per_step')
ORDER BY t.step, t.rank, t.start_ns
