-- collective_sync: each collective matched across the ranks that took part, split into transfer and wait.
--
-- A collective's instances on different ranks share a `collective_key` (see `collectives` for how
-- they are matched). A blocking collective ends when its last rank arrives, so the shortest
-- duration across ranks is the time the transfer
-- itself took; every other rank waited for the rest (TraceLens and the old TensorBoard plugin use
-- the same split). A rank that only sends is the exception: it can return as soon as its data is
-- buffered, before the data has crossed the link. So a point-to-point pair's transfer is the
-- receive's time from the later of the two starts to its end (the data cannot arrive before it
-- is sent), and a rooted collective's (broadcast and scatter, whose root only sends; reduce and
-- gather, whose other ranks only send) runs from the last rank's arrival to the last end: gloo's
-- broadcast root returns a 4 MB send in a third of its time on the wire. Start times of
-- different hosts compare only as well as their clocks agree.
--
-- Grain: one row per run and matched collective.
--
-- Columns:
--   run_id VARCHAR  The run.
--   collective_key VARCHAR  What the instances were matched on (see match_method).
--   match_method VARCHAR  'comms_id', 'pg_seq' (group and trace sequence number) or
--       'pg_step_order' (group, step and position in the step).
--   op VARCHAR  The operation (the most common one, if ranks disagree; see op_mismatch).
--   op_mismatch BOOLEAN  Whether the matched ranks disagree on the op (a send matched with a
--       receive agrees): the match is suspect.
--   pg VARCHAR  Process group.
--   step BIGINT  Step the collective started in (the most common across its ranks).
--   ranks INTEGER  Ranks whose traces have an instance of it.
--   group_size INTEGER  Ranks in its process group.
--   bytes BIGINT  Message size S (nccl-tests convention).
--   first_start_ns BIGINT  Earliest start across ranks, ns since the Unix epoch.
--   last_start_ns BIGINT  Latest start across ranks: when the last rank arrived.
--   end_ns BIGINT  Latest end across ranks.
--   transfer_end_ns BIGINT  When the transfer ended: end_ns, or for a point-to-point pair its
--       receive's end (from the later start on), the data being there. A send's instance can end
--       much later: an `isend` ends when its rank waits for it.
--   skew_ns BIGINT  last_start_ns - first_start_ns: how far apart the ranks arrived.
--   last_rank INTEGER  The rank that arrived last (started latest; the lowest of those that
--       started at once).
--   transfer_ns BIGINT  Shortest duration across ranks: the transfer, without waiting; for a
--       point-to-point pair, the receive's end less the later start; for a rooted collective,
--       end_ns less last_start_ns.
--   max_wait_ns BIGINT  Longest duration minus transfer_ns: the most any rank waited.
--   total_wait_ns BIGINT  Sum over ranks of duration minus transfer_ns (none below 0).
WITH matched AS (
  SELECT
    collective_key,
    any_value(match_method) AS match_method,
    mode(op) AS op,
    bool_and(op IN ('send', 'recv')) AND count(DISTINCT op) = 2 AS point_to_point,
    count(DISTINCT op) AS ops,
    any_value(pg) AS pg,
    mode(step) AS step,
    count(DISTINCT rank) AS ranks,
    max(group_size) AS group_size,
    max(bytes) AS bytes,
    min(start_ns) AS first_start_ns,
    max(start_ns) AS last_start_ns,
    max(end_ns) AS end_ns,
    arg_max(rank, (start_ns, -rank)) AS last_rank,
    max(end_ns) FILTER (WHERE op = 'recv') AS received_ns,
    min(dur_ns) AS shortest_ns,
    list(dur_ns) AS durations
  FROM collectives
  GROUP BY collective_key
),
timed AS (
  SELECT
    *,
    CASE
      WHEN point_to_point THEN greatest(received_ns - last_start_ns, 0)
      WHEN is_rooted(op) THEN greatest(end_ns - last_start_ns, 0)
      ELSE shortest_ns
    END AS transfer_ns
  FROM matched
)
SELECT
  getvariable('run_id') AS run_id,
  collective_key,
  match_method,
  op,
  ops > 1 AND NOT point_to_point AS op_mismatch,
  pg,
  step,
  ranks,
  group_size,
  bytes,
  first_start_ns,
  last_start_ns,
  end_ns,
  CASE WHEN point_to_point THEN last_start_ns + transfer_ns ELSE end_ns END AS transfer_end_ns,
  last_start_ns - first_start_ns AS skew_ns,
  last_rank,
  transfer_ns,
  greatest(list_max(durations) - transfer_ns, 0) AS max_wait_ns,
  list_sum(list_transform(durations, lambda d: greatest(d - transfer_ns, 0))) AS total_wait_ns
FROM timed
ORDER BY first_start_ns
