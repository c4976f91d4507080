-- _bucket_readiness: each step's gradient all-reduces, with when each was ready during backward.
--
-- An intermediate table (not published) that holds what `gradient_buckets` reads from the device
-- and CPU timelines, so that it can be built while `_device_events` is still in memory and that
-- table can leave before the sweep (see `gradient_buckets` for the method: where backward begins,
-- when a bucket is ready, on each timeline); backward's start on the CPU is `_backward_starts`.
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
WITH step_time_buckets AS (
  SELECT rank, step, start_ns, lookup_end_ns, unnest(span_buckets(start_ns, lookup_end_ns, bucket_ns)) AS time_bucket
  FROM _step_spans
  WHERE lookup_end_ns > start_ns
),
bucket_width AS (
  -- The steps' lookup buckets, and those of the launch lookups below: a 64th of them.
  SELECT any_value(bucket_ns) AS bucket_ns, any_value(bucket_ns) // 64 + 1 AS launch_bucket_ns FROM _step_spans
),
cpu_ops AS (
  -- The CPU operators this table needs, each with the step whose span holds its start.
  SELECT e.rank, s.step, e.name, e.ts_ns
  FROM (
    SELECT e.rank, e.name, e.ts_ns, e.ts_ns // w.bucket_ns AS time_bucket
    FROM trace_events AS e, bucket_width AS w
    WHERE e.ph = 'X' AND e.cat = 'cpu_op'
      AND starts_with(e.name, 'c10d::')
  ) AS e
  JOIN step_time_buckets AS s
    ON s.rank = e.rank AND s.time_bucket = e.time_bucket AND e.ts_ns >= s.start_ns AND e.ts_ns < s.lookup_end_ns
),
launched_device_events AS (
  SELECT rank, launched_ns AS launch_ns, start_ns, end_ns, NOT is_comm AND NOT is_memory AS is_compute
  FROM _device_events
  WHERE launched_ns IS NOT NULL
),
compute_launches AS (
  -- Compute kernels by launch, in buckets of a 64th of a step: the latest end launched before a
  -- collective is the latest end of the buckets before its own (a running max over few rows) and
  -- of its own bucket's earlier launches, with no sort of every kernel.
  SELECT d.rank, d.launch_ns, d.end_ns, d.launch_ns // w.launch_bucket_ns AS time_bucket
  FROM launched_device_events AS d, bucket_width AS w
  WHERE d.is_compute
),
ended_through AS (
  SELECT rank, time_bucket, max(max(end_ns)) OVER (PARTITION BY rank ORDER BY time_bucket ROWS UNBOUNDED PRECEDING) AS end_ns
  FROM compute_launches
  GROUP BY rank, time_bucket
),
reduce_launches AS (
  SELECT DISTINCT c.rank, c.launched_ns, c.launched_ns // w.launch_bucket_ns AS time_bucket
  FROM collectives AS c, bucket_width AS w
  WHERE c.timeline = 'device' AND c.op IN ('allreduce', 'reducescatter') AND c.launched_ns IS NOT NULL
),
computed_by AS (
  -- For each launch of a gradient collective: the latest end of any compute kernel launched before it.
  SELECT rank, launched_ns, max(end_ns) AS computed_ns
  FROM (
    SELECT r.rank, r.launched_ns, e.end_ns
    FROM reduce_launches AS r
    ASOF JOIN ended_through AS e ON e.rank = r.rank AND r.time_bucket > e.time_bucket
    UNION ALL
    SELECT r.rank, r.launched_ns, k.end_ns
    FROM reduce_launches AS r
    JOIN compute_launches AS k ON k.rank = r.rank AND k.time_bucket = r.time_bucket AND k.launch_ns < r.launched_ns
  )
  GROUP BY rank, launched_ns
),
launch_starts AS (
  -- The earliest start among the device events launched in each bucket of a 64th of a step.
  SELECT d.rank, d.launch_ns // w.launch_bucket_ns AS time_bucket, min(d.start_ns) AS start_ns
  FROM launched_device_events AS d, bucket_width AS w
  GROUP BY ALL
),
backward_spans AS (
  -- From backward's start on the CPU to the end of the step's span, and the buckets it touches.
  SELECT b.rank, b.step, b.backward_cpu_ns, greatest(s.start_ns, b.backward_cpu_ns) AS from_ns, s.lookup_end_ns AS to_ns,
    greatest(s.start_ns, b.backward_cpu_ns) // w.launch_bucket_ns AS first_bucket,
    (s.lookup_end_ns - 1) // w.launch_bucket_ns AS last_bucket
  FROM _backward_starts AS b
  JOIN _step_spans AS s USING (rank, step), bucket_width AS w
  WHERE s.lookup_end_ns > greatest(s.start_ns, b.backward_cpu_ns)
),
device_backward AS (
  -- The first device event launched between backward's start on the CPU and the step's end: the
  -- earliest start of the buckets wholly inside (a rank's spans do not overlap, so a bucket lies
  -- wholly inside the latest span to start before it, or none), and of each event launched inside
  -- in the two at its ends (ten million device events: the table in 2.5-2.8 s, against 3.2-4.4 s
  -- joining every event to its step).
  SELECT rank, step, backward_cpu_ns, min(start_ns) AS backward_start_ns
  FROM (
    SELECT p.rank, p.step, p.backward_cpu_ns, l.start_ns
    FROM launch_starts AS l
    ASOF JOIN backward_spans AS p ON p.rank = l.rank AND l.time_bucket > p.first_bucket
    WHERE l.time_bucket < p.last_bucket
    UNION ALL
    SELECT p.rank, p.step, p.backward_cpu_ns, d.start_ns
    FROM (SELECT *, unnest(list_distinct([first_bucket, last_bucket])) AS time_bucket FROM backward_spans) AS p
    JOIN (SELECT d.rank, d.launch_ns, d.start_ns, d.launch_ns // w.launch_bucket_ns AS time_bucket
          FROM launched_device_events AS d, bucket_width AS w) AS d
      ON d.rank = p.rank AND d.time_bucket = p.time_bucket AND d.launch_ns >= p.from_ns AND d.launch_ns < p.to_ns
  )
  GROUP BY ALL
),
device_buckets AS (
  SELECT c.rank, c.step, c.collective_key, c.op, c.bytes, c.group_size,
    greatest(c.launched_ns, coalesce(k.computed_ns, c.launched_ns)) - b.backward_start_ns AS ready_ns
  FROM collectives AS c
  JOIN device_backward AS b USING (rank, step)
  LEFT JOIN computed_by AS k ON k.rank = c.rank AND k.launched_ns = c.launched_ns
  WHERE c.timeline = 'device' AND c.op IN ('allreduce', 'reducescatter') AND c.launched_ns >= b.backward_cpu_ns
),
cpu_calls AS (
  SELECT rank, step, collective_op(name) AS op, ts_ns AS call_ns,
    row_number() OVER (PARTITION BY rank, step, collective_op(name) ORDER BY ts_ns) AS position
  FROM cpu_ops
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
  JOIN _backward_starts AS b USING (rank, step)
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
