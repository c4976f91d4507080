-- Throughput over time per series, in at most about `max_points` points per series (windows are
-- merged into equal buckets for long runs). Counters are shown for the interfaces that carried
-- traffic: the run's link interface when it did, else every one that did (a manifest's default-
-- route NIC may sit idle while the job talks over another). From net_utilization.
WITH carried AS (
  SELECT DISTINCT interface
  FROM net_utilization
  WHERE run_id = getvariable('run_id') AND source = 'counters'
  GROUP BY host, interface
  HAVING sum(rx_bytes + tx_bytes) > 0
),
link AS (
  SELECT any_value(link_interface) AS interface FROM runs
  WHERE run_id = getvariable('run_id') AND link_interface IN (SELECT interface FROM carried)
),
shown AS (
  SELECT u.*
  FROM net_utilization AS u, link
  WHERE u.run_id = getvariable('run_id')
    AND (u.source = 'collectives' OR u.interface = coalesce(link.interface, u.interface) AND u.interface IN (SELECT interface FROM carried))
),
span AS (
  SELECT min(window_start_ns) AS t0, greatest(max(window_end_ns) - min(window_start_ns), 1) AS ns FROM shown
)
SELECT
  host,
  source || ': ' || interface AS series,
  (min(window_start_ns) - any_value(span.t0)) / 1e9 AS t_s,
  (max(window_end_ns) - any_value(span.t0)) / 1e9 AS t_end_s,
  any_value(source) AS source,
  8.0 * sum(greatest(rx_bytes, tx_bytes)) / sum(window_end_ns - window_start_ns) AS gbps,
  any_value(link_gbps) AS link_gbps
FROM shown, span
GROUP BY host, series, (window_start_ns - span.t0) * getvariable('max_points') // span.ns
ORDER BY host, series, t_s
