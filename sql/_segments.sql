-- _segments: each rank's timeline cut into pieces during which nothing starts or stops.
--
-- An intermediate table (not published) shared by the step and rank breakdowns. The sweep: every
-- activity interval adds +1 to its class's counter at its start and -1 at its end; the step
-- windows add cut points that change nothing. Summing the changes at each instant and taking a
-- running sum per rank gives, between two consecutive instants, how many compute, communication
-- and other intervals are running. The state of a piece follows from the counters, compute
-- first: communication under compute is overlapped, communication alone is exposed, copies and
-- fills alone are other, nothing at all is idle. The pieces tile each rank's timeline from its
-- first instant to its last, so sums over them add up exactly.
--
-- Grain: one row per run, rank and piece of the timeline.
--
-- Columns:
--   rank INTEGER  Global rank.
--   start_ns BIGINT  Start of the piece, ns since the Unix epoch.
--   end_ns BIGINT  End of the piece.
--   state VARCHAR  'compute', 'overlapped_comm' (communication while compute runs),
--       'exposed_comm' (communication with no compute), 'other' or 'idle'.
WITH changes AS (
  SELECT rank, start_ns AS t, class, 1 AS delta FROM _activity
  UNION ALL
  SELECT rank, end_ns AS t, class, -1 AS delta FROM _activity
  UNION ALL
  SELECT rank, window_start_ns AS t, NULL AS class, 0 AS delta FROM steps WHERE window_start_ns IS NOT NULL
  UNION ALL
  SELECT rank, window_end_ns AS t, NULL AS class, 0 AS delta FROM steps WHERE window_end_ns IS NOT NULL
),
instants AS (
  SELECT
    rank,
    t,
    sum(delta) FILTER (WHERE class = 'compute') AS compute_change,
    sum(delta) FILTER (WHERE class = 'comm') AS comm_change,
    sum(delta) FILTER (WHERE class = 'other') AS other_change
  FROM changes
  GROUP BY rank, t
),
running AS (
  SELECT
    rank,
    t AS start_ns,
    lead(t) OVER (PARTITION BY rank ORDER BY t) AS end_ns,
    sum(coalesce(compute_change, 0)) OVER (PARTITION BY rank ORDER BY t ROWS UNBOUNDED PRECEDING) AS computing,
    sum(coalesce(comm_change, 0)) OVER (PARTITION BY rank ORDER BY t ROWS UNBOUNDED PRECEDING) AS communicating,
    sum(coalesce(other_change, 0)) OVER (PARTITION BY rank ORDER BY t ROWS UNBOUNDED PRECEDING) AS other_running
  FROM instants
)
SELECT
  rank,
  start_ns,
  end_ns,
  CASE
    WHEN computing > 0 AND communicating > 0 THEN 'overlapped_comm'
    WHEN computing > 0 THEN 'compute'
    WHEN communicating > 0 THEN 'exposed_comm'
    WHEN other_running > 0 THEN 'other'
    ELSE 'idle'
  END AS state
FROM running
WHERE end_ns > start_ns
