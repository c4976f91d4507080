-- The critical path of the timeline's steps (timeline_steps, given as `timeline_steps`), point by
-- point in path order, each on its rank's row and in ms from the start of that rank's window, as
-- the timeline draws stretches. From step_dependencies and steps. A collective's last arrival,
-- which all its ranks share, is drawn on the rank it leads to. A step without a path (a large run
-- has the paths of some steps only) has no points. A path of more than `max_stretches_per_step`
-- points keeps its two ends, those where it changes rank and, of the rest, the ones before its
-- longest dependencies: the line still runs through every rank it visits, in order.
WITH path AS (
  SELECT step, critical_path_position AS position, coalesce(from_rank, to_rank) AS rank, from_ns AS at_ns,
    from_node AS node, dependency, weight_ns
  FROM step_dependencies
  WHERE run_id = getvariable('run_id') AND critical_path_position IS NOT NULL
    AND list_contains(getvariable('timeline_steps'), step)
),
points AS (
  SELECT step, position, rank, at_ns, node, dependency, weight_ns FROM path
  UNION ALL
  -- the path's last point: where its last dependency leads
  SELECT d.step, d.critical_path_position + 1, d.to_rank, d.to_ns, d.to_node, 'end of the path', 0
  FROM step_dependencies AS d
  JOIN (SELECT step, max(position) AS position FROM path GROUP BY step) AS last
    ON last.step = d.step AND last.position = d.critical_path_position
  WHERE d.run_id = getvariable('run_id')
),
ranked AS (
  SELECT *,
    rank IS DISTINCT FROM lag(rank) OVER along OR rank IS DISTINCT FROM lead(rank) OVER along AS turns,
    row_number() OVER (PARTITION BY step ORDER BY weight_ns DESC, position) AS by_length
  FROM points
  WINDOW along AS (PARTITION BY step ORDER BY position)
)
SELECT p.step, p.position, p.rank, (p.at_ns - s.window_start_ns) / 1e6 AS at_ms, p.node,
  p.dependency AS next_dependency, p.weight_ns / 1e3 AS next_us
FROM ranked AS p
JOIN steps AS s ON s.run_id = getvariable('run_id') AND s.rank = p.rank AND s.step = p.step
WHERE p.turns OR p.by_length <= getvariable('max_stretches_per_step')
ORDER BY p.step, p.position
