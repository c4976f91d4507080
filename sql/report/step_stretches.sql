-- The busy stretches of one step on every rank, in ms from the start of that rank's window, for
-- the timeline chart. From step_timeline and steps. Idle is the background, so it is left out;
-- only the `max_stretches` longest stretches are kept, so huge traces still draw.
SELECT
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
WHERE t.run_id = getvariable('run_id') AND t.step = getvariable('step') AND t.state <> 'idle'
ORDER BY t.dur_ns DESC
LIMIT getvariable('max_stretches')
