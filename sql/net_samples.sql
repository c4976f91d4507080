-- net_samples: the network byte counters of each host, as sampled during the run.
--
-- Raw cumulative counters, one row per interface per sample (every 100 ms by default), from
-- `/proc/net/dev` (every interface, loopback included) and InfiniBand port counters (named
-- `ib:<device>/<port>`; RDMA traffic bypasses the kernel's counters). Rates are in
-- `net_utilization`. Lines that do not parse (a sampler killed mid-line) are in parse_issues.
--
-- Grain: one row per run, host, interface and sample.
--
-- Columns:
--   run_id VARCHAR  The run.
--   host VARCHAR  Host sampled.
--   interface VARCHAR  Network interface or InfiniBand port.
--   t_ns BIGINT  When the sample was taken, ns since the Unix epoch.
--   rx_bytes BIGINT  Bytes received so far (cumulative counter).
--   tx_bytes BIGINT  Bytes sent so far (cumulative counter).
SELECT getvariable('run_id') AS run_id, host, interface, t_ns, rx_bytes, tx_bytes
FROM read_csv(
  getvariable('sample_files'),
  header = true,
  columns = {'t_ns': 'BIGINT', 'host': 'VARCHAR', 'interface': 'VARCHAR', 'rx_bytes': 'BIGINT', 'tx_bytes': 'BIGINT'},
  store_rejects = true
)
