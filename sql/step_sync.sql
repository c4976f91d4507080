-- step_sync: per step, who held the others up, and how much exposed communication was waiting.
--
-- A rank that reaches a collective before the last of its ranks waits for it; that wait is not the
-- network's when the last rank was busy with something else meanwhile (computing, copying, idle):
-- a faster network would not have shortened it. exposed_wait_ns is the exposed communication of
-- the step's ranks (step_timeline) spent in such waits: from a rank's start of an instance to the
-- last rank's start, while the last rank's own timeline was not in exposed communication (a rank
-- held up by its own transfers holds the others up through the network). A point-to-point send
-- never counts as waiting for its receiver: the data cannot arrive before it is sent, but it can
-- leave before the receive is posted (into socket or channel buffers), so a send that blocks is
-- blocked by the link. The pipeline's bubble is such a wait: the receiving stage waits while the
-- sending stage computes. Start times of different hosts compare as well as their clocks agree.
-- The straggler of a step is the rank that waited least in it by duration (collective_bw.wait_ns),
-- i.e. that the others waited for, the lowest of those that tie; with fewer than two ranks there
-- is none.
--
-- Grain: one row per run and step.
--
-- Columns:
--   run_id VARCHAR  The run.
--   step BIGINT  Step number.
--   ranks INTEGER  Ranks with collectives in the step.
--   collectives INTEGER  Matched collectives in the step.
--   straggler_rank INTEGER  The rank that waited least (arrived last), the lowest of those that tie; NULL
--       with one rank.
--   straggler_last_arrivals INTEGER  Collectives of the step the straggler arrived last at.
--   max_skew_ns BIGINT  The largest arrival skew of a collective in the step.
--   wait_ns BIGINT  Waiting inside collectives, summed over ranks.
--   exposed_comm_ns BIGINT  Exposed communication, summed over ranks (from step_breakdown).
--   exposed_wait_ns BIGINT  The part of it spent waiting for a rank that was busy with something else.
--   exposed_transfer_ns BIGINT  The rest: exposed communication the network held up.
--   wait_share DOUBLE  exposed_wait_ns / exposed_comm_ns; NULL when nothing was exposed.
WITH waits AS (
  SELECT b.rank, b.step, s.last_rank, b.start_ns, least(s.last_start_ns, b.start_ns + b.dur_ns) AS end_ns
  FROM collective_bw AS b
  JOIN collective_sync AS s USING (collective_key)
  WHERE b.step IS NOT NULL AND b.op IS DISTINCT FROM 'send' AND b.rank <> s.last_rank AND s.last_start_ns > b.start_ns
),
exposed_stretches AS (
  SELECT rank, step, start_ns, end_ns FROM step_timeline WHERE state = 'exposed_comm'
),
apart AS (  -- when each rank was not in exposed communication: before, between and after its stretches of it
  SELECT rank, step, coalesce(lag(end_ns) OVER (PARTITION BY rank ORDER BY start_ns), 0) AS start_ns, start_ns AS end_ns
  FROM exposed_stretches
  UNION ALL
  SELECT rank, arg_max(step, end_ns), max(end_ns), 9223372036854775807
  FROM exposed_stretches
  GROUP BY rank
),
peer_busy AS (  -- the waits while the last rank did something other than communicate
  SELECT w.rank, w.step, greatest(w.start_ns, a.start_ns) AS start_ns, least(w.end_ns, a.end_ns) AS end_ns
  FROM waits AS w
  CROSS JOIN (VALUES (-1), (0), (1)) AS near(offset_steps)  -- a stretch apart may end in the step before or after
  JOIN apart AS a
    ON a.rank = w.last_rank AND a.step = w.step + near.offset_steps
    AND a.start_ns < w.end_ns AND a.end_ns > w.start_ns
),
exposed_busy AS (
  SELECT b.rank, b.step, greatest(b.start_ns, t.start_ns) AS start_ns, least(b.end_ns, t.end_ns) AS end_ns
  FROM peer_busy AS b
  JOIN exposed_stretches AS t
    ON t.rank = b.rank AND t.step = b.step
    AND t.start_ns < b.end_ns AND t.end_ns > b.start_ns
),
wait_islands AS (  -- concurrent collectives wait together: merge overlapping pieces
  SELECT
    *,
    sum(CASE WHEN start_ns > previous_end THEN 1 ELSE 0 END)
      OVER (PARTITION BY rank, step ORDER BY start_ns ROWS UNBOUNDED PRECEDING) AS island
  FROM (
    SELECT *, max(end_ns) OVER (PARTITION BY rank, step ORDER BY start_ns ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS previous_end
    FROM exposed_busy
  )
),
exposed_waits AS (
  SELECT step, sum(ns) AS exposed_wait_ns
  FROM (SELECT step, max(end_ns) - min(start_ns) AS ns FROM wait_islands GROUP BY rank, step, island)
  GROUP BY step
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
    CASE WHEN count(*) > 1 THEN arg_min(rank, (wait_ns, rank)) END AS straggler_rank,
    CASE WHEN count(*) > 1 THEN arg_min(last_arrivals, (wait_ns, rank)) END AS straggler_last_arrivals,
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
