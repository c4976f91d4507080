-- Which kinds of collective got slower or faster from run `run_a` to run `run_b`, at most
-- `max_collectives` of them, the largest change in time per step first. A kind is an op, a
-- process group (by description, else name) and a message size: the same call in both runs. Per
-- run: how many instances a rank ran per step, the median duration of an instance (waiting
-- included), the median transfer (its shortest duration across ranks), the bus bandwidth of the
-- transfers (bytes-weighted) and its median utilisation of the line rate. A kind found in one run
-- only has NULLs for the other. From collectives and collective_bw.
--
-- Grain: one row per kind (op, group, size).
--
-- Columns:
--   op VARCHAR  The operation.
--   pg VARCHAR  The process group's description, else its name.
--   bytes BIGINT  Message size S; NULL when unknown.
--   a_per_step DOUBLE  Instances per rank and step in run_a.
--   b_per_step DOUBLE  The same in run_b.
--   a_median_us DOUBLE  Median duration of an instance in run_a, us.
--   b_median_us DOUBLE  The same in run_b.
--   delta_us DOUBLE  b_median_us - a_median_us.
--   delta_ms_per_step DOUBLE  How much more time per rank and step the kind took in run_b:
--       b_per_step * b_median_us - a_per_step * a_median_us, in ms.
--   a_transfer_us DOUBLE  Median transfer in run_a, us.
--   b_transfer_us DOUBLE  The same in run_b.
--   a_busbw_gbps DOUBLE  Bus bandwidth of run_a's transfers, Gbit/s.
--   b_busbw_gbps DOUBLE  The same in run_b.
--   a_utilization DOUBLE  Median utilisation of the line rate in run_a.
--   b_utilization DOUBLE  The same in run_b.
WITH instances AS (
  SELECT c.run_id, c.rank, c.step, c.op, coalesce(c.pg_desc, c.pg) AS pg, c.bytes, c.dur_ns, b.transfer_ns,
    b.utilization, 8.0 * c.bytes * busbw_factor(c.op, c.group_size) AS bus_bits
  FROM collectives AS c
  LEFT JOIN collective_bw AS b USING (run_id, rank, collective_key)
  WHERE c.run_id IN (getvariable('run_a'), getvariable('run_b')) AND c.step IS NOT NULL
),
rank_steps AS (
  SELECT run_id, count(*) AS rank_steps FROM step_breakdown
  WHERE run_id IN (getvariable('run_a'), getvariable('run_b')) GROUP BY run_id
),
kinds AS (
  SELECT i.run_id, i.op, i.pg, i.bytes,
    count(*) / any_value(r.rank_steps) AS per_step,
    median(i.dur_ns) / 1e3 AS median_us,
    median(i.transfer_ns) / 1e3 AS transfer_us,
    sum(i.bus_bits) FILTER (WHERE i.transfer_ns > 0) / sum(i.transfer_ns) FILTER (WHERE i.bus_bits > 0) AS busbw_gbps,
    median(i.utilization) AS utilization
  FROM instances AS i
  JOIN rank_steps AS r USING (run_id)
  GROUP BY ALL
),
a AS (SELECT * FROM kinds WHERE run_id = getvariable('run_a')),
b AS (SELECT * FROM kinds WHERE run_id = getvariable('run_b'))
SELECT
  coalesce(a.op, b.op) AS op,
  coalesce(a.pg, b.pg) AS pg,
  coalesce(a.bytes, b.bytes) AS bytes,
  a.per_step AS a_per_step,
  b.per_step AS b_per_step,
  a.median_us AS a_median_us,
  b.median_us AS b_median_us,
  b.median_us - a.median_us AS delta_us,
  (coalesce(b.per_step * b.median_us, 0) - coalesce(a.per_step * a.median_us, 0)) / 1e3 AS delta_ms_per_step,
  a.transfer_us AS a_transfer_us,
  b.transfer_us AS b_transfer_us,
  a.busbw_gbps AS a_busbw_gbps,
  b.busbw_gbps AS b_busbw_gbps,
  a.utilization AS a_utilization,
  b.utilization AS b_utilization
FROM a
FULL JOIN b ON a.op IS NOT DISTINCT FROM b.op AND a.pg IS NOT DISTINCT FROM b.pg AND a.bytes IS NOT DISTINCT FROM b.bytes
ORDER BY abs(delta_ms_per_step) DESC, op, pg, bytes
LIMIT getvariable('max_collectives')
