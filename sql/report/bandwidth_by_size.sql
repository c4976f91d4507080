-- One point per matched collective: its message size and the bus bandwidth of its transfer, with
-- the line rate it is compared with. From collective_bw.
SELECT
  op,
  scope,
  any_value(bytes) AS bytes,
  any_value(transfer_busbw_gbps) AS busbw_gbps,
  any_value(link_gbps) AS link_gbps
FROM collective_bw
WHERE run_id = getvariable('run_id') AND bytes > 0 AND transfer_busbw_gbps IS NOT NULL
GROUP BY collective_key, op, scope
