-- _whatif_costs: each bucket's cost terms in the ring all-reduce model, for each rank count N of the grid.
--
-- An intermediate table (not published). A ring all-reduce of S bytes over N ranks sends
-- 2(N-1)/N * S bytes per rank (reduce-scatter, then all-gather) and adds N-1 chunks of S/N bytes on
-- the device, so at line rate B (Gbit/s) and compression c its time is
--   d = wire_gbit / (B c) + reduce_s, wire_gbit = 2(N-1)/N * 8 S / 1e9, reduce_s = (N-1) a(S/N),
-- where a(x), the time to add x bytes, is read off the reduce-cost table (`_reduce_cost`, bytes and
-- seconds): linear between its points, flat below the first, extended with the last slope beyond.
--
-- Grain: one row per rank count of the grid and bucket.
--
-- Columns:
--   ranks INTEGER  N.
--   bucket BIGINT  The bucket.
--   wire_gbit DOUBLE  Gigabits each rank sends: 2(N-1)/N * 8 S / 1e9; seconds at 1 Gbit/s.
--   reduce_s DOUBLE  (N-1) a(S/N): seconds spent adding on the device.
WITH counts AS (
  SELECT DISTINCT ranks FROM _whatif_grid
),
points AS (
  SELECT
    bytes,
    seconds,
    coalesce(
      (lead(seconds) OVER w - seconds) / (lead(bytes) OVER w - bytes),
      (seconds - lag(seconds) OVER w) / (bytes - lag(bytes) OVER w)
    ) AS slope
  FROM _reduce_cost
  WINDOW w AS (ORDER BY bytes)
),
chunks AS (
  SELECT n.ranks, s.bucket, s.bytes, CAST(s.bytes AS DOUBLE) / n.ranks AS chunk_bytes
  FROM counts AS n
  CROSS JOIN _whatif_scenario AS s
),
added AS (
  SELECT
    c.*,
    coalesce(p.seconds + p.slope * (c.chunk_bytes - p.bytes), (SELECT seconds FROM points ORDER BY bytes LIMIT 1)) AS add_s
  FROM chunks AS c
  ASOF LEFT JOIN points AS p ON c.chunk_bytes >= p.bytes
)
SELECT
  ranks,
  bucket,
  2.0 * (ranks - 1) / ranks * 8 * bytes / 1e9 AS wire_gbit,
  (ranks - 1) * add_s AS reduce_s
FROM added
