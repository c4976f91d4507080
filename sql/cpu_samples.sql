-- cpu_samples: the CPU time of each core of each host, as sampled during the run.
--
-- Raw cumulative tick counters from `/proc/stat`, to rule a CPU (protocol processing) bottleneck
-- in or out: utilisation between two samples is the busy share of the ticks that passed.
--
-- Grain: one row per run, host, core and sample.
--
-- Columns:
--   run_id VARCHAR  The run.
--   host VARCHAR  Host sampled.
--   cpu INTEGER  Core number; -1 for the machine as a whole.
--   t_ns BIGINT  When the sample was taken, ns since the Unix epoch.
--   busy_ticks BIGINT  Ticks spent in user, nice, system, irq, softirq and steal so far.
--   idle_ticks BIGINT  Ticks spent idle or waiting for I/O so far.
SELECT getvariable('run_id') AS run_id, host, cpu, t_ns, busy_ticks, idle_ticks
FROM read_csv(
  getvariable('sample_files'),
  header = true,
  columns = {'t_ns': 'BIGINT', 'host': 'VARCHAR', 'cpu': 'INTEGER', 'busy_ticks': 'BIGINT', 'idle_ticks': 'BIGINT'},
  store_rejects = true
)
