-- whatif: the run's step time and scaling factor at other line rates, compressions and rank counts.
--
-- Two models (docs/whatif.md). 'replay' replays every step of the run with every collective's
-- transfer at the cell's rates (`pipelines/analysis/replay.py`, from `whatif_inputs`): the network at
-- bandwidth_gbps, the intra-host link as measured, every collective's bytes divided by the
-- compression ratio, and, for N above the run's ranks, the data-parallel groups (dp, fsdp) made
-- N / ranks times larger; each cell twice, with every transfer at the share of the line rate it
-- achieved in the run ('achieved': how the run would really go on that link, what the replay is
-- validated on) and at the full line rate ('line rate': what the link could give, the paper's
-- assumption). A cell in which no collective is slower than in the run replays no rank-step
-- longer than measured (none faster: none shorter). Its step and t_1 are medians over the run's
-- rank-steps (a trace's last step often holds the profiler's own teardown). 'paper' is the
-- paper's model (`_whatif_paper`): the data-parallel gradient buckets through one all-reduce
-- channel, as the paper published it; a run without buckets has no paper rows.
--
-- Grain: one row per run, model, transfers, rank count, line rate and compression ratio.
--
-- Columns:
--   run_id VARCHAR  The run.
--   model VARCHAR  'replay' or 'paper'.
--   fusion VARCHAR  How the buckets were formed: 'observed' (the trace's own), or a policy.
--   scenario VARCHAR  Which step(s) the timeline comes from; for the replay, how many rank-steps
--       went through the waits their traces record (docs/whatif.md).
--   ranks INTEGER  N.
--   bandwidth_gbps DOUBLE  Line rate B of the network, Gbit/s.
--   compression DOUBLE  Compression ratio c (uncompressed / compressed bytes).
--   transfers VARCHAR  'achieved' (each transfer at the share of line rate it achieved) or 'line
--       rate' (every transfer at the full line rate; the paper's model always).
--   run_link BOOLEAN  Whether B is the run's own link rate.
--   buckets BIGINT  Buckets in the scenario ('paper'); collectives replayed ('replay').
--   bucket_bytes BIGINT  The buckets' total size ('paper').
--   backward_ns BIGINT  Backward length T_bk ('paper').
--   compute_ns BIGINT  Step time without communication t_1.
--   comm_ns BIGINT  Communication time per step: the channel time of all buckets ('paper'), the
--       replayed durations of all collectives ('replay').
--   exposed_ns BIGINT  E: communication the step waits for.
--   step_ns BIGINT  Predicted step: t_1 + E.
--   scaling_factor DOUBLE  t_1 / (t_1 + E).
--   no_overlap_exposed_ns BIGINT  E if no communication overlapped backward ('paper').
--   no_overlap_scaling_factor DOUBLE  t_1 / (t_1 + that E) ('paper').
SELECT
  getvariable('run_id') AS run_id,
  'replay' AS model,
  'observed' AS fusion,
  r.scenario,
  r.ranks,
  r.bandwidth_gbps,
  r.compression,
  r.transfers,
  r.bandwidth_gbps = getvariable('run_link_gbps') AS run_link,
  r.collectives AS buckets,
  NULL AS bucket_bytes,
  NULL AS backward_ns,
  r.compute_ns,
  r.comm_ns,
  r.exposed_ns,
  r.step_ns,
  r.scaling_factor,
  NULL AS no_overlap_exposed_ns,
  NULL AS no_overlap_scaling_factor
FROM _whatif_replay AS r
UNION ALL
SELECT run_id, 'paper' AS model, fusion, scenario, ranks, bandwidth_gbps, compression, 'line rate' AS transfers, run_link, buckets, bucket_bytes,
  backward_ns, compute_ns, comm_ns, exposed_ns, step_ns, scaling_factor, no_overlap_exposed_ns, no_overlap_scaling_factor
FROM _whatif_paper
ORDER BY model DESC, transfers, ranks, bandwidth_gbps, compression
