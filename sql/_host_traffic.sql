-- _host_traffic: what each host's links had to move for each collective, and when.
--
-- An intermediate table (not published) read by `net_utilization`, which bins it into windows,
-- and `network_summary`, which rates each host's links over the time they moved data. A
-- collective contributes its bus-bandwidth bytes (factor x S: what a rank sends in the ring model)
-- over its transfer: the last transfer_ns (see collective_sync) before it ended on that host. An
-- inter-node collective counts once per host, as traffic through the host's NIC (interface
-- 'network'), or through the NICs its NCCL logs name (interface 'nic <n>[,<m>...]'; see
-- collectives.nics); an intra-node one counts for each of the host's ranks, as traffic inside the
-- host (interface 'intra-host'). A send leaves its host and a receive enters its host, so their
-- bytes go one way (`direction` 'out' or 'in', `link_way`): a NIC carries as much each way at
-- once, and a pipeline's sends one way and its gradients' the other would otherwise add up to
-- twice its rate. Any other collective sends and receives alike ('both'). Collectives of ranks
-- without a host are left out.
--
-- Grain: one row per host, interface, collective and direction.
--
-- Columns:
--   host VARCHAR  Host.
--   interface VARCHAR  'network', 'nic <n>[,<m>...]' or 'intra-host'.
--   collective_key VARCHAR  The matched collective (see collective_sync).
--   direction VARCHAR  'out' (a send: out of the host), 'in' (a receive: into it) or 'both'.
--   bytes DOUBLE  Bus-bandwidth bytes the host moved for it on that interface.
--   transfer_start_ns BIGINT  Start of its transfer on the host, ns since the Unix epoch.
--   transfer_end_ns BIGINT  End of its transfer on the host: when it last ended there.
WITH rank_hosts AS (
  SELECT DISTINCT rank, host FROM ranks WHERE host IS NOT NULL
)
SELECT
  h.host,
  CASE WHEN b.scope = 'intra' THEN 'intra-host' ELSE coalesce('nic ' || c.nics, 'network') END AS interface,
  b.collective_key,
  link_way(b.op) AS direction,
  CASE WHEN b.scope = 'intra' THEN sum(b.bytes * busbw_factor(b.op, b.group_size))
       ELSE max(b.bytes * busbw_factor(b.op, b.group_size)) END AS bytes,
  max(b.start_ns + b.dur_ns) - max(b.transfer_ns) AS transfer_start_ns,
  max(b.start_ns + b.dur_ns) AS transfer_end_ns
FROM collective_bw AS b
JOIN rank_hosts AS h USING (rank)
LEFT JOIN collectives AS c USING (rank, collective_key)
WHERE b.bytes * busbw_factor(b.op, b.group_size) > 0
GROUP BY h.host, b.scope, c.nics, b.collective_key, direction
