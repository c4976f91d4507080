-- Where the traces and the NCCL logs disagree. From nccl_crosscheck.
SELECT rank, comm_id, trace_collectives, log_calls, matched, op_mismatches, size_mismatches, missing_in_log, first_mismatch
FROM nccl_crosscheck
WHERE run_id = getvariable('run_id')
ORDER BY rank, comm_id
