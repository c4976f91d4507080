-- The run's network at a glance: per host and series, mean, p95 and peak throughput and
-- utilisation, and utilisation while communicating. From network_summary.
SELECT
  host,
  source,
  interface,
  mean_gbps,
  p95_gbps,
  peak_gbps,
  link_gbps,
  mean_utilization,
  peak_utilization,
  comm_mean_utilization
FROM network_summary
WHERE run_id = getvariable('run_id') AND bytes > 0
ORDER BY host, source, interface
