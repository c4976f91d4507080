-- network_summary: how busy each host's network was, over the run and while communicating.
--
-- The paper's summary of net_utilization: mean, 95th percentile and peak throughput and
-- utilisation over every window of the run, and the mean utilisation over the windows in which the
-- host's collectives were moving data (a network that looks idle on average may still be the
-- bottleneck while it is used; one that is far from its line rate even then is not limited by
-- its capacity). The derived rows are also rated exactly, without windows, in the busier
-- direction (the one that moved more): what the host's collectives moved that way on the interface
-- over the time any of them was moving it (`_host_traffic`, the union of their transfers), so that
-- transfers running at once on one host add up, as they do on its NIC, and sends out and receives
-- in do not. The verdict judges the network's use by that.
--
-- Grain: one row per run, host, source and interface.
-- Empty without: net_utilization
--
-- Columns:
--   run_id VARCHAR  The run.
--   host VARCHAR  Host.
--   source VARCHAR  'counters' or 'collectives' (see net_utilization).
--   interface VARCHAR  Interface, or 'network' / 'nic <n>' / 'intra-host' for derived traffic.
--   windows BIGINT  Windows measured.
--   bytes BIGINT  Bytes moved in the busier direction, over all windows.
--   mean_gbps DOUBLE  Mean throughput of the busier direction, Gbit/s.
--   p95_gbps DOUBLE  Its 95th percentile over windows.
--   peak_gbps DOUBLE  Its highest window.
--   link_gbps DOUBLE  Line rate compared with; NULL when unknown or not the run's link.
--   mean_utilization DOUBLE  mean_gbps / link_gbps. Each utilisation is at most 1: where a
--       measure says more, utilization_note says why.
--   p95_utilization DOUBLE  p95_gbps / link_gbps.
--   peak_utilization DOUBLE  peak_gbps / link_gbps.
--   comm_windows BIGINT  Windows in which the host's collectives moved data (derived series > 0).
--   comm_mean_utilization DOUBLE  Mean utilisation over those windows only (net_utilization's).
--   transfer_ns BIGINT  For 'collectives': the time any of the host's collectives was moving data
--       on the interface in the busier direction (the union of their transfers); NULL for 'counters'.
--   transfer_gbps DOUBLE  For 'collectives': their bus-bandwidth bits that way over transfer_ns,
--       Gbit/s: the rate the interface carried while in use, transfers at the same time summed.
--   transfer_utilization DOUBLE  transfer_gbps / link_gbps.
--   utilization_note VARCHAR  Why a utilisation of the row measured above the line rate (the
--       highest, peak or transfer), where one did; NULL otherwise.
WITH busy AS (
  SELECT
    *,
    greatest(rx_gbps, tx_gbps) AS gbps,
    greatest(rx_bytes, tx_bytes) AS moved
  FROM net_utilization
),
communicating AS (
  SELECT DISTINCT host, window_start_ns, window_end_ns
  FROM net_utilization
  WHERE source = 'collectives' AND rx_bytes + tx_bytes > 0
),
in_comm AS (
  -- Windows of any series that overlap a window in which collectives moved data.
  SELECT b.host, b.source, b.interface, b.window_start_ns, any_value(b.utilization) AS utilization
  FROM busy AS b
  JOIN communicating AS c
    ON c.host = b.host AND c.window_start_ns < b.window_end_ns AND c.window_end_ns > b.window_start_ns
  GROUP BY ALL
),
comm AS (
  SELECT host, source, interface, count(*) AS comm_windows, avg(utilization) AS comm_mean_utilization
  FROM in_comm
  GROUP BY ALL
),
ways AS (
  -- Each transfer on each way of the link it takes.
  SELECT host, interface, way, bytes, transfer_start_ns, transfer_end_ns
  FROM _host_traffic, unnest(link_ways(direction)) AS w(way)
),
transfer_islands AS (
  -- Each transfer opens a new stretch of use where it starts after all earlier ones have ended.
  SELECT host, interface, way, bytes, transfer_start_ns, transfer_end_ns,
    sum(CASE WHEN transfer_start_ns < earlier_end_ns THEN 0 ELSE 1 END) OVER (
      PARTITION BY host, interface, way ORDER BY transfer_start_ns, transfer_end_ns ROWS UNBOUNDED PRECEDING
    ) AS island
  FROM (
    SELECT *, max(transfer_end_ns) OVER (
      PARTITION BY host, interface, way ORDER BY transfer_start_ns, transfer_end_ns
      ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
    ) AS earlier_end_ns
    FROM ways
  )
),
in_use AS (
  -- The busier direction's bytes and time in use.
  SELECT host, 'collectives' AS source, interface, max(bytes) AS bytes, arg_max(transfer_ns, bytes) AS transfer_ns
  FROM (
    SELECT host, interface, way, sum(bytes) AS bytes, sum(island_ns) AS transfer_ns
    FROM (
      SELECT host, interface, way, island, sum(bytes) AS bytes, max(transfer_end_ns) - min(transfer_start_ns) AS island_ns
      FROM transfer_islands
      GROUP BY ALL
    )
    GROUP BY ALL
  )
  GROUP BY ALL
),
summed AS (
  SELECT
    b.host,
    b.source,
    b.interface,
    count(*) AS windows,
    sum(b.moved) AS bytes,
    8.0 * sum(b.moved) / sum(b.window_end_ns - b.window_start_ns) AS mean_gbps,
    quantile_cont(b.gbps, 0.95) AS p95_gbps,
    max(b.gbps) AS peak_gbps,
    any_value(b.link_gbps) AS link_gbps,
    coalesce(any_value(c.comm_windows), 0) AS comm_windows,
    any_value(c.comm_mean_utilization) AS comm_mean_utilization,
    CAST(any_value(u.transfer_ns) AS BIGINT) AS transfer_ns,
    8.0 * any_value(u.bytes) / nullif(any_value(u.transfer_ns), 0) AS transfer_gbps
  FROM busy AS b
  LEFT JOIN comm AS c USING (host, source, interface)
  LEFT JOIN in_use AS u USING (host, source, interface)
  GROUP BY b.host, b.source, b.interface
)
SELECT
  getvariable('run_id') AS run_id,
  host, source, interface, windows, bytes, mean_gbps, p95_gbps, peak_gbps, link_gbps,
  CASE WHEN mean_gbps > link_gbps THEN 1.0 ELSE mean_gbps / link_gbps END AS mean_utilization,
  CASE WHEN p95_gbps > link_gbps THEN 1.0 ELSE p95_gbps / link_gbps END AS p95_utilization,
  CASE WHEN peak_gbps > link_gbps THEN 1.0 ELSE peak_gbps / link_gbps END AS peak_utilization,
  comm_windows,
  comm_mean_utilization,
  transfer_ns,
  transfer_gbps,
  CASE WHEN transfer_gbps > link_gbps THEN 1.0 ELSE transfer_gbps / link_gbps END AS transfer_utilization,
  CASE WHEN greatest(peak_gbps, transfer_gbps) > link_gbps THEN
    over_line_rate(greatest(peak_gbps, transfer_gbps) / link_gbps, link_gbps, series_clocks(source))
  END AS utilization_note
FROM summed
ORDER BY host, source, interface
