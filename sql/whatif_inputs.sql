-- whatif_inputs: every figure the replay what-if uses, one row per collective instance of each rank.
--
-- The replay (docs/whatif.md, `pipelines/analysis/replay.py`) keeps each rank's timeline as measured and
-- moves only what a different link would move: each collective's duration, and the waits that
-- ended when it completed. A collective (matched across ranks, `collective_sync`) begins when its
-- last rank arrives (`begin_ns`) and ends at `collective_end_ns`. Its time is told apart into what
-- a faster link shortens in proportion (`transfer_ns`) and what it does not (`rest_ns`), per link
-- (`channel`): the ranks of one host share its network link, as `runs.link_gbps` is a NIC's,
-- unless their NCCL logs put them on NICs of their own (`collectives.nics`); within a host each
-- rank has its own. Collectives whose begin-to-end spans overlap on one link, one way (links are
-- full duplex: a send goes out, a receive comes in, any other op both: `way`), form a busy
-- period; two ranks' point-to-point transfers take turns on their one connection (`turn`), so
-- each counts from when the last of theirs that ended before it did. Each takes the part of the
-- period that its bits, 8 S f, are of the period's (the least such part on any of its links;
-- equal parts where a size is unknown; f is the bus-bandwidth factor of its op and group size).
-- An equal part each made a 2 KB bucket as long as the 1 MB buckets beside it; one period for
-- both ways gave a 1F1B pipeline's transfers half their time.
-- w, the period's bits at the line rate over its length, is the part of it the link needed. What a
-- share took beyond its part w stays (`rest_ns`), by the first rule that applies:
--   1. the CPU's, all of it, where the rate is known and the host's CPUs were saturated (at least
--      `cpu_saturated_share()` busy, or not sampled);
--   2. the host's, for a gloo collective (not a point-to-point transfer, which has its way to
--      itself) on a host whose ranks also talk among themselves (their transfers load
--      the same TCP stack and CPUs, which no NIC speeds up): what its bits took beyond the line
--      rate at the most the host's link carried for any op. An op that carried less (its periods'
--      w over the best op's, its efficiency, at least `protocol_least_efficiency()`) lost the
--      difference to its protocol, which a faster link shortens (kept whole, fsdp x tp's
--      all-gathers at 80 % of 200 Mbit/s beside all-reduces at 100 % put its step at 1 Gbit/s
--      +20 %); at least rule 3's latency;
--   3. else the latency of its op on its link: the intercept of a least-squares line of share
--      against bits over the run's collectives of that op and link (0 when all have one size), at
--      most what the period took beyond its bits where the rate is known (a noisy line once kept
--      15 ms of buckets that filled their period: +49 % at 5x the rate). NCCL keeps this rule on
--      any host: its bytes take another path within a host than between hosts.
-- That latency is all that stays at full line rate (`latency_ns`). `wire_ns` = 8 S f / link_gbps.
-- A slower link covers part of `transfer_ns` (`beyond_link_ns`): what it took beyond its bits at
-- the efficiency its op reaches on the link when the link alone holds it, its link-bound time. A
-- transfer of several rounds (a ring all-gather over six ranks: five) waits between rounds for
-- CPUs and latency, which a slower link's longer rounds cover. That efficiency, per op and link, is
-- what its collectives' shares typically carried (the median of bits at the line rate over the
-- share), or up to what its best tenth carried where another op on the link typically carried as
-- much: the link, and this op, reached it. A rooted op has none: the trace does not say which host
-- held its root, so neither its bits on a host's link. Scaled whole, FSDP2's all-gathers over three
-- hosts of two ranks, 2.3 times their bits at 1 Gbit/s and 1.1 times at 200 Mbit/s, put its step
-- there +56 %.
-- Waiting for a late rank is in neither part: the replay finds it again from when the ranks
-- arrive. A collective of unknown size is all rest (the replay cannot scale it).
--
-- What waited for a collective: where a rank's instance ends inside a wait (exposed stretches of
-- `step_timeline`, those less than `resume_gap_ns()` apart joined into one), the rank was waiting
-- for it: `waited_ns` is the part of the wait since the last earlier instance end in it (or its
-- start). A wait that went on more than `resume_gap_ns()` past every instance end in it waited for
-- the first tied instance to end after it, where that one was under way and ended within
-- `annotation_lag_ns()`: the rank resumed before its annotation closed.
-- An instance is tied to its collective when it ended with it (after the first half of the
-- begin-to-end span; a send that returned once its data was buffered is not); where a tied
-- instance ends while the rank was busy, the rank needed it later, at the latest at its next
-- wait or the end of its step: `slack_ns` is how long after.
--
-- Grain: one row per run, rank and collective instance that ended in a step.
--
-- Columns:
--   run_id VARCHAR  The run.
--   rank INTEGER  Global rank.
--   step BIGINT  The collective's step (the most common across its ranks).
--   collective_key VARCHAR  The matched collective (see collective_sync).
--   op VARCHAR  The operation.
--   pg VARCHAR  Process group.
--   dimension VARCHAR  The parallel dimension of the group (see step_comm_groups).
--   scope VARCHAR  'intra', 'inter' or 'unknown': the link the collective uses.
--   group_size INTEGER  Ranks in the group.
--   bytes BIGINT  Message size S; NULL when unknown.
--   traffic_factor DOUBLE  The bus-bandwidth factor f: what each rank sends, as a multiple of S.
--   link_gbps DOUBLE  Line rate of the collective's link in the run, Gbit/s; NULL when unknown.
--   channel VARCHAR  Whose link it is: 'host <name>' for the network (the host's ranks share its
--       link), 'host <name> nic <n>[,<m>...]' where the NCCL logs name the NICs (the ranks on
--       those NICs share them), 'rank <n>' for the link within a host or where the host is unknown.
--   way VARCHAR  Which way of the full-duplex link it holds (`link_way`): 'out' for a send, 'in'
--       for a receive, 'both' for any other op.
--   turn VARCHAR  For a point-to-point transfer, the connection whose turns it takes: its group and
--       its two ranks ('<pg> ranks <low>,<high>'); NULL for a collective, which takes its group's
--       turn on its links.
--   start_ns BIGINT  When this rank arrived (its instance's start), ns since the Unix epoch.
--   end_ns BIGINT  When its instance ended; a point-to-point one at the latest when its transfer did
--       (an `isend` ends when its rank waits for it, maybe long after its data arrived).
--   begin_ns BIGINT  When the collective's last rank arrived.
--   collective_end_ns BIGINT  When the collective ended on its last rank; for a point-to-point pair,
--       when its receive did (collective_sync.transfer_end_ns).
--   bits DOUBLE  8 S f: what each rank sends, in bits; 0 when the size is unknown.
--   wire_ns BIGINT  8 S f / link_gbps: its transfer at the run's line rate; 0 when not known.
--   transfer_ns BIGINT  The part of its time a faster link shortens in proportion.
--   beyond_link_ns BIGINT  The part of `transfer_ns` beyond its link-bound time (its bits at the
--       efficiency its op reaches on the link), which a slower link's transfer covers; 0 where the
--       rate or size is unknown, and for a rooted op.
--   rest_ns BIGINT  The part no faster link shortens: where the line rate is known and the host's
--       CPUs were saturated, what the busy period took beyond what the host's link carried at that
--       rate (the CPU's part); else the latency of its op on its link or, for gloo on a host whose
--       ranks also talk among themselves, what its bits took beyond the line rate at the most the
--       host's link carried for any op (see above).
--   latency_ns BIGINT  The part not even the full line rate removes: the latency of its op on its
--       link (the least-squares intercept), at most `rest_ns`; `rest_ns` less the transport's
--       inefficiency, which the full line rate removes (transfers = 'line rate').
--   tied BOOLEAN  Whether this rank's instance ended with the collective.
--   rooted BOOLEAN  Whether its op is rooted (`is_rooted`): a rank other than the root needs only
--       the root's data, and may end before the last rank arrives.
--   waited_ns BIGINT  How long this rank waited, exposed, for its instance to end.
--   slack_ns BIGINT  For a tied instance that ended while the rank was busy: how long after its
--       end the rank next waited for communication or ended its step; NULL otherwise.
--   step_ns BIGINT  This rank's step (step_breakdown.step_ns).
--   compute_ns BIGINT  Its step without exposed communication, t_1: step_ns - exposed_comm_ns.
WITH links AS (
  SELECT any_value(link_gbps) AS network_gbps, any_value(intra_link_gbps) AS intra_gbps FROM runs
),
dimensions AS (
  SELECT DISTINCT pg, dimension FROM step_comm_groups WHERE pg IS NOT NULL
),
instances AS (
  SELECT
    c.rank, s.step, c.collective_key, c.op, c.pg,
    coalesce(d.dimension, 'other') AS dimension,
    c.scope, c.group_size, c.bytes,
    busbw_factor(c.op, c.group_size) AS traffic_factor,
    CASE WHEN c.scope = 'intra' THEN l.intra_gbps ELSE l.network_gbps END AS link_gbps,
    CASE WHEN c.scope = 'intra' THEN 'intra' ELSE 'network' END AS link,
    c.timeline, c.start_ns, least(c.end_ns, s.transfer_end_ns) AS end_ns, s.last_start_ns AS begin_ns,
    s.transfer_end_ns AS collective_end_ns,
    coalesce(h.host, 'rank ' || c.rank) AS host,
    CASE WHEN c.scope = 'intra' OR h.host IS NULL THEN 'rank ' || c.rank
         ELSE 'host ' || h.host || coalesce(' nic ' || c.nics, '') END AS channel
  FROM collectives AS c
  JOIN collective_sync AS s USING (collective_key)
  LEFT JOIN dimensions AS d ON d.pg = c.pg
  LEFT JOIN (SELECT rank, any_value(split_part(host, '.', 1)) AS host FROM ranks GROUP BY rank) AS h ON h.rank = c.rank
  CROSS JOIN links AS l
  WHERE c.end_ns > c.start_ns AND s.step IS NOT NULL
),
wired AS (
  SELECT
    *,
    coalesce(8.0 * bytes * traffic_factor, 0) AS bits,
    coalesce(CAST(round(8 * bytes * traffic_factor / nullif(link_gbps, 0)) AS BIGINT), 0) AS wire_ns,
    2 * (end_ns - begin_ns) >= collective_end_ns - begin_ns AS tied,
    link_way(op) AS way
  FROM instances
),
turns AS (
  -- Two ranks' point-to-point transfers take turns on their one connection, both ways: gloo sends
  -- once the receiver's notice that it is ready has come the other way, behind the data going that
  -- way. So a transfer's own time starts when the last of the pair's transfers that ended before
  -- it did (a 1F1B activation sent as its gradient came back took both their times).
  SELECT collective_key, turn, greatest(begin_ns, coalesce(max(collective_end_ns) OVER (
      PARTITION BY turn ORDER BY collective_end_ns, collective_key ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
    ), begin_ns)) AS turn_ns
  FROM (SELECT collective_key, concat(any_value(pg), ' ranks ', min(rank), ',', max(rank)) AS turn,
          any_value(begin_ns) AS begin_ns, any_value(collective_end_ns) AS collective_end_ns
        FROM wired WHERE way <> 'both' GROUP BY collective_key)
),
turned AS (
  SELECT w.*, t.turn, t.turn_ns FROM wired AS w LEFT JOIN turns AS t USING (collective_key)
),
on_channel AS (
  -- Each collective once on each link it uses (ranks of one host share its network link), on each
  -- way of it that it holds, from its turn.
  SELECT DISTINCT collective_key, op, turn, timeline, channel, host, link, link_gbps,
    least(coalesce(turn_ns, begin_ns), collective_end_ns) AS begin_ns, collective_end_ns, bits,
    unnest(link_ways(way)) AS way
  FROM turned
),
busy_starts AS (
  SELECT
    *,
    CASE WHEN begin_ns < max(collective_end_ns) OVER (
      PARTITION BY channel, link, way ORDER BY begin_ns, collective_key ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
    ) THEN 0 ELSE 1 END AS opens
  FROM on_channel
),
busy AS (
  SELECT *, sum(opens) OVER (PARTITION BY channel, link, way ORDER BY begin_ns, collective_key ROWS UNBOUNDED PRECEDING) AS period
  FROM busy_starts
),
shared AS (
  -- Collectives that overlap share the link: each takes the part of the busy period its bits are
  -- of the period's (equal parts where a size is unknown).
  SELECT *,
    min(begin_ns) OVER p AS period_start_ns,
    max(collective_end_ns) OVER p AS period_end_ns,
    sum(bits) OVER p AS period_bits,
    (max(collective_end_ns) OVER p - min(begin_ns) OVER p)
      * CASE WHEN bool_and(bits > 0) OVER p THEN bits / sum(bits) OVER p ELSE 1.0 / count(*) OVER p END AS period_share
  FROM busy
  WINDOW p AS (PARTITION BY channel, link, way, period)
),
cpu_windows AS (
  -- Each host's CPUs between two samples: busy and all ticks.
  SELECT split_part(host, '.', 1) AS host, lag(t_ns) OVER w AS start_ns, t_ns AS end_ns,
    busy_ticks - lag(busy_ticks) OVER w AS busy, busy_ticks + idle_ticks - lag(busy_ticks + idle_ticks) OVER w AS ticks
  FROM cpu_samples
  WHERE cpu = -1
  WINDOW w AS (PARTITION BY host ORDER BY t_ns)
),
host_cpu AS (
  -- How busy the host's CPUs were during each busy period of a link of known rate, where sampled.
  SELECT p.channel, p.link, p.way, p.period, sum(c.busy) / nullif(sum(c.ticks), 0) AS cpu_busy
  FROM (SELECT DISTINCT channel, host, link, way, period, period_start_ns, period_end_ns FROM shared WHERE link_gbps > 0) AS p
  JOIN cpu_windows AS c ON c.host = p.host AND c.start_ns < p.period_end_ns AND c.end_ns > p.period_start_ns
  GROUP BY p.channel, p.link, p.way, p.period
),
talking_hosts AS (
  -- Hosts whose gloo ranks also talk among themselves (collectives within the host, over loopback).
  SELECT DISTINCT host FROM wired WHERE link = 'intra' AND timeline = 'cpu' AND bits > 0
),
filled AS (
  -- The period's bits at the line rate, as a share of the period; NULL where the rate is unknown.
  SELECT *, CASE WHEN link_gbps > 0 THEN period_bits / link_gbps / period_ns END AS wire_fraction
  FROM (SELECT *, greatest(period_end_ns - period_start_ns, 1) AS period_ns FROM shared)
),
op_efficiency AS (
  -- How much of its line rate a host's link carried for each op, over the periods that held it
  -- (their bits at the rate over their length), as a part of the most it carried for any op: the
  -- host reached that most, so an op that carried less lost the difference to its protocol.
  SELECT channel, link, op, op_fraction / max(op_fraction) OVER (PARTITION BY channel, link) AS efficiency
  FROM (
    SELECT channel, link, op, sum(wire_fraction * period_ns) / sum(period_ns) AS op_fraction
    FROM (SELECT DISTINCT channel, link, way, period, op, wire_fraction, period_ns FROM filled WHERE wire_fraction > 0)
    GROUP BY channel, link, op
  )
),
linked AS (
  -- The share of a period the link itself needed at its line rate, where the rest was the CPU's:
  -- its rate is known and the host's CPUs were not free (saturated, or not sampled). Where they had
  -- time to spare, what the period took beyond the link's bits is the protocol using the link
  -- badly, which a faster link speeds up too (NULL: the latency line below decides), except for a
  -- collective on a host whose gloo ranks also talk among themselves: there the host's
  -- (`host_fraction`) is what its bits took beyond the line rate at the most any op carried on the
  -- link. A point-to-point transfer keeps the latency rule: kept as the host's, the 2 % by which a
  -- GPipe pipeline's transfers each way fell short of 200 Mbit/s were a tenth of each at 1 Gbit/s.
  SELECT s.*,
    CASE WHEN s.wire_fraction > 0 AND coalesce(c.cpu_busy, 1) >= cpu_saturated_share()
      THEN least(1.0, s.wire_fraction) END AS link_fraction,
    CASE WHEN s.wire_fraction > 0 AND s.link = 'network' AND s.timeline = 'cpu' AND h.host IS NOT NULL AND s.turn IS NULL
      THEN greatest(1.0 - s.wire_fraction / greatest(e.efficiency, protocol_least_efficiency()), 0) END AS host_fraction
  FROM filled AS s
  LEFT JOIN host_cpu AS c USING (channel, link, way, period)
  LEFT JOIN talking_hosts AS h ON h.host = s.host
  LEFT JOIN op_efficiency AS e USING (channel, link, op)
),
collective_shares AS (
  SELECT collective_key, any_value(op) AS op, any_value(link) AS link, any_value(bits) AS bits,
    any_value(link_gbps) AS link_gbps,
    min(period_share) AS share_ns, min(period_share * link_fraction) AS link_share_ns,
    min(period_share * host_fraction) AS host_share_ns,
    -- what the period took beyond its bits at the line rate: no latency is longer (NULL where the
    -- rate is unknown; `greatest` would skip the NULL and give 0)
    min(period_share * CASE WHEN wire_fraction IS NOT NULL THEN greatest(1.0 - wire_fraction, 0) END) AS slack_share_ns
  FROM linked
  GROUP BY collective_key
),
latencies AS (
  SELECT op, link,
    least(greatest(coalesce(regr_intercept(share_ns, bits), 0), 0), min(share_ns)) AS latency_ns
  FROM collective_shares
  WHERE bits > 0
  GROUP BY op, link
),
link_bound AS (
  -- Per op and link, the efficiency it reaches when the link alone holds it: what its shares
  -- typically carried, or up to what its best tenth carried where another op on the link typically
  -- carried as much.
  SELECT op, link,
    least(1.0, greatest(typical, least(best, max(typical) OVER (PARTITION BY link)))) AS efficiency
  FROM (
    SELECT op, link, quantile_cont(carried, 0.5) AS typical, quantile_cont(carried, 0.9) AS best
    FROM (SELECT op, link, bits / link_gbps / share_ns AS carried FROM collective_shares
          WHERE link_gbps > 0 AND bits > 0 AND share_ns > 0 AND NOT is_rooted(op))
    GROUP BY op, link
  )
),
rested AS (
  SELECT s.*, b.efficiency AS link_bound_efficiency,
    CASE
      WHEN s.bits = 0 THEN c.share_ns
      WHEN c.link_share_ns IS NOT NULL THEN c.share_ns - c.link_share_ns
      ELSE least(greatest(least(coalesce(l.latency_ns, 0), coalesce(c.slack_share_ns, c.share_ns)), coalesce(c.host_share_ns, 0)), c.share_ns)
    END AS rest_share,
    CASE WHEN s.bits = 0 THEN c.share_ns ELSE least(coalesce(l.latency_ns, 0), coalesce(c.slack_share_ns, c.share_ns)) END AS latency_share,
    c.share_ns
  FROM turned AS s
  JOIN collective_shares AS c USING (collective_key)
  LEFT JOIN latencies AS l ON l.op = s.op AND l.link = s.link
  LEFT JOIN link_bound AS b ON b.op = s.op AND b.link = s.link
),
exposed_stretches AS (
  SELECT rank, start_ns, end_ns,
    CASE WHEN start_ns - lag(end_ns) OVER (PARTITION BY rank ORDER BY start_ns) < resume_gap_ns() THEN 0 ELSE 1 END AS opens
  FROM step_timeline
  WHERE state = 'exposed_comm'
),
exposed AS (
  -- Waits: exposed stretches less than resume_gap_ns() apart are one (a thread may resume just
  -- before the collective it waited for closes its annotation).
  SELECT rank, min(start_ns) AS stretch_start_ns, max(end_ns) AS stretch_end_ns
  FROM (SELECT *, sum(opens) OVER (PARTITION BY rank ORDER BY start_ns ROWS UNBOUNDED PRECEDING) AS wait FROM exposed_stretches)
  GROUP BY rank, wait
),
placed AS (
  SELECT r.*, x.stretch_start_ns, x.stretch_end_ns, n.stretch_start_ns AS next_stretch_ns,
    x.stretch_start_ns IS NOT NULL AND r.end_ns <= x.stretch_end_ns AS within
  FROM rested AS r
  ASOF LEFT JOIN exposed AS x ON x.rank = r.rank AND r.end_ns > x.stretch_start_ns
  ASOF LEFT JOIN exposed AS n ON n.rank = r.rank AND n.stretch_start_ns >= r.end_ns
),
tails AS (
  -- Waits that went on more than resume_gap_ns() past every instance end in them: the time since
  -- the last (or since the wait began).
  SELECT x.rank, x.stretch_end_ns, x.stretch_end_ns - coalesce(max(p.end_ns), x.stretch_start_ns) AS tail_ns
  FROM exposed AS x
  LEFT JOIN placed AS p ON p.rank = x.rank AND p.within AND p.stretch_start_ns = x.stretch_start_ns
  GROUP BY x.rank, x.stretch_start_ns, x.stretch_end_ns
  HAVING tail_ns > resume_gap_ns()
),
resumed AS (
  -- Such a tail waited for the first tied instance to end after it, where that was under way during
  -- it and ended within annotation_lag_ns(): the rank resumed before the annotation closed.
  SELECT p.rank, p.collective_key, sum(t.tail_ns) AS tail_ns
  FROM tails AS t
  ASOF JOIN (SELECT rank, collective_key, start_ns, end_ns FROM placed WHERE tied) AS p
    ON p.rank = t.rank AND p.end_ns > t.stretch_end_ns
  WHERE p.start_ns < t.stretch_end_ns AND p.end_ns < t.stretch_end_ns + annotation_lag_ns()
  GROUP BY p.rank, p.collective_key
),
waits AS (
  SELECT p.*,
    p.within OR r.tail_ns IS NOT NULL AS inside,
    CASE WHEN p.within THEN p.end_ns - greatest(p.stretch_start_ns, coalesce(lag(p.end_ns) OVER (
      PARTITION BY p.rank, p.stretch_start_ns, p.within ORDER BY p.end_ns, p.collective_key), p.stretch_start_ns)) ELSE 0 END
      + coalesce(r.tail_ns, 0) AS waited_ns
  FROM placed AS p
  LEFT JOIN resumed AS r ON r.rank = p.rank AND r.collective_key = p.collective_key
)
SELECT
  getvariable('run_id') AS run_id,
  w.rank, w.step, w.collective_key, w.op, w.pg, w.dimension, w.scope, w.group_size, w.bytes, w.traffic_factor,
  w.link_gbps, w.channel, w.way, w.turn, w.start_ns, w.end_ns, w.begin_ns, w.collective_end_ns, w.bits, w.wire_ns,
  CAST(round(w.share_ns - w.rest_share) AS BIGINT) AS transfer_ns,
  CAST(round(CASE WHEN w.wire_ns > 0 AND w.link_bound_efficiency > 0
    THEN greatest(w.share_ns - w.rest_share - w.wire_ns / w.link_bound_efficiency, 0) ELSE 0 END) AS BIGINT) AS beyond_link_ns,
  CAST(round(w.rest_share) AS BIGINT) AS rest_ns,
  CAST(round(least(w.latency_share, w.rest_share)) AS BIGINT) AS latency_ns,
  w.tied,
  is_rooted(w.op) AS rooted,
  w.waited_ns,
  CASE WHEN w.tied AND NOT w.inside THEN
    greatest(0, least(coalesce(w.next_stretch_ns, b.window_end_ns), b.window_end_ns) - w.end_ns) END AS slack_ns,
  b.step_ns,
  b.step_ns - b.exposed_comm_ns AS compute_ns
FROM waits AS w
JOIN step_breakdown AS b ON b.rank = w.rank AND b.step = w.step
ORDER BY w.rank, w.step, w.begin_ns
