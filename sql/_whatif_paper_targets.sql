-- _whatif_paper_targets: in the paper's model, the least compression and line rate that reach a scaling factor.
--
-- An intermediate table (`whatif_targets` publishes it with model 'paper'). Exact, from the model, not a search. SF >= target holds when E <= E_max = t_1 (1/target - 1),
-- i.e. when for every bucket j: r_j + sum over k >= j of (wire_k / (B c) + reduce_k) <= T_bk + E_max.
-- With A_j the suffix sum of wire_k and R_j = T_bk + E_max - r_j - (suffix sum of reduce_k), that is
-- B c >= A_j / R_j for every j, so the least product is P = max over j of A_j / R_j: the least
-- compression at line rate B is max(1, P / B) and the least uncompressed line rate is P. When some
-- R_j is not positive, the device's reduction time alone already exceeds the budget: no bandwidth
-- or compression reaches the target (reachable is false, the minima NULL).
--
-- Grain: one row per run, rank count, line rate and target.
--
-- Columns:
--   run_id VARCHAR  The run.
--   fusion VARCHAR  How the buckets were formed.
--   ranks INTEGER  N.
--   bandwidth_gbps DOUBLE  Line rate B, Gbit/s.
--   target DOUBLE  Scaling factor to reach.
--   reachable BOOLEAN  Whether any line rate or compression reaches it.
--   min_compression DOUBLE  The least compression ratio reaching the target at B.
--   min_bandwidth_gbps DOUBLE  The least line rate reaching it without compression.
WITH suffix AS (
  SELECT
    k.ranks,
    s.bucket,
    s.ready_ns / 1e9 AS ready_s,
    s.backward_ns / 1e9 AS backward_s,
    s.compute_ns / 1e9 AS compute_s,
    sum(k.wire_gbit) OVER w AS wire_after_gbit,
    sum(k.reduce_s) OVER w AS reduce_after_s
  FROM _whatif_costs AS k
  JOIN _whatif_scenario AS s USING (bucket)
  WINDOW w AS (PARTITION BY k.ranks ORDER BY s.bucket DESC ROWS UNBOUNDED PRECEDING)
),
budgets AS (
  SELECT
    x.*,
    t.target,
    x.backward_s + x.compute_s * (1 / t.target - 1) - x.ready_s - x.reduce_after_s AS room_s
  FROM suffix AS x
  CROSS JOIN _whatif_targets AS t
),
least AS (
  SELECT
    ranks,
    target,
    NOT bool_or(room_s < 0 OR (room_s = 0 AND wire_after_gbit > 0)) AS reachable,
    coalesce(max(wire_after_gbit / room_s) FILTER (WHERE wire_after_gbit > 0 AND room_s > 0), 0) AS least_product
  FROM budgets
  GROUP BY ranks, target
)
SELECT
  getvariable('run_id') AS run_id,
  getvariable('fusion') AS fusion,
  g.ranks,
  g.bandwidth_gbps,
  l.target,
  l.reachable,
  CASE WHEN l.reachable THEN greatest(1.0, l.least_product / g.bandwidth_gbps) END AS min_compression,
  CASE WHEN l.reachable THEN l.least_product END AS min_bandwidth_gbps
FROM (SELECT DISTINCT ranks, bandwidth_gbps FROM _whatif_grid) AS g
JOIN least AS l USING (ranks)
ORDER BY g.ranks, g.bandwidth_gbps, l.target
