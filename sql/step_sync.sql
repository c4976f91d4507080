-- step_sync: per step, who held the others up, and how much exposed communication was waiting.
--
-- Within a collective a rank first waits for the last rank to arrive, then transfers; so each
-- instance's first wait_ns (collective_bw) is waiting and the rest transfer. The wait intervals of
-- a rank are merged (concurrent collectives wait together) and intersected with the stretches of
-- the step in which its communication was exposed (step_timeline): exposed_wait_ns is exposed
-- communication that a faster network would not have shortened, because the rank was waiting for a
-- peer. The straggler of a step is the rank that waited least in it, i.e. that the others waited
-- for; with fewer than two ranks there is none.
--
-- Grain: one row per run and step.
--
-- Columns:
--   run_id VARCHAR  The run.
--   step BIGINT  Step number.
--   ranks INTEGER  Ranks with collectives in the step.
--   collectives INTEGER  Matched collectives in the step.
--   straggler_rank INTEGER  The rank that waited least (arrived last); NULL with one rank.
--   straggler_last_arrivals INTEGER  Collectives of the step the straggler arrived last at.
--   max_skew_ns BIGINT  The largest arrival skew of a collective in the step.
--   wait_ns BIGINT  Waiting inside collectives, summed over ranks.
--   exposed_comm_ns BIGINT  Exposed communication, summed over ranks (from step_breakdown).
--   exposed_wait_ns BIGINT  The part of it spent waiting for other ranks.
--   exposed_transfer_ns BIGINT  The rest: exposed communication that moved data.
--   wait_share DOUBLE  exposed_wait_ns / exposed_comm_ns; NULL when nothing was exposed.
WITH waits AS (
  SELECT rank, step, start_ns, start_ns + wait_ns AS end_ns
  FROM collective_bw
  WHERE step IS NOT NULL AND wait_ns > 0
),
wait_islands AS (
  SELECT
    *,
    sum(CASE WHEN start_ns > previous_end THEN 1 ELSE 0 END)
      OVER (PARTITION BY rank, step ORDER BY start_ns ROWS UNBOUNDED PRECEDING) AS island
  FROM (
    SELECT *, max(end_ns) OVER (PARTITION BY rank, step ORDER BY start_ns ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS previous_end
    FROM waits
  )
),
merged_waits AS (
  SELECT rank, step, min(start_ns) AS start_ns, max(end_ns) AS end_ns
  FROM wait_islands
  GROUP BY rank, step, island
),
exposed_waits AS (
  SELECT w.step, sum(least(w.end_ns, t.end_ns) - greatest(w.start_ns, t.start_ns)) AS exposed_wait_ns
  FROM merged_waits AS w
  JOIN step_timeline AS t
    ON t.rank = w.rank AND t.step = w.step AND t.state = 'exposed_comm'
    AND t.start_ns < w.end_ns AND t.end_ns > w.start_ns
  GROUP BY w.step
),
per_rank AS (
  SELECT step, rank, sum(wait_ns) AS wait_ns, count(*) FILTER (WHERE last_arrival) AS last_arrivals
  FROM collective_bw
  WHERE step IS NOT NULL
  GROUP BY step, rank
),
per_step AS (
  SELECT
    step,
    count(*) AS ranks,
    CASE WHEN count(*) > 1 THEN arg_min(rank, wait_ns) END AS straggler_rank,
    CASE WHEN count(*) > 1 THEN arg_min(last_arrivals, wait_ns) END AS straggler_last_arrivals,
    sum(wait_ns) AS wait_ns
  FROM per_rank
  GROUP BY step
),
synced AS (
  SELECT step, count(*) AS collectives, max(skew_ns) AS max_skew_ns
  FROM collective_sync
  WHERE step IS NOT NULL
  GROUP BY step
),
exposed AS (
  SELECT step, sum(exposed_comm_ns) AS exposed_comm_ns FROM step_breakdown GROUP BY step
)
SELECT
  getvariable('run_id') AS run_id,
  p.step,
  p.ranks,
  s.collectives,
  p.straggler_rank,
  p.straggler_last_arrivals,
  s.max_skew_ns,
  p.wait_ns,
  coalesce(e.exposed_comm_ns, 0) AS exposed_comm_ns,
  coalesce(w.exposed_wait_ns, 0) AS exposed_wait_ns,
  coalesce(e.exposed_comm_ns, 0) - coalesce(w.exposed_wait_ns, 0) AS exposed_transfer_ns,
  coalesce(w.exposed_wait_ns, 0) / nullif(e.exposed_comm_ns, 0) AS wait_share
FROM per_step AS p
LEFT JOIN synced AS s USING (step)
LEFT JOIN exposed AS e USING (step)
LEFT JOIN exposed_waits AS w USING (step)
ORDER BY p.step
