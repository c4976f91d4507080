-- gradient_buckets: the gradient all-reduces of each step, with when each bucket was ready during backward.
--
-- The what-if model's input, read from the run's own trace. Backward begins, on the CPU, with the
-- step's first `autograd::engine::evaluate_function` operator; gradient buckets are the step's
-- allreduce and reducescatter collectives issued after that moment (so forward-pass broadcasts
-- and explicit metric all-reduces before backward do not count).
-- On the device timeline, backward begins with the first device event launched after it began on
-- the CPU, and a bucket is ready at the later of (a) its kernel's launch and (b) the end of the last
-- compute kernel launched before it: the GPU cannot reduce a gradient before computing it, and the
-- kernel's own start is not used because it is delayed by the collectives queued before it, which
-- is exactly what the model simulates. On the CPU timeline (gloo) a bucket is ready when its
-- `c10d::` call was made (DDP calls it from the gradient hook), paired by order with gloo's work
-- annotations, which carry the sizes. The end of backward is the last bucket's ready time. The
-- step time without communication is the measured step minus its exposed communication.
-- The buckets and their ready times are found in `_bucket_readiness`; this table orders them and
-- adds the step's times.
--
-- Grain: one row per run, rank, step and gradient bucket.
--
-- Columns:
--   run_id VARCHAR  The run.
--   rank INTEGER  Global rank.
--   step BIGINT  Step number.
--   bucket BIGINT  Position of the bucket in ready order, from 1.
--   collective_key VARCHAR  The collective that reduced it (see collectives).
--   op VARCHAR  allreduce or reducescatter.
--   bytes BIGINT  Bucket size S (the collective's message size).
--   ready_ns BIGINT  When the bucket was ready, ns after backward began (r_j).
--   backward_ns BIGINT  Length of backward: the last bucket's ready time (T_bk).
--   compute_ns BIGINT  Step time without communication: step_ns - exposed_comm_ns (t_1).
--   step_ns BIGINT  The measured step (see step_breakdown).
--   ranks INTEGER  Ranks taking part in the buckets' collectives (N).
WITH ordered AS (
  SELECT
    *,
    row_number() OVER (PARTITION BY rank, step ORDER BY ready_ns, collective_key) AS bucket,
    max(greatest(ready_ns, 0)) OVER (PARTITION BY rank, step) AS backward_ns,
    max(group_size) OVER (PARTITION BY rank, step) AS ranks
  FROM _bucket_readiness
)
SELECT
  getvariable('run_id') AS run_id,
  o.rank,
  o.step,
  o.bucket,
  o.collective_key,
  o.op,
  o.bytes,
  greatest(o.ready_ns, 0) AS ready_ns,
  o.backward_ns,
  b.step_ns - b.exposed_comm_ns AS compute_ns,
  b.step_ns,
  o.ranks
FROM ordered AS o
JOIN step_breakdown AS b USING (rank, step)
ORDER BY o.rank, o.step, o.bucket
