-- What ingestion skipped or doubted for the run. From parse_issues.
SELECT severity, file, line, byte_offset, reason
FROM parse_issues
WHERE run_id = getvariable('run_id')
ORDER BY severity, file, line NULLS FIRST, byte_offset NULLS FIRST
LIMIT 500
