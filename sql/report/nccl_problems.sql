-- NCCL warnings and errors and PyTorch watchdog lines, in the order they happened. From nccl_messages.
SELECT
  CASE WHEN logged_at_ns IS NOT NULL THEN strftime(make_timestamp(logged_at_ns // 1000), '%Y-%m-%d %H:%M:%S') END AS logged_at,
  class,
  coalesce(host || ':' || pid, 'rank ' || rank) AS process,
  "where",
  message,
  log_file || ':' || line AS source
FROM nccl_messages
WHERE run_id = getvariable('run_id')
ORDER BY logged_at_ns NULLS LAST, log_file, line
LIMIT 500
