-- nccl-tests results found in the logs: bus bandwidth by size and placement. From nccl_tests_results.
SELECT coalesce(test, 'nccl-tests') || ' (' || regexp_extract(log_file, '[^/]+$') || ')' AS source, size_bytes, placement, time_ns / 1e3 AS time_us, busbw_gbps, busbw_gbytes_per_s
FROM nccl_tests_results
WHERE run_id = getvariable('run_id')
ORDER BY source, size_bytes, placement
