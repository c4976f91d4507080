-- The run's verdict. From verdict (recomputed for the report).
SELECT * FROM verdict WHERE run_id = getvariable('run_id')
