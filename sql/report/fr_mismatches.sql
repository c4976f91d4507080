-- Where the ranks' Flight Recorders disagree: each group's first problem first, then the rest in
-- time order. From fr_mismatches.
SELECT
  problem,
  group_text(pg_desc, pg_name) AS process_group,
  seq_id,
  op,
  missing_ranks,
  unfinished_ranks,
  mismatched_ranks,
  unknown_ranks,
  verdict
FROM fr_mismatches
WHERE run_id = getvariable('run_id')
ORDER BY NOT is_first, first_created_ns, pg_name, seq_id
LIMIT 200
