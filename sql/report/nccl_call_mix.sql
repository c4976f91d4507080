-- The mix of logged NCCL calls: how many of each op in each power-of-two size range. From nccl_calls.
SELECT
  op,
  CASE WHEN message_bytes > 0 THEN CAST(floor(log2(message_bytes)) AS INTEGER) END AS size_log2,
  CASE
    WHEN message_bytes IS NULL OR message_bytes = 0 THEN 'unknown'
    ELSE format_bytes(CAST(pow(2, floor(log2(message_bytes))) AS BIGINT))
  END AS size_from,
  count(*) AS calls,
  sum(message_bytes) AS bytes
FROM nccl_calls
WHERE run_id = getvariable('run_id')
GROUP BY ALL
ORDER BY size_log2 NULLS FIRST, op
