-- Throughput over time per series, in at most about `max_points` points per series (windows are
-- merged into equal buckets for long runs). Counters are shown for the run's link interface, or
-- for every interface that carried traffic when the link is unknown. From net_utilization.
WITH shown AS (
  SELECT u.*
  FROM net_utilization AS u, (SELECT any_value(link_interface) AS link_interface FROM runs WHERE run_id = getvariable('run_id')) AS r
  WHERE u.run_id = getvariable('run_id')
    AND (u.source = 'collectives' OR r.link_interface IS NULL OR u.interface = r.link_interface)
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
