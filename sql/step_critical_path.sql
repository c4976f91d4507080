-- step_critical_path: what each step's critical path on each rank is made of.
--
-- The critical path of a step on a rank is the longest chain of dependencies the trace records
-- that ends on that rank in that step (`pipelines/analysis/critical_path.py`): HTA's graph on each rank
-- (operators in order on each CPU thread, each launch and its kernel, kernels in order on each
-- stream, a stream waiting for another stream's recorded event, a CPU call blocked until the kernel
-- or event it waits for ends), and the step's collectives across its ranks: a rank's instance waits
-- from its arrival until the last rank arrives (`collective_sync`), then transfers until it ends,
-- so where a rank waited for a later one whose own chain was the longer, the path runs through
-- that rank. On a CPU timeline (gloo) an instance follows the `c10d::` call that issued it (or the
-- rank's collective before it, where that ended later), and a thread between operators when it
-- ended was waiting for it. Each edge on the path is sorted into a part:
--   'compute'        an operator's or a kernel's own time (not communication);
--   'communication'  a collective's transfer, from its last rank's arrival to its end, with its
--                    group's dimension and link (on whichever rank the path passes it);
--   'waiting for another rank'  a rank's wait for a later one, and the time the path spends on
--                    another rank's chain outside its transfers;
--   'launch and cpu overhead'  a runtime call's time on the CPU, a launch's delay before its
--                    kernel started on an idle stream, a gloo instance's pickup after its call, and
--                    on a CPU timeline the training loop's own time between top-level operators;
--   'idle'           a gap between two kernels of a stream.
-- `hta_bound` is the category HTA's `summary()` gives the same time: cpu_bound (CPU operators,
-- runtime calls, gloo's collectives), gpu_compute_bound, gpu_communication_bound (kernels whose
-- names hold "nccl"), gpu_kernel_launch_overhead (launch delays), gpu_kernel_kernel_overhead
-- (gaps). The rows of a step on a rank add up to its critical path's length, which on a device
-- timeline leaves out a CPU thread's idle time between top-level operators and a blocking call's
-- wait beyond what it waited for, as HTA's does. A device trace without `cuda_sync` events
-- (`torch.profiler._ExperimentalConfig(enable_cuda_sync_events=True)`) records no waits between
-- streams nor for the device: its path runs through them unseen, and `sync_recorded` says so. A
-- run of more than 200 000 events of the kinds the graph reads has the path of one step per rank,
-- its median-length step (as HTA finds one step's at a time), for as many ranks in order as keep
-- those steps within 200 000 events: `critical_path.MAX_EVENTS_ALL_STEPS`.
--
-- Grain: one row per run, rank, step, part, dimension, scope and hta_bound on the step's path.
--
-- Columns:
--   run_id VARCHAR  The run.
--   rank INTEGER  Global rank.
--   step BIGINT  Step number.
--   part VARCHAR  'compute', 'communication', 'waiting for another rank', 'launch and cpu
--       overhead' or 'idle'.
--   dimension VARCHAR  For communication, its group's parallel dimension (see step_comm_groups).
--   scope VARCHAR  For communication, its link: 'intra', 'inter' or 'unknown'.
--   hta_bound VARCHAR  HTA's category of the same time.
--   path_ns BIGINT  Time on the critical path.
--   edges BIGINT  Edges of the path in this row.
--   sync_recorded BOOLEAN  Whether the rank's trace has `cuda_sync` events; NULL on a CPU-only trace.
WITH dimensions AS (
  SELECT DISTINCT pg, dimension FROM step_comm_groups WHERE pg IS NOT NULL
),
synced AS (
  SELECT DISTINCT rank FROM trace_events WHERE cat = 'cuda_sync'
),
device_ranks AS (
  SELECT DISTINCT rank FROM steps WHERE timeline = 'device'
),
attributed AS (
  SELECT e.*, c.pg, c.scope
  FROM _critical_path_edges AS e
  LEFT JOIN collectives AS c ON c.rank = e.event_rank AND c.collective_key = e.collective_key
),
parted AS (
  SELECT
    a.rank, a.step, a.weight_ns,
    CASE
      WHEN a.edge = 'transfer' THEN 'communication'
      WHEN a.event_rank <> a.rank OR a.edge = 'waiting' THEN 'waiting for another rank'
      WHEN a.edge = 'kernel gap' THEN 'idle'
      WHEN a.edge IN ('launch', 'issue', 'between operators') OR a.event_cat IN ('cuda_runtime', 'cuda_driver')
        THEN 'launch and cpu overhead'
      ELSE 'compute'
    END AS part,
    CASE WHEN a.edge = 'transfer' THEN coalesce(d.dimension, 'other') END AS dimension,
    CASE WHEN a.edge = 'transfer' THEN a.scope END AS scope,
    CASE
      WHEN a.edge = 'kernel gap' THEN 'gpu_kernel_kernel_overhead'
      WHEN a.edge = 'launch' THEN 'gpu_kernel_launch_overhead'
      WHEN NOT coalesce(a.on_device, false) THEN 'cpu_bound'
      WHEN contains(lower(a.event_name), 'nccl') THEN 'gpu_communication_bound'
      ELSE 'gpu_compute_bound'
    END AS hta_bound
  FROM attributed AS a
  LEFT JOIN dimensions AS d ON d.pg = a.pg
  WHERE a.edge <> 'dependency'
)
SELECT
  getvariable('run_id') AS run_id,
  p.rank, p.step, p.part, p.dimension, p.scope, p.hta_bound,
  CAST(sum(p.weight_ns) AS BIGINT) AS path_ns,
  count(*) AS edges,
  CASE WHEN p.rank IN (SELECT rank FROM device_ranks) THEN p.rank IN (SELECT rank FROM synced) END AS sync_recorded
FROM parted AS p
GROUP BY ALL
ORDER BY p.rank, p.step, path_ns DESC
