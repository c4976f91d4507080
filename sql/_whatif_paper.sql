-- _whatif_paper: the paper's what-if, the run's step time and scaling factor if every all-reduce ran at full line rate.
--
-- An intermediate table (`whatif` publishes it with model 'paper'). The paper's model (docs/whatif.md), over a grid of rank counts N, line rates B and compression
-- ratios c. The buckets of `_whatif_scenario` enter one FIFO channel in ready order: bucket j
-- starts when it is ready and the channel is free, e_j = max(r_j, e_{j-1}) + d_j, with d_j from
-- `_whatif_costs`. Unrolled, the channel's last end is e_J = max over j of (r_j + the sum of d_k
-- for k >= j), a suffix sum taken here with a window. Communication still running after backward
-- ends is exposed: E = max(0, e_J - T_bk); the step takes t_1 + E and scales by
-- SF = t_1 / (t_1 + E). The no-overlap bound makes every bucket ready only at T_bk, so E = sum d.
-- Compute, forward and optimizer are assumed unchanged with N (weak scaling); latency, the
-- intra-node stage, contention, stragglers and compression's own cost are left out.
--
-- Grain: one row per run, rank count, line rate and compression ratio.
--
-- Columns:
--   run_id VARCHAR  The run.
--   fusion VARCHAR  How the buckets were formed: 'observed' (the trace's own), or a policy.
--   scenario VARCHAR  Which step(s) the bucket timeline comes from.
--   ranks INTEGER  N.
--   bandwidth_gbps DOUBLE  Line rate B, Gbit/s.
--   compression DOUBLE  Compression ratio c (uncompressed / compressed bytes).
--   run_link BOOLEAN  Whether B is the run's own link rate.
--   buckets BIGINT  Buckets in the scenario.
--   bucket_bytes BIGINT  Their total size.
--   backward_ns BIGINT  Backward length T_bk.
--   compute_ns BIGINT  Step time without communication t_1.
--   comm_ns BIGINT  Channel time of all buckets: the sum of d_j.
--   exposed_ns BIGINT  E: communication left after backward ends.
--   step_ns BIGINT  Predicted step: t_1 + E.
--   scaling_factor DOUBLE  t_1 / (t_1 + E).
--   no_overlap_exposed_ns BIGINT  E if no communication overlapped backward: the sum of d_j.
--   no_overlap_scaling_factor DOUBLE  t_1 / (t_1 + that E).
WITH cells AS (
  SELECT
    g.ranks,
    g.bandwidth_gbps,
    g.compression,
    s.bucket,
    s.bytes,
    s.ready_ns / 1e9 AS ready_s,
    s.backward_ns,
    s.compute_ns,
    s.description,
    k.wire_gbit / (g.bandwidth_gbps * g.compression) + k.reduce_s AS d_s
  FROM _whatif_grid AS g
  JOIN _whatif_costs AS k ON k.ranks = g.ranks
  JOIN _whatif_scenario AS s ON s.bucket = k.bucket
),
channel AS (
  SELECT
    *,
    ready_s + sum(d_s) OVER (
      PARTITION BY ranks, bandwidth_gbps, compression ORDER BY bucket DESC ROWS UNBOUNDED PRECEDING
    ) AS end_if_started_here_s
  FROM cells
),
per_cell AS (
  SELECT
    ranks,
    bandwidth_gbps,
    compression,
    count(*) AS buckets,
    sum(bytes) AS bucket_bytes,
    any_value(backward_ns) AS backward_ns,
    any_value(compute_ns) AS compute_ns,
    any_value(description) AS scenario,
    sum(d_s) AS comm_s,
    greatest(0, max(end_if_started_here_s) - any_value(backward_ns) / 1e9) AS exposed_s
  FROM channel
  GROUP BY ranks, bandwidth_gbps, compression
)
SELECT
  getvariable('run_id') AS run_id,
  getvariable('fusion') AS fusion,
  scenario,
  ranks,
  bandwidth_gbps,
  compression,
  bandwidth_gbps = getvariable('run_link_gbps') AS run_link,
  buckets,
  bucket_bytes,
  backward_ns,
  compute_ns,
  CAST(round(comm_s * 1e9) AS BIGINT) AS comm_ns,
  CAST(round(exposed_s * 1e9) AS BIGINT) AS exposed_ns,
  compute_ns + CAST(round(exposed_s * 1e9) AS BIGINT) AS step_ns,
  compute_ns / (compute_ns + exposed_s * 1e9) AS scaling_factor,
  CAST(round(comm_s * 1e9) AS BIGINT) AS no_overlap_exposed_ns,
  compute_ns / (compute_ns + comm_s * 1e9) AS no_overlap_scaling_factor
FROM per_cell
ORDER BY ranks, bandwidth_gbps, compression
