-- The run's hang or mismatch verdict, for its result line: the first problem of the group whose
-- problems began first, and how many there are in all. From fr_mismatches.
SELECT
  problem,
  verdict,
  (SELECT count(*) FROM fr_mismatches WHERE run_id = getvariable('run_id')) AS problems
FROM fr_mismatches
WHERE run_id = getvariable('run_id') AND is_first
ORDER BY first_created_ns, pg_name, seq_id
LIMIT 1
