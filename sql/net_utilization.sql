-- net_utilization: throughput and utilisation of each host's network over time, measured and derived.
--
-- Two series per host. 'counters': the sampled byte counters (net_samples), differenced between
-- consecutive samples, for every interface that carried traffic during the run; utilisation is
-- computed for the interface of the run's link (runs.link_interface) against its line rate. This
-- is the paper's view: what the NIC actually carried, whatever carried it.
-- 'collectives': what the collectives say each host had to move, so that runs without counters
-- still get a curve and runs with both show the gap. What each host's links had to move for each
-- collective (`_host_traffic`: once per host through its NIC or the NICs its NCCL logs name, for
-- each of its ranks inside the host; a send's only out, a receive's only in) is spread evenly over
-- the collective's transfer there and binned into windows of the sampling interval (100 ms when
-- the run has no samples). NIC
-- interfaces named by NCCL logs are judged against their rates together: on a host with a NIC per
-- GPU, each GPU's own. Windows with no traffic over the ranks' activity are included, with zero.
--
-- Grain: one row per run, host, source, interface and time window.
--
-- Columns:
--   run_id VARCHAR  The run.
--   host VARCHAR  Host.
--   source VARCHAR  'counters' (sampled) or 'collectives' (derived from the traces).
--   interface VARCHAR  Interface or port sampled; 'network', 'nic <n>[,<m>...]' or 'intra-host'
--       for derived traffic.
--   window_start_ns BIGINT  Start of the window, ns since the Unix epoch.
--   window_end_ns BIGINT  End of the window.
--   rx_bytes BIGINT  Bytes received in the window.
--   tx_bytes BIGINT  Bytes sent in the window.
--   rx_gbps DOUBLE  Receive throughput, Gbit/s.
--   tx_gbps DOUBLE  Send throughput, Gbit/s.
--   link_gbps DOUBLE  Line rate the window is compared with (for 'nic' interfaces, the run's
--       line rate times their number); NULL for interfaces other than the run's link, or when it is
--       unknown.
--   utilization DOUBLE  The busier direction's throughput over link_gbps, at most 1: where the
--       measure says more, utilization_note says why.
--   utilization_note VARCHAR  Why the window measured above the line rate, where it did; NULL
--       otherwise.
WITH links AS (
  SELECT any_value(link_gbps) AS link_gbps, any_value(link_interface) AS link_interface FROM runs
),
counter_deltas AS (
  SELECT
    host,
    interface,
    lag(t_ns) OVER w AS window_start_ns,
    t_ns AS window_end_ns,
    rx_bytes - lag(rx_bytes) OVER w AS rx_bytes,
    tx_bytes - lag(tx_bytes) OVER w AS tx_bytes
  FROM net_samples
  WINDOW w AS (PARTITION BY host, interface ORDER BY t_ns)
),
counters AS (
  SELECT host, 'counters' AS source, interface, window_start_ns, window_end_ns, rx_bytes, tx_bytes
  FROM counter_deltas
  WHERE window_start_ns IS NOT NULL AND window_end_ns > window_start_ns
    AND rx_bytes >= 0 AND tx_bytes >= 0  -- a counter that went backwards was reset: no data
    AND (host, interface) IN (
      SELECT (host, interface) FROM counter_deltas GROUP BY host, interface HAVING sum(rx_bytes) + sum(tx_bytes) > 0
    )
),
window_size AS (
  SELECT coalesce(CAST(median(window_end_ns - window_start_ns) AS BIGINT), 100000000) AS ns FROM counters
),
rank_hosts AS (
  SELECT DISTINCT rank, host FROM ranks WHERE host IS NOT NULL
),
traffic_windows AS (
  SELECT
    t.host,
    t.interface,
    window_index,
    t.direction,
    t.bytes * (
      least(t.transfer_end_ns, (window_index + 1) * w.ns) - greatest(t.transfer_start_ns, window_index * w.ns)
    ) / greatest(t.transfer_end_ns - t.transfer_start_ns, 1) AS bytes
  FROM _host_traffic AS t, window_size AS w,
    unnest(range(t.transfer_start_ns // w.ns, (t.transfer_end_ns - 1) // w.ns + 1)) AS r(window_index)
),
activity_windows AS (
  -- Every window over the span of each host's ranks, so that quiet windows count as zero.
  SELECT s.host, unnest(range(s.span_start_ns // w.ns, (s.span_end_ns - 1) // w.ns + 1)) AS window_index
  FROM (
    SELECT h.host, min(b.span_start_ns) AS span_start_ns, max(b.span_end_ns) AS span_end_ns
    FROM rank_breakdown AS b
    JOIN rank_hosts AS h USING (rank)
    GROUP BY h.host
  ) AS s, window_size AS w
),
derived AS (
  SELECT
    a.host,
    'collectives' AS source,
    i.interface,
    a.window_index * w.ns AS window_start_ns,
    (a.window_index + 1) * w.ns AS window_end_ns,
    CAST(round(coalesce(sum(t.bytes) FILTER (WHERE t.direction <> 'out'), 0)) AS BIGINT) AS rx_bytes,
    CAST(round(coalesce(sum(t.bytes) FILTER (WHERE t.direction <> 'in'), 0)) AS BIGINT) AS tx_bytes
  FROM activity_windows AS a
  JOIN (SELECT DISTINCT host, interface FROM _host_traffic) AS i USING (host)
  CROSS JOIN window_size AS w
  LEFT JOIN traffic_windows AS t ON t.host = a.host AND t.interface = i.interface AND t.window_index = a.window_index
  GROUP BY a.host, i.interface, a.window_index, w.ns
),
series AS (
  SELECT * FROM counters
  UNION ALL
  SELECT * FROM derived
),
rated AS (
  SELECT s.*,
    CASE WHEN s.interface IN (l.link_interface, 'network') THEN l.link_gbps
         WHEN starts_with(s.interface, 'nic ') THEN l.link_gbps * len(string_split(s.interface, ',')) END AS link_gbps
  FROM series AS s, links AS l
)
SELECT
  getvariable('run_id') AS run_id,
  host,
  source,
  interface,
  window_start_ns,
  window_end_ns,
  rx_bytes,
  tx_bytes,
  8.0 * rx_bytes / (window_end_ns - window_start_ns) AS rx_gbps,
  8.0 * tx_bytes / (window_end_ns - window_start_ns) AS tx_gbps,
  link_gbps,
  CASE WHEN measured > 1 THEN 1.0 ELSE measured END AS utilization,
  CASE WHEN measured > 1 THEN over_line_rate(measured, link_gbps, series_clocks(source))
  END AS utilization_note
FROM (SELECT *, 8.0 * greatest(rx_bytes, tx_bytes) / (window_end_ns - window_start_ns) / link_gbps AS measured FROM rated)
ORDER BY host, source, interface, window_start_ns
