-- collective_bw: how close each collective instance came to the line rate of its link.
--
-- Algorithm bandwidth is the message size over the time taken; bus bandwidth multiplies it by the
-- nccl-tests factor for the op and group size (allreduce 2(n-1)/n; allgather, reducescatter and
-- alltoall (n-1)/n; broadcast, reduce and point-to-point 1), which makes it comparable with the
-- link's line rate. Rates are in Gbit/s (10^9 bit/s) like the line rate: nccl-tests prints GB/s,
-- which is these numbers divided by 8. Each instance has two: over its own duration (what this rank
-- experienced, waiting included) and over the collective's transfer time (the shortest duration
-- across its ranks; see collective_sync). Utilisation uses the transfer time, so it measures the
-- network, not the stragglers.
--
-- Scope (see collectives): an intra-node collective is compared with the run's intra-node link
-- rate when one was given (else its utilisation is NULL and link_source says why); an inter-node
-- one with the NIC's line rate; one of unknown scope is assumed to cross the network. A transfer
-- measured faster than its link is not believed: its utilisation is 1 and `utilization_note` says
-- what the measure got wrong (a line rate given too low, two hosts' clocks apart, a sender's data
-- buffered before its receiver arrived).
--
-- Where the Flight Recorder timed its collectives (fr_entries.duration_ns: NCCL with
-- TORCH_NCCL_ENABLE_TIMING=1), those that no rank's trace covers join as well (`source` 'flight
-- recorder'), so bandwidth and utilisation cover the whole run, not only its profiled steps. They
-- are matched across ranks by group and sequence id; their start is when the rank issued them
-- (the recorder's times are the host's), their step is unknown, their scope comes from the hosts
-- of the group's ranks, and which rank arrived last is unknown.
--
-- Grain: one row per run, rank and collective instance.
--
-- Columns:
--   run_id VARCHAR  The run.
--   rank INTEGER  Global rank.
--   collective_key VARCHAR  The matched collective (see collective_sync).
--   step BIGINT  Step the instance started in.
--   op VARCHAR  The operation.
--   scope VARCHAR  'intra' (one host), 'inter' (several hosts) or 'unknown'.
--   group_size INTEGER  Ranks in the process group (n in the bus-bandwidth factor).
--   bytes BIGINT  Message size S.
--   start_ns BIGINT  Start on this rank, ns since the Unix epoch.
--   dur_ns BIGINT  Duration on this rank, waiting included.
--   transfer_ns BIGINT  The collective's transfer time (collective_sync.transfer_ns).
--   wait_ns BIGINT  dur_ns - transfer_ns, at least 0: how long this rank waited for the others.
--   last_arrival BOOLEAN  Whether this rank arrived last (everyone else waited for it).
--   algbw_gbps DOUBLE  8 * bytes / dur_ns, in Gbit/s.
--   busbw_gbps DOUBLE  algbw_gbps times the bus-bandwidth factor.
--   transfer_busbw_gbps DOUBLE  Bus bandwidth over transfer_ns instead of dur_ns.
--   link_gbps DOUBLE  Line rate of the link the scope implies, Gbit/s; NULL when unknown.
--   link_source VARCHAR  Where link_gbps came from, or why it is missing.
--   utilization DOUBLE  transfer_busbw_gbps / link_gbps (1.0 = line rate), at most 1: a transfer
--       cannot beat its link, and where the measure says it did, utilization_note says why.
--   utilization_note VARCHAR  Why transfer_busbw_gbps exceeds the line rate, where it does; NULL
--       otherwise.
--   source VARCHAR  'trace' (a profiled step) or 'flight recorder' (between profiled windows).
WITH links AS (
  SELECT any_value(link_gbps) AS link_gbps, any_value(link_source) AS link_source,
    any_value(intra_link_gbps) AS intra_link_gbps, any_value(intra_link_source) AS intra_link_source
  FROM runs
),
rated AS (
  SELECT
    c.*,
    s.transfer_ns,
    s.last_rank,
    busbw_factor(c.op, c.group_size) AS factor
  FROM collectives AS c
  JOIN collective_sync AS s USING (collective_key)
),
traced AS (
  SELECT rank, collective_key, step, op, scope, group_size, bytes, start_ns, dur_ns, transfer_ns, last_rank, factor,
    'trace' AS source
  FROM rated
),
timed AS (
  -- The recorder's timed collectives outside every trace of their rank, one per rank and
  -- collective (a coalesced one's parts together).
  SELECT
    e.rank,
    g.group_key,
    'fr:' || g.group_key || ':' || e.seq_id AS collective_key,
    any_value(e.op) FILTER (WHERE e.op <> 'coalesced') AS op,
    any_value(g.group_size) AS group_size,
    sum(e.bytes) FILTER (WHERE e.op <> 'coalesced') AS bytes,
    min(e.time_created_ns) AS start_ns,
    max(e.duration_ns) AS dur_ns
  FROM fr_entries AS e
  JOIN _fr_groups AS g USING (rank, recorder, pg_name)
  WHERE e.duration_ns > 0 AND NOT e.is_p2p
    AND NOT EXISTS (SELECT 1 FROM ranks AS r WHERE r.rank = e.rank AND e.time_created_ns BETWEEN r.first_ns AND r.last_ns)
  GROUP BY e.rank, g.group_key, e.seq_id
),
rank_hosts AS (
  SELECT rank, any_value(host) AS host
  FROM (SELECT rank, host FROM fr_dumps UNION ALL SELECT rank, host FROM ranks)
  WHERE host IS NOT NULL
  GROUP BY rank
),
group_scopes AS (
  -- A group on one host is intra-node, on several inter-node; with a host unknown, unknown.
  SELECT
    g.group_key,
    CASE WHEN count(h.host) < count(*) THEN 'unknown' WHEN count(DISTINCT h.host) = 1 THEN 'intra' ELSE 'inter' END AS scope
  FROM (SELECT DISTINCT group_key, unnest(members) AS rank FROM _fr_groups) AS g
  LEFT JOIN rank_hosts AS h USING (rank)
  GROUP BY g.group_key
),
recorded AS (
  SELECT
    t.rank, t.collective_key, CAST(NULL AS BIGINT) AS step, t.op, s.scope,
    t.group_size, t.bytes, t.start_ns, t.dur_ns,
    min(t.dur_ns) OVER (PARTITION BY t.collective_key) AS transfer_ns,
    CAST(NULL AS INTEGER) AS last_rank,
    busbw_factor(t.op, t.group_size) AS factor,
    'flight recorder' AS source
  FROM timed AS t
  JOIN group_scopes AS s USING (group_key)
),
instances AS (
  SELECT * FROM traced
  UNION ALL
  SELECT * FROM recorded
)
SELECT
  getvariable('run_id') AS run_id,
  r.rank,
  r.collective_key,
  r.step,
  r.op,
  r.scope,
  r.group_size,
  r.bytes,
  r.start_ns,
  r.dur_ns,
  r.transfer_ns,
  greatest(r.dur_ns - r.transfer_ns, 0) AS wait_ns,
  r.rank = r.last_rank AS last_arrival,
  8.0 * r.bytes / r.dur_ns AS algbw_gbps,
  8.0 * r.bytes / r.dur_ns * r.factor AS busbw_gbps,
  8.0 * r.bytes / r.transfer_ns * r.factor AS transfer_busbw_gbps,
  r.link_gbps,
  CASE
    WHEN r.scope = 'intra' THEN coalesce(l.intra_link_source, 'unknown: no intra-node link rate was given')
    WHEN r.scope = 'unknown' AND l.link_gbps IS NOT NULL THEN l.link_source || ' (hosts unknown: assumed inter-node)'
    ELSE coalesce(l.link_source, 'unknown: no line rate was found or given')
  END AS link_source,
  CASE WHEN r.measured_utilization > 1 THEN 1.0 ELSE r.measured_utilization END AS utilization,
  CASE WHEN r.measured_utilization > 1 THEN over_line_rate(r.measured_utilization, r.link_gbps,
    CASE WHEN r.op IN ('send', 'recv') AND r.scope <> 'intra'
      THEN 'a send and its receive on two hosts are timed by two clocks (from the later start to the receive''s end), so clock skew shortens it'
      WHEN is_rooted(r.op)
      THEN 'a rank that only sends can buffer its data before the last rank arrives, and the ranks'' clocks disagree, so the '
        || 'time from the last arrival to the last end is not the whole transfer'
      ELSE 'the ranks'' clocks disagree, so the shortest instance is not the whole transfer'
    END)
  END AS utilization_note,
  r.source
FROM (
  SELECT i.*, CASE i.scope WHEN 'intra' THEN l.intra_link_gbps ELSE l.link_gbps END AS link_gbps,
    8.0 * i.bytes / i.transfer_ns * i.factor / CASE i.scope WHEN 'intra' THEN l.intra_link_gbps ELSE l.link_gbps END AS measured_utilization
  FROM instances AS i, links AS l
) AS r, links AS l
ORDER BY r.rank, r.start_ns
