-- Each rank's Flight Recorder dump: why and when it was taken, what it holds, where the rank was.
-- From fr_dumps.
SELECT
  rank,
  recorder,
  reason,
  make_timestamp(dumped_at_ns // 1000) AS dumped_at_utc,
  entries,
  entries_skipped,
  buffer_entries,
  stack_brief(stack, 3) AS stack_when_dumped,
  file
FROM fr_dumps
WHERE run_id = getvariable('run_id')
ORDER BY rank, recorder
LIMIT 1000
