-- verdict: per run, is the network the bottleneck, by how much, and what would fix it.
--
-- Three parts. Now: the share of step time that is exposed communication, the bus bandwidth the
-- collectives achieved and its utilisation of the line rate, and how much of the exposed time
-- was waiting for stragglers. The line rate is that of the link the collectives use: the NIC's
-- when any of them crosses hosts (or may), the intra-node rate when all stay within one host.
-- Over the network the bandwidth is each host's while its collectives moved data
-- (network_summary.transfer_gbps): transfers at the same time on one host share its NIC, so two
-- ranks that each get half of it use all of it. Within a host, and where hosts are unknown, it is
-- the collectives' own, bytes-weighted. At full line rate: the what-if SF at the run's own rank
-- count and line rate, uncompressed. Scaling: the measured SF against the job's baseline when there is one
-- (scaling), else an estimate that treats the step minus its exposed communication as the
-- communication-free step (it ignores compute inflation): the median of that over the run's
-- rank-steps, over the median step, as the what-if measures SF, so that the two compare (a mean
-- would count a last step that holds the profiler's teardown). The class, first
-- match wins (thresholds in wirespeed.toml [verdict]):
--   no communication found: nothing to judge;
--   not communication-bound: exposed share below exposed_share_min;
--   straggler-bound: at least wait_share_min of the exposed time is waiting for other ranks;
--   communication-bound (line rate unknown): the what-if needs a line rate;
--   communication-bound (no what-if): no collectives were found to replay;
--   bandwidth-bound: even at full line rate SF would stay below full_rate_sf_min;
--   transport-bound: full line rate would hide the communication, but the collectives reach less
--     than utilization_max of it (the paper's finding);
--   mixed: full line rate would hide it and the link is already well used: the exposure comes
--     from elsewhere (buckets ready late, small messages, latency).
-- Whatever the class, the explanation names the parallel dimension whose communication the steps
-- waited for most (step_comm_groups) and the link it crossed.
--
-- Grain: one row per run.
--
-- Columns:
--   run_id VARCHAR  The run.
--   bottleneck VARCHAR  The class (above).
--   explanation VARCHAR  What the class means for this run, in plain words, with its numbers.
--   exposed_comm_share DOUBLE  Exposed communication over step time (over whole traces without steps).
--   wait_share DOUBLE  Share of the exposed communication spent waiting for other ranks.
--   achieved_busbw_gbps DOUBLE  Bus bandwidth, Gbit/s: over the network, what the hosts' NICs carried
--       while their collectives moved data, weighted by that time; else the collectives' own,
--       bytes-weighted. At most the line rate (network_summary.utilization_note and
--       collective_bw.utilization_note say why a host or a transfer measured faster).
--   link_gbps DOUBLE  Line rate it is compared with.
--   utilization DOUBLE  achieved_busbw_gbps / link_gbps.
--   full_rate_sf DOUBLE  What-if SF at the run's rank count and line rate, uncompressed.
--   full_rate_exposed_ns BIGINT  What-if exposed communication per step at full line rate.
--   measured_sf DOUBLE  SF measured against the job's baseline (scaling), where there is one.
--   baseline_kind VARCHAR  What the baseline is: 'device', 'node' or 'smallest run'.
--   estimated_sf DOUBLE  SF now, estimated: median over rank-steps of the step without its exposed
--       communication, over the median step (1 - exposed_comm_share for a run without steps).
--   min_compression_95 DOUBLE  Least compression for SF 0.95 at the run's line rate.
--   min_bandwidth_95_gbps DOUBLE  Least uncompressed line rate for SF 0.95.
--   dominant_dimension VARCHAR  The parallel dimension (dp, fsdp, tp, pp, ep, cp, other) with the
--       most exposed communication over the run; NULL when nothing was exposed.
--   dominant_dimension_share DOUBLE  Its share of the run's exposed communication.
--   dominant_scope VARCHAR  The link most of that dimension's exposed communication used:
--       'intra' (within a host), 'inter' (the network) or 'unknown'.
WITH stepped AS (
  SELECT run_id, sum(exposed_comm_ns) / nullif(sum(step_ns), 0) AS exposed_comm_share,
    median(step_ns - exposed_comm_ns) / nullif(median(step_ns), 0) AS median_sf
  FROM step_breakdown
  GROUP BY run_id
),
exposure AS (
  SELECT r.run_id,
    coalesce(
      s.exposed_comm_share,
      (SELECT sum(exposed_comm_ns) / nullif(sum(span_ns), 0) FROM rank_breakdown AS b WHERE b.run_id = r.run_id)
    ) AS exposed_comm_share,
    s.median_sf,
    (SELECT count(*) FROM collectives AS c WHERE c.run_id = r.run_id) AS collectives,
    (SELECT count(*) FROM collectives AS c WHERE c.run_id = r.run_id AND c.bytes IS NULL) AS unsized,
    (SELECT mode(size_unknown_reason) FROM collectives AS c WHERE c.run_id = r.run_id) AS unsized_reason,
    r.trace_files,
    r.link_gbps AS run_link_gbps
  FROM runs AS r
  LEFT JOIN stepped AS s ON s.run_id = r.run_id
),
transfers AS (
  SELECT run_id, collective_key, any_value(scope) AS scope, any_value(transfer_ns) AS transfer_ns,
    any_value(8.0 * bytes * busbw_factor(op, group_size)) AS bus_bits, any_value(link_gbps) AS link_gbps
  FROM collective_bw
  WHERE bytes > 0 AND busbw_factor(op, group_size) > 0
  GROUP BY run_id, collective_key
),
host_rates AS (
  SELECT run_id, sum(transfer_gbps * transfer_ns) / sum(transfer_ns) AS gbps,
    sum(transfer_utilization * transfer_ns) / sum(transfer_ns) AS utilization
  FROM network_summary
  WHERE source = 'collectives' AND interface <> 'intra-host' AND transfer_ns > 0
  GROUP BY run_id
),
own_rates AS (
  -- The network's collectives when any cross hosts (or may), else the host-internal ones.
  SELECT run_id, sum(bus_bits) / sum(transfer_ns) AS gbps, any_value(link_gbps) AS link_gbps
  FROM transfers AS t
  WHERE scope <> 'intra' OR NOT EXISTS (SELECT 1 FROM transfers AS o WHERE o.run_id = t.run_id AND o.scope <> 'intra')
  GROUP BY run_id
),
achieved AS (
  SELECT o.run_id, o.link_gbps,
    CASE WHEN h.utilization IS NOT NULL AND o.link_gbps IS NOT NULL THEN least(h.utilization, 1) * o.link_gbps
      ELSE least(coalesce(h.gbps, o.gbps), o.link_gbps) END AS achieved_busbw_gbps
  FROM own_rates AS o
  LEFT JOIN host_rates AS h USING (run_id)
),
waiting AS (
  SELECT run_id, sum(exposed_wait_ns) / nullif(sum(exposed_comm_ns), 0) AS wait_share FROM step_sync GROUP BY run_id
),
models AS (
  -- The replay where it has rows, else the paper's model.
  SELECT run_id, max(model) AS model FROM whatif GROUP BY run_id
),
full_rate AS (
  SELECT w.run_id, any_value(w.model) AS model, any_value(w.bandwidth_gbps) AS full_rate_gbps,
    any_value(w.scaling_factor) AS full_rate_sf, any_value(w.exposed_ns) AS full_rate_exposed_ns
  FROM whatif AS w
  JOIN models AS m ON m.run_id = w.run_id AND m.model = w.model
  WHERE w.run_link AND w.compression = 1 AND w.fusion = 'observed' AND w.transfers = 'line rate'
    AND w.ranks = (SELECT min(ranks) FROM whatif AS o WHERE o.run_id = w.run_id AND o.model = w.model)
  GROUP BY w.run_id
),
dimension_exposure AS (
  SELECT run_id, dimension, scope, sum(exposed_comm_ns) AS exposed_ns
  FROM step_comm_groups
  GROUP BY ALL
),
dominant AS (
  SELECT run_id, arg_max(dimension, dimension_ns) AS dominant_dimension,
    max(dimension_ns) / nullif(sum(dimension_ns), 0) AS dominant_dimension_share,
    arg_max(dimension_scope, dimension_ns) AS dominant_scope
  FROM (
    SELECT run_id, dimension, sum(exposed_ns) AS dimension_ns, arg_max(scope, exposed_ns) AS dimension_scope
    FROM dimension_exposure
    GROUP BY ALL
  )
  WHERE dimension_ns > 0
  GROUP BY run_id
),
targets AS (
  SELECT t.run_id, any_value(t.min_compression) AS min_compression_95, any_value(t.min_bandwidth_gbps) AS min_bandwidth_95_gbps
  FROM whatif_targets AS t
  JOIN full_rate AS f ON f.run_id = t.run_id AND t.bandwidth_gbps = f.full_rate_gbps AND t.model = f.model
    AND t.transfers = 'line rate'
  WHERE t.target = 0.95 AND t.fusion = 'observed' AND t.dimension IN ('all', 'dp') AND (t.model = 'paper' OR t.dimension = 'all')
    AND t.ranks = (SELECT min(ranks) FROM whatif_targets AS o WHERE o.run_id = t.run_id AND o.model = t.model)
  GROUP BY t.run_id
),
joined AS (
  SELECT
    e.run_id,
    e.exposed_comm_share,
    e.collectives,
    e.unsized,
    e.unsized_reason,
    e.trace_files,
    w.wait_share,
    a.achieved_busbw_gbps,
    coalesce(f.full_rate_gbps, a.link_gbps, e.run_link_gbps) AS link_gbps,
    a.achieved_busbw_gbps / coalesce(f.full_rate_gbps, a.link_gbps, e.run_link_gbps) AS utilization,
    f.full_rate_sf,
    f.full_rate_exposed_ns,
    s.measured_sf,
    s.baseline_kind,
    coalesce(e.median_sf, 1 - e.exposed_comm_share) AS estimated_sf,
    t.min_compression_95,
    t.min_bandwidth_95_gbps,
    d.dominant_dimension,
    d.dominant_dimension_share,
    d.dominant_scope
  FROM exposure AS e
  LEFT JOIN achieved AS a USING (run_id)
  LEFT JOIN waiting AS w USING (run_id)
  LEFT JOIN full_rate AS f USING (run_id)
  LEFT JOIN scaling AS s USING (run_id)
  LEFT JOIN targets AS t USING (run_id)
  LEFT JOIN dominant AS d USING (run_id)
),
classified AS (
  SELECT
    *,
    -- Collectives without a size have no bandwidth and cannot be replayed: say why, and how to get it.
    CASE WHEN unsized > 0
      THEN printf(' %d of the %d collectives have no size: %s.', unsized, collectives, unsized_reason) ELSE '' END AS unsized_note,
    CASE
      WHEN trace_files = 0 THEN 'no traces'
      WHEN collectives = 0 OR exposed_comm_share IS NULL THEN 'no communication found'
      WHEN exposed_comm_share < getvariable('exposed_share_min') THEN 'not communication-bound'
      WHEN wait_share >= getvariable('wait_share_min') THEN 'straggler-bound'
      WHEN full_rate_sf IS NULL AND link_gbps IS NULL THEN 'communication-bound (line rate unknown)'
      WHEN full_rate_sf IS NULL THEN 'communication-bound (no what-if)'
      WHEN full_rate_sf < getvariable('full_rate_sf_min') THEN 'bandwidth-bound'
      WHEN utilization IS NULL OR utilization < getvariable('utilization_max') THEN 'transport-bound'
      ELSE 'mixed'
    END AS bottleneck
  FROM joined
)
SELECT
  run_id,
  bottleneck,
  CASE bottleneck
    WHEN 'no traces' THEN
      'The run has no profiler traces, only logs: they show its communicators, links and calls, but nothing '
      || 'measures how much communication was exposed. Capture traces with the collectors to judge the network.'
    WHEN 'no communication found' THEN
      'No communication was found in the traces, so there is nothing to judge. If the run does communicate '
      || 'through kernels without collective metadata, add their names to [communication] patterns in wirespeed.toml.'
    WHEN 'not communication-bound' THEN
      printf('Only %.1f%% of step time is exposed communication: the network is not what limits this run. '
        || 'Look at compute and input instead.', 100 * exposed_comm_share)
    WHEN 'straggler-bound' THEN
      printf('%.1f%% of step time is exposed communication, and %.0f%% of that is ranks waiting for a slower '
        || 'rank to arrive, not data moving. A faster network would barely help: find the straggler (step_sync) '
        || 'and fix its imbalance (data loading, uneven work, a slow host).', 100 * exposed_comm_share, 100 * wait_share)
    WHEN 'communication-bound (line rate unknown)' THEN
      printf('%.1f%% of step time is exposed communication, but the link''s line rate is unknown, so wirespeed '
        || 'cannot tell a too-slow link from a badly used one. Re-ingest with --link-gbps.', 100 * exposed_comm_share)
        || unsized_note
    WHEN 'communication-bound (no what-if)' THEN
      CASE WHEN unsized > 0
        THEN printf('%.1f%% of step time is exposed communication, but the what-if cannot replay the collectives, '
          || 'so it cannot tell a too-slow link from a badly used one.', 100 * exposed_comm_share) || unsized_note
        ELSE printf('%.1f%% of step time is exposed communication, but no collective of the traces could be matched '
          || 'and timed, so the what-if has nothing to replay and cannot tell a too-slow link from a badly used '
          || 'one. Bus bandwidth reached %s of the line rate.', 100 * exposed_comm_share,
          coalesce(printf('%.0f%%', 100 * utilization), 'an unknown share'))
      END
    WHEN 'bandwidth-bound' THEN
      printf('%.1f%% of step time is exposed communication, and even at the full %g Gbit/s line rate the '
        || 'model predicts a scaling factor of only %.2f: the link is too slow for this model and batch. A faster '
        || 'link (%s) or gradient compression (%s at this rate) would fix it.',
        100 * exposed_comm_share, link_gbps, full_rate_sf,
        coalesce(printf('%.0f Gbit/s for SF 0.95', min_bandwidth_95_gbps), 'no link speed alone reaches SF 0.95'),
        coalesce(printf('%.1fx for SF 0.95', min_compression_95), 'not even compression reaches SF 0.95'))
    WHEN 'transport-bound' THEN
      printf('%.1f%% of step time is exposed communication, yet at the full %g Gbit/s line rate the model '
        || 'predicts a scaling factor of %.2f: the link is fast enough. While the collectives move data, %s. The loss is in the '
        || 'transport (NCCL settings, network plugin, TCP stack), not in the link: tune it before buying bandwidth.',
        100 * exposed_comm_share, link_gbps, full_rate_sf,
        coalesce(printf('the link carries only %.0f%% of its line rate', 100 * utilization), 'their bus bandwidth cannot be measured'))
    ELSE
      printf('%.1f%% of step time is exposed communication, the link already carries %.0f%% of its line '
        || 'rate while the collectives move data, and the model predicts a scaling factor of %.2f at full rate. The exposure comes from how the '
        || 'communication is scheduled (buckets ready late in backward, many small messages, latency).',
        100 * exposed_comm_share, 100 * utilization, full_rate_sf)
  END || CASE WHEN dominant_dimension IS NOT NULL AND bottleneck NOT IN ('no traces', 'no communication found') THEN
      printf(' The steps wait most for %s communication (%.0f%% of the exposed time)%s.',
        dominant_dimension, 100 * dominant_dimension_share,
        CASE dominant_scope WHEN 'inter' THEN ', over the network'
          WHEN 'intra' THEN ', within a host, where a faster network would not shorten it' ELSE '' END)
    ELSE '' END AS explanation,
  exposed_comm_share,
  wait_share,
  achieved_busbw_gbps,
  link_gbps,
  utilization,
  full_rate_sf,
  full_rate_exposed_ns,
  measured_sf,
  baseline_kind,
  estimated_sf,
  min_compression_95,
  min_bandwidth_95_gbps,
  dominant_dimension,
  dominant_dimension_share,
  dominant_scope
FROM classified
ORDER BY run_id
