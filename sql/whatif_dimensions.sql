-- whatif_dimensions: in the replay, how much of each step waits for each parallel dimension.
--
-- For each cell of the replay's grid (see whatif), the exposed communication per rank-step, mean
-- over the run's rank-steps, of the waits that ended when a collective of the dimension ended,
-- as replayed. 'fixed' is the exposed time no collective's end closed (calls into the library,
-- resuming after a wait): the replay keeps it as measured. A cell's rows add up to its mean
-- exposure per rank-step (whatif.exposed_ns is the median step's).
--
-- Grain: one row per run, rank count, line rate, compression ratio, transfers and dimension.
--
-- Columns:
--   run_id VARCHAR  The run.
--   ranks INTEGER  N.
--   bandwidth_gbps DOUBLE  Line rate B of the network, Gbit/s.
--   compression DOUBLE  Compression ratio c.
--   transfers VARCHAR  'achieved' or 'line rate' (see whatif).
--   dimension VARCHAR  dp, fsdp, tp, pp, ep, cp, other, or 'fixed'.
--   scope VARCHAR  The link most of the dimension's collectives use: 'intra', 'inter' or
--       'unknown'; NULL for 'fixed'.
--   exposed_ns BIGINT  Its exposed communication per rank-step.
SELECT getvariable('run_id') AS run_id, ranks, bandwidth_gbps, compression, transfers, dimension, scope, exposed_ns
FROM _whatif_replay_dimensions
ORDER BY transfers, ranks, bandwidth_gbps, compression, dimension
