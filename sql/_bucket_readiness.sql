-- _bucket_readiness: each step's gradient all-reduces, with when each was ready during backward.
--
-- An intermediate table (not published) that holds what `gradient_buckets` reads from the device
-- and CPU timelines, so that it can be built while `_device_events` is still in memory and that
-- table can leave before the sweep (see `gradient_buckets` for the method: where backward begins,
-- when a bucket is ready, on each timeline).
--
-- Grain: one row per run, rank, step and gradient bucket with bytes.
--
-- Columns:
--   rank INTEGER  Global rank.
--   step BIGINT  Step number.
--   collective_key VARCHAR  The collective that reduced it (see collectives).
--   op VARCHAR  allreduce or reducescatter.
--   bytes BIGINT  Bucket size (the collective's message size).
--   group_size INTEGER  Ranks taking part in the collective.
--   ready_ns BIGINT  When the bucket was ready, ns after backward began; may be negative.
WITH cpu_steps AS (
  SELECT rank, step, start_ns, end_ns FROM steps
),
backward_start AS (
  SELECT e.rank, s.step, min(e.ts_ns) AS backward_cpu_ns
  FROM trace_events AS e
  ASOF JOIN cpu_steps AS s ON e.rank = s.rank AND e.ts_ns >= s.start_ns
  WHERE e.ph = 'X' AND e.cat = 'cpu_op' AND starts_with(e.name, 'autograd::engine::evaluate_function:')
    AND e.ts_ns < s.end_ns
  GROUP BY e.rank, s.step
),
launched_device_events AS (
  SELECT rank, launched_ns AS launch_ns, start_ns, end_ns, NOT is_comm AND NOT is_memory AS is_compute
  FROM _device_events
  WHERE launched_ns IS NOT NULL
),
computed_by AS (
  -- For each launch of a compute kernel: the latest end of any compute kernel launched so far.
  SELECT rank, launch_ns, max(end_ns) OVER (PARTITION BY rank ORDER BY launch_ns ROWS UNBOUNDED PRECEDING) AS computed_ns
  FROM launched_device_events
  WHERE is_compute
),
backward_spans AS (
  SELECT b.rank, b.step, b.backward_cpu_ns, s.end_ns
  FROM backward_start AS b
  JOIN cpu_steps AS s USING (rank, step)
),
device_backward AS (
  -- The first device event launched between backward's start on the CPU and the step's end.
  SELECT b.rank, b.step, b.backward_cpu_ns, min(d.start_ns) AS backward_start_ns
  FROM launched_device_events AS d
  ASOF JOIN backward_spans AS b ON d.rank = b.rank AND d.launch_ns >= b.backward_cpu_ns
  WHERE d.launch_ns < b.end_ns
  GROUP BY b.rank, b.step, b.backward_cpu_ns
),
device_buckets AS (
  SELECT c.rank, c.step, c.collective_key, c.op, c.bytes, c.group_size,
    greatest(c.launched_ns, coalesce(k.computed_ns, c.launched_ns)) - b.backward_start_ns AS ready_ns
  FROM collectives AS c
  JOIN device_backward AS b USING (rank, step)
  ASOF LEFT JOIN computed_by AS k ON k.rank = c.rank AND c.launched_ns > k.launch_ns
  WHERE c.timeline = 'device' AND c.op IN ('allreduce', 'reducescatter') AND c.launched_ns >= b.backward_cpu_ns
),
cpu_calls AS (
  SELECT e.rank, s.step, collective_op(e.name) AS op, e.ts_ns AS call_ns,
    row_number() OVER (PARTITION BY e.rank, s.step, collective_op(e.name) ORDER BY e.ts_ns) AS position
  FROM trace_events AS e
  ASOF JOIN cpu_steps AS s ON e.rank = s.rank AND e.ts_ns >= s.start_ns
  WHERE e.ph = 'X' AND e.cat = 'cpu_op' AND starts_with(e.name, 'c10d::') AND e.ts_ns < s.end_ns
),
cpu_work AS (
  SELECT rank, step, collective_key, op, bytes, group_size, start_ns,
    row_number() OVER (PARTITION BY rank, step, op ORDER BY start_ns) AS position
  FROM collectives
  WHERE timeline = 'cpu' AND step IS NOT NULL
),
cpu_buckets AS (
  SELECT w.rank, w.step, w.collective_key, w.op, w.bytes, w.group_size,
    coalesce(c.call_ns, w.start_ns) - b.backward_cpu_ns AS ready_ns
  FROM cpu_work AS w
  JOIN backward_start AS b USING (rank, step)
  LEFT JOIN cpu_calls AS c USING (rank, step, op, position)
  WHERE w.op IN ('allreduce', 'reducescatter') AND coalesce(c.call_ns, w.start_ns) >= b.backward_cpu_ns
),
buckets AS (
  SELECT * FROM device_buckets
  UNION ALL
  SELECT * FROM cpu_buckets
)
SELECT rank, step, collective_key, op, bytes, group_size, ready_ns
FROM buckets
WHERE bytes > 0
