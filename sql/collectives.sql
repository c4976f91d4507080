-- collectives: every collective instance each rank took part in, with its size and timing.
--
-- On the device timeline an instance is a communication kernel (NCCL, RCCL, a library family of
-- pipelines/read/comm_kernels.py such as DeepEP, or a user pattern). Its metadata comes, in order of
-- preference, from the kernel's own args (PyTorch 2.4+ copies them there), from the
-- `record_param_comms` CPU op with the same `external_id` (older traces), and last from the
-- kernel's name (`ncclKernel_AllReduce_...`, `deep_ep::intranode::dispatch` say the op, not the
-- size). The name's family and op are looked up once per distinct kernel name (`comm_kernel_match`).
-- A kernel without metadata has no size: `bytes` stays NULL, so no bandwidth is computed from
-- it (collective_bw), and `size_unknown_reason` says why. On the
-- CPU timeline an instance is a `gloo:*` annotation on gloo's worker thread: the op comes from its
-- name, the size from its recorded input shapes. gloo annotations name no group: each worker
-- thread's group, and a send's or receive's group and peer, are read from the trace's threads,
-- the peers its `c10d` calls name and which ranks' instances end together (`_gloo_groups`,
-- pipelines/analysis/gloo_groups.py); a rank whose trace lists no groups keeps its default group. `bytes`
-- is the message size S of the nccl-tests convention, from which bus bandwidth follows: the input
-- for allreduce, reducescatter, alltoall, broadcast, reduce and send; the whole output for
-- allgather and recv. `seq` is the trace's `Seq` where it has one,
-- else the instance's position among the rank's collectives of the same group (or stream).
-- A kernel's duration includes waiting for the other ranks.
--
-- `collective_key` matches one collective's instances across ranks, in order of preference: the
-- trace's `Comms Id` (the same hash on every rank), the process group and the trace's `Seq`, and
-- otherwise the process group, step and position in the step: the k-th collective of a group in
-- step s on one rank is the k-th on every other (ProfilerStep numbers agree across ranks, so ranks
-- whose profiling windows start at different moments still match; a step annotation's instances
-- are numbered from each rank's first, so those match where every trace starts at the same
-- instance). Sends and receives are counted
-- per pair of ranks and direction, so that the pairs of one group (stage 0's ranks each sending to
-- their peer in stage 1) are matched apart, and the k-th send from a rank to its peer is the k-th
-- receive of the peer from it: a 1F1B schedule sends the next activation while the gradient of an
-- earlier one comes back, and counted together, sends matched sends.
--
-- Where the run has NCCL logs, each instance is tied to its NCCL communicator: the one created on
-- the same host and process with as many ranks as the group (the k-th group of a size in the trace
-- takes the k-th communicator of that size). The communicator's connection lines then say whether
-- the collective crosses hosts (any link over NET) and over which transports. Without them the
-- scope comes from the hosts of the group's ranks (all on one host: intra; several: inter; some
-- unknown: unknown), and a send's or receive's from its own and its peer's hosts.
--
-- Grain: one row per run, rank and collective instance.
--
-- Columns:
--   run_id VARCHAR  The run.
--   rank INTEGER  Global rank.
--   step BIGINT  Step whose window the instance starts in; NULL outside every step.
--   op VARCHAR  allreduce, allgather, reducescatter, alltoall, broadcast, reduce, send, recv,
--       sendrecv, barrier, ...; NULL when nothing says (a generic kernel without metadata).
--   pg VARCHAR  Process group name; NULL when unknown.
--   pg_desc VARCHAR  Process group description (default_pg, ...).
--   group_size INTEGER  Ranks in the process group.
--   peer INTEGER  A send's or receive's other rank, where the trace shows it (gloo); NULL otherwise.
--   seq BIGINT  Sequence number of the instance within its process group on this rank.
--   seq_source VARCHAR  'trace' when `seq` is the trace's own, 'order' when counted here.
--   comms_id UBIGINT  The trace's cross-rank id of the collective, where it has one.
--   dtype VARCHAR  Element type.
--   in_nelems BIGINT  Elements in the input.
--   out_nelems BIGINT  Elements in the output.
--   bytes BIGINT  Message size S in bytes (nccl-tests convention); NULL when unknown.
--   launched_ns BIGINT  When the kernel was launched (its runtime call, joined by correlation);
--       NULL on the CPU timeline.
--   start_ns BIGINT  Start, ns since the Unix epoch.
--   end_ns BIGINT  End.
--   dur_ns BIGINT  Duration in ns, waiting for peers included.
--   kernel VARCHAR  The kernel's or annotation's name.
--   stream BIGINT  GPU stream (device timeline).
--   timeline VARCHAR  'device' or 'cpu'.
--   metadata_source VARCHAR  'kernel', 'record_param_comms', 'kernel name' or 'gloo annotation'.
--   kernel_family VARCHAR  What recognised it as communication: the library family its name
--       matches (nccl, rccl, msccl, mscclpp, deepep, pplx, mori, trtllm, flashinfer,
--       custom_allreduce, symm_mem, userbuffers, nvshmem; see pipelines/read/comm_kernels.py), else
--       'metadata' (its collective metadata alone), 'gloo' (a gloo annotation) or 'user pattern'
--       (a pattern of wirespeed.toml).
--   size_unknown_reason VARCHAR  Why bytes is NULL; NULL when bytes is known.
--   match_method VARCHAR  How instances are matched across ranks: 'comms_id', 'pg_seq' or
--       'pg_step_order'.
--   comm_id VARCHAR  The NCCL communicator it ran on (see nccl_comms), where the logs say.
--   scope VARCHAR  'intra' (within one host), 'inter' (across hosts) or 'unknown'.
--   scope_source VARCHAR  'nccl connections', 'hosts' or 'unknown'.
--   transport VARCHAR  The transports of its communicator's links (e.g. 'NET/IBext_v8, P2P'),
--       where the NCCL logs say.
--   nics VARCHAR  The NICs its communicator's network links left this rank's process by (NCCL's
--       indices, as `via NET/IB/<nic>` names them), comma-separated; NULL where the logs do not
--       say. A host's ranks on NICs of their own (rail-optimised) do not share a network link.
--   collective_key VARCHAR  The same on every rank's instance of one collective (see collective_sync).
WITH timelines AS (
  SELECT DISTINCT rank, timeline FROM _activity
),
default_groups AS (
  SELECT rank, any_value(pg_name) AS pg_name
  FROM process_groups
  WHERE pg_desc = 'default_pg'
  GROUP BY rank
),
rank_groups AS (
  SELECT rank, pg_name, any_value(pg_desc) AS pg_desc, any_value(pg_size) AS pg_size
  FROM process_groups
  GROUP BY rank, pg_name
),
cpu_metadata AS (
  SELECT rank, file_index, external_id,
    any_value(collective) AS collective, any_value(in_nelems) AS in_nelems, any_value(out_nelems) AS out_nelems,
    any_value(group_size) AS group_size, any_value(dtype) AS dtype, any_value(pg_name) AS pg_name,
    any_value(pg_desc) AS pg_desc, any_value(seq) AS seq, any_value(comms_id) AS comms_id
  FROM trace_events
  WHERE name = 'record_param_comms' AND external_id IS NOT NULL
  GROUP BY ALL
),
kernel_metadata AS (
  -- The kernels' own metadata (`_device_events` leaves it here), by what identifies a kernel:
  -- its trace file, stream, start and External id.
  SELECT file_index, stream, ts_ns AS start_ns, external_id,
    any_value(collective) AS collective, any_value(in_nelems) AS in_nelems, any_value(out_nelems) AS out_nelems,
    any_value(group_size) AS group_size, any_value(dtype) AS dtype, any_value(pg_name) AS pg_name,
    any_value(pg_desc) AS pg_desc, any_value(seq) AS seq, any_value(comms_id) AS comms_id
  FROM trace_events
  WHERE collective IS NOT NULL AND ph = 'X' AND is_device_event(cat) AND is_valid_interval(ts_ns, dur_ns)
  GROUP BY ALL
),
kernel_names AS (
  SELECT name, match.family AS family, coalesce(match.op, collective_op(kernel_collective(name))) AS op
  FROM (
    SELECT name, comm_kernel_match(name) AS match
    FROM (SELECT DISTINCT name FROM _device_events WHERE is_comm)
  )
),
device_instances AS (
  SELECT
    d.rank,
    coalesce(collective_op(coalesce(km.collective, m.collective)), k.op) AS op,
    coalesce(km.pg_name, m.pg_name) AS pg,
    coalesce(km.pg_desc, m.pg_desc) AS pg_desc,
    coalesce(km.group_size, m.group_size) AS group_size,
    coalesce(km.seq, m.seq) AS trace_seq,
    coalesce(km.comms_id, m.comms_id) AS comms_id,
    coalesce(km.dtype, m.dtype) AS dtype,
    coalesce(km.in_nelems, m.in_nelems) AS in_nelems,
    coalesce(km.out_nelems, m.out_nelems) AS out_nelems,
    d.launched_ns,
    d.start_ns,
    d.end_ns,
    d.name AS kernel,
    d.stream,
    'device' AS timeline,
    CASE
      WHEN km.collective IS NOT NULL THEN 'kernel'
      WHEN m.collective IS NOT NULL THEN 'record_param_comms'
      ELSE 'kernel name'
    END AS metadata_source,
    coalesce(k.family, CASE WHEN km.collective IS NOT NULL THEN 'metadata' ELSE 'user pattern' END) AS kernel_family,
    CAST(NULL AS INTEGER) AS peer
  FROM _device_events AS d
  LEFT JOIN kernel_metadata AS km
    ON km.file_index = d.file_index AND km.start_ns = d.start_ns AND km.stream IS NOT DISTINCT FROM d.stream
      AND km.external_id IS NOT DISTINCT FROM d.external_id
  LEFT JOIN cpu_metadata AS m ON m.rank = d.rank AND m.file_index = d.file_index AND m.external_id = d.external_id
  LEFT JOIN kernel_names AS k ON k.name = d.name
  WHERE d.is_comm
),
cpu_instances AS (
  SELECT
    e.rank,
    collective_op(e.name) AS op,
    g.pg_name AS pg,
    g.pg_desc,
    g.pg_size AS group_size,
    CAST(NULL AS BIGINT) AS trace_seq,
    CAST(NULL AS UBIGINT) AS comms_id,
    json_extract_string(e.input_types, '$[0]') AS dtype,
    dims_elements(e.input_dims) AS in_nelems,
    CASE
      WHEN collective_op(e.name) = 'allgather' THEN dims_elements(e.input_dims) * g.pg_size
      WHEN collective_op(e.name) = 'reducescatter' THEN dims_elements(e.input_dims) // g.pg_size
      ELSE dims_elements(e.input_dims)
    END AS out_nelems,
    CAST(NULL AS BIGINT) AS launched_ns,
    e.ts_ns AS start_ns,
    e.ts_ns + e.dur_ns AS end_ns,
    e.name AS kernel,
    CAST(NULL AS BIGINT) AS stream,
    'cpu' AS timeline,
    'gloo annotation' AS metadata_source,
    'gloo' AS kernel_family,
    a.peer
  FROM trace_events AS e
  JOIN timelines AS t ON t.rank = e.rank AND t.timeline = 'cpu'
  LEFT JOIN _gloo_groups AS a ON a.rank = e.rank AND a.tid = e.tid AND a.start_ns = e.ts_ns
  LEFT JOIN default_groups AS d ON d.rank = e.rank
  LEFT JOIN rank_groups AS g ON g.rank = e.rank AND g.pg_name = coalesce(a.pg_name, d.pg_name)
  WHERE e.ph = 'X' AND e.cat = 'user_annotation' AND e.name LIKE 'gloo:%'
    AND is_valid_interval(e.ts_ns, e.dur_ns)
),
instances AS (
  SELECT * FROM device_instances
  UNION ALL
  SELECT * FROM cpu_instances
),
windows AS (
  SELECT rank, step, window_start_ns, window_end_ns FROM steps WHERE window_start_ns IS NOT NULL
),
with_step AS (
  SELECT i.*, CASE WHEN i.start_ns < w.window_end_ns THEN w.step END AS step
  FROM instances AS i
  ASOF LEFT JOIN windows AS w ON i.rank = w.rank AND i.start_ns >= w.window_start_ns
),
rank_processes AS (
  SELECT DISTINCT rank, split_part(host, '.', 1) AS host, pid FROM ranks
),
groups_in_order AS (
  SELECT rank, pg_name, pg_size,
    row_number() OVER (PARTITION BY rank, pg_size ORDER BY TRY_CAST(pg_name AS BIGINT) NULLS LAST, pg_name) - 1 AS k
  FROM (SELECT DISTINCT rank, pg_name, pg_size FROM process_groups)
),
comms_in_order AS (
  SELECT split_part(host, '.', 1) AS host, pid, nranks, comm_id,
    row_number() OVER (PARTITION BY host, pid, nranks ORDER BY line) - 1 AS k
  FROM nccl_comms
),
comm_links AS (
  SELECT
    comm_id,
    bool_or(transport = 'NET') AS crosses_hosts,
    string_agg(DISTINCT CASE WHEN transport = 'NET' THEN regexp_extract(detail, '^NET/[^/]+') ELSE transport END, ', '
      ORDER BY CASE WHEN transport = 'NET' THEN regexp_extract(detail, '^NET/[^/]+') ELSE transport END) AS transport
  FROM nccl_connections
  WHERE comm_id IS NOT NULL
  GROUP BY comm_id
),
comm_nics AS (
  -- The NICs each process's links of a communicator went through (`via NET/<plugin>/<nic>/...`).
  SELECT comm_id, host, pid,
    string_agg(DISTINCT split_part(detail, '/', 3), ',' ORDER BY split_part(detail, '/', 3)) AS nics
  FROM nccl_connections
  WHERE comm_id IS NOT NULL AND transport = 'NET' AND split_part(detail, '/', 3) <> ''
  GROUP BY ALL
),
members AS (
  SELECT pg_name, unnest(members) AS member
  FROM (
    SELECT pg_name, any_value(TRY(from_json(pg_ranks, '["INTEGER"]'))) AS members
    FROM process_groups
    GROUP BY pg_name
  )
),
host_scope AS (
  SELECT
    m.pg_name,
    CASE
      WHEN count(h.host) < count(*) THEN 'unknown'
      WHEN count(DISTINCT h.host) = 1 THEN 'intra'
      ELSE 'inter'
    END AS scope
  FROM members AS m
  LEFT JOIN rank_processes AS h ON h.rank = m.member
  GROUP BY m.pg_name
),
with_comm AS (
  SELECT
    w.*,
    c.comm_id,
    l.crosses_hosts,
    l.transport,
    x.nics,
    CASE WHEN w.peer IS NULL THEN h.scope WHEN p.host = q.host THEN 'intra' WHEN q.host IS NULL THEN 'unknown' ELSE 'inter' END
      AS host_scope
  FROM with_step AS w
  LEFT JOIN rank_processes AS p ON p.rank = w.rank
  LEFT JOIN rank_processes AS q ON q.rank = w.peer
  LEFT JOIN groups_in_order AS g ON g.rank = w.rank AND g.pg_name = w.pg
  LEFT JOIN comms_in_order AS c
    ON c.host = p.host AND c.pid = p.pid AND c.nranks = w.group_size AND c.k = coalesce(g.k, 0)
  LEFT JOIN comm_links AS l ON l.comm_id = c.comm_id
  LEFT JOIN comm_nics AS x ON x.comm_id = c.comm_id AND x.host = p.host AND x.pid = p.pid
  LEFT JOIN host_scope AS h ON h.pg_name = w.pg
),
keyed AS (
  SELECT
    *,
    CASE
      WHEN op IN ('allgather', 'recv') THEN out_nelems * dtype_bytes(dtype)
      ELSE in_nelems * dtype_bytes(dtype)
    END AS bytes,
    coalesce(trace_seq, row_number() OVER (PARTITION BY rank, coalesce(pg, CAST(stream AS VARCHAR)) ORDER BY start_ns) - 1) AS seq,
    row_number() OVER (PARTITION BY rank, group_key, step ORDER BY start_ns) AS position_in_step
  FROM (
    SELECT *,
      coalesce('pg ' || pg, 'stream ' || stream, 'unknown group')
        || CASE  -- a peer is known only for a send or a receive
             WHEN peer IS NULL THEN ''
             WHEN op = 'send' THEN ' pair ' || rank || '>' || peer
             ELSE ' pair ' || peer || '>' || rank
           END AS group_key
    FROM with_comm
  )
)
SELECT
  getvariable('run_id') AS run_id,
  rank,
  step,
  op,
  pg,
  pg_desc,
  group_size,
  peer,
  seq,
  CASE WHEN trace_seq IS NOT NULL THEN 'trace' ELSE 'order' END AS seq_source,
  comms_id,
  dtype,
  in_nelems,
  out_nelems,
  bytes,
  launched_ns,
  start_ns,
  end_ns,
  end_ns - start_ns AS dur_ns,
  kernel,
  stream,
  timeline,
  metadata_source,
  kernel_family,
  CASE
    WHEN bytes IS NOT NULL THEN NULL
    WHEN metadata_source = 'kernel name' THEN 'no collective metadata: the name of a ' || kernel_family || ' kernel does not say its size'
    WHEN coalesce(in_nelems, out_nelems) IS NULL THEN 'its metadata gives no element count (profile with record_shapes=True)'
    ELSE 'its element type ' || coalesce(dtype, '(none)') || ' has no known size'
  END AS size_unknown_reason,
  CASE WHEN comms_id IS NOT NULL THEN 'comms_id' WHEN trace_seq IS NOT NULL THEN 'pg_seq' ELSE 'pg_step_order' END AS match_method,
  CASE
    WHEN comms_id IS NOT NULL THEN 'comms_id ' || comms_id
    WHEN trace_seq IS NOT NULL THEN group_key || ' seq ' || trace_seq
    ELSE group_key || ' step ' || coalesce(CAST(step AS VARCHAR), '-') || ' #' || position_in_step
  END AS collective_key,
  comm_id,
  CASE
    WHEN crosses_hosts THEN 'inter'
    WHEN crosses_hosts = false THEN 'intra'
    ELSE coalesce(host_scope, 'unknown')
  END AS scope,
  CASE WHEN crosses_hosts IS NOT NULL THEN 'nccl connections' WHEN host_scope IS NOT NULL THEN 'hosts' ELSE 'unknown' END AS scope_source,
  transport,
  nics
FROM keyed
ORDER BY rank, start_ns
