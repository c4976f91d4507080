-- The run against its job's baseline: every measure compared, those that regressed first. From regressions.
SELECT metric, kind, baseline_runs, samples, median, baseline_median, change, p_value, regressed, summary
FROM regressions
WHERE run_id = getvariable('run_id')
ORDER BY regressed DESC, p_value, metric, kind
