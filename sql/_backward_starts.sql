-- _backward_starts: where each step's backward pass began on the CPU.
--
-- An intermediate table (not published): the start of the step's first autograd operator
-- (`autograd::engine::evaluate_function: ...`), found in the step whose lookup span holds it (see
-- `_step_spans`). `_bucket_readiness` times gradient buckets from it; `step_comm_groups` tells
-- a tensor-parallel all-reduce (issued before it) from a data-parallel one.
--
-- Grain: one row per run, rank and step with an autograd operator.
--
-- Columns:
--   rank INTEGER  Global rank.
--   step BIGINT  Step number.
--   backward_cpu_ns BIGINT  Start of the step's first autograd operator, ns since the Unix epoch.
WITH step_time_buckets AS (
  SELECT rank, step, start_ns, lookup_end_ns, unnest(span_buckets(start_ns, lookup_end_ns, bucket_ns)) AS time_bucket
  FROM _step_spans
  WHERE lookup_end_ns > start_ns
),
autograd_ops AS (
  SELECT e.rank, e.ts_ns, e.ts_ns // w.bucket_ns AS time_bucket
  FROM trace_events AS e, (SELECT any_value(bucket_ns) AS bucket_ns FROM _step_spans) AS w
  WHERE e.ph = 'X' AND e.cat = 'cpu_op' AND starts_with(e.name, 'autograd::engine::evaluate_function:')
)
SELECT s.rank, s.step, min(a.ts_ns) AS backward_cpu_ns
FROM autograd_ops AS a
JOIN step_time_buckets AS s
  ON s.rank = a.rank AND s.time_bucket = a.time_bucket AND a.ts_ns >= s.start_ns AND a.ts_ns < s.lookup_end_ns
GROUP BY s.rank, s.step
