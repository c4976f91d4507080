-- One point per matched collective: its message size, the power-of-two range it falls in
-- (size_from, its lower end: the chart's columns, so only ranges that occur are drawn and no
-- decade stands empty), and the bus bandwidth of its transfer, with the line rate it is compared
-- with. From collective_bw. At most `max_points` of them, a fixed pseudo-random sample (by the
-- hash of the collective) when a run has more.
SELECT
  op,
  scope,
  any_value(bytes) AS bytes,
  CAST(floor(log2(any_value(bytes))) AS INTEGER) AS size_log2,
  format_bytes(CAST(pow(2, floor(log2(any_value(bytes)))) AS BIGINT)) AS size_from,
  any_value(transfer_busbw_gbps) AS busbw_gbps,
  any_value(link_gbps) AS link_gbps
FROM collective_bw
WHERE run_id = getvariable('run_id') AND bytes > 0 AND transfer_busbw_gbps IS NOT NULL
GROUP BY collective_key, op, scope
QUALIFY row_number() OVER (ORDER BY hash(collective_key)) <= getvariable('max_points')
