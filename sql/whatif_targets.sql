-- whatif_targets: the least compression, and the least line rate per link, that let the run reach a scaling factor.
--
-- 'replay' rows (`pipelines/analysis/replay.py`) come from searching the replay, whose step never grows
-- as a link gets faster or traffic smaller: per dimension, the least compression of that
-- dimension's traffic alone at line rate B ('all': of every collective); on the 'all' rows, the
-- least network line rate (uncompressed, the intra-host link as measured) and the least
-- intra-host rate (the network at B). 'paper' rows are the paper's model, exact
-- (`_whatif_paper_targets`), for the data-parallel buckets (dimension 'dp').
--
-- Grain: one row per run, model, transfers, rank count, line rate, target and dimension.
--
-- Columns:
--   run_id VARCHAR  The run.
--   model VARCHAR  'replay' or 'paper'.
--   fusion VARCHAR  How the buckets were formed.
--   ranks INTEGER  N.
--   bandwidth_gbps DOUBLE  Line rate B of the network, Gbit/s.
--   transfers VARCHAR  'achieved' or 'line rate' (see whatif).
--   target DOUBLE  Scaling factor to reach.
--   dimension VARCHAR  Whose traffic is compressed: a parallel dimension, or 'all'.
--   reachable BOOLEAN  Whether any compression of that traffic reaches the target at B.
--   min_compression DOUBLE  The least compression ratio reaching the target at B.
--   min_bandwidth_gbps DOUBLE  The least network line rate reaching it without compression.
--   min_intra_gbps DOUBLE  The least intra-host line rate reaching it with the network at B;
--       NULL when the run has no intra-host collectives of known rate.
SELECT
  getvariable('run_id') AS run_id, 'replay' AS model, 'observed' AS fusion,
  ranks, bandwidth_gbps, transfers, target, dimension, reachable, min_compression, min_bandwidth_gbps, min_intra_gbps
FROM _whatif_replay_targets
UNION ALL
SELECT run_id, 'paper' AS model, fusion, ranks, bandwidth_gbps, 'line rate' AS transfers, target, 'dp' AS dimension, reachable, min_compression,
  min_bandwidth_gbps, NULL AS min_intra_gbps
FROM _whatif_paper_targets
ORDER BY model DESC, transfers, ranks, bandwidth_gbps, target, dimension
