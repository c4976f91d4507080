-- trace_events: every event of every rank's profiler trace, normalised.
--
-- The raw material of every other table. Each trace file is read as it was written; nothing is
-- dropped but the flow arrows (`ph` "s"/"f"), whose link is already in `correlation`. Times are
-- moved onto the absolute clock: Kineto since PyTorch 2.4 writes microseconds relative to
-- `baseTimeNanoseconds`, older traces absolute microseconds; both become integer nanoseconds
-- since the Unix epoch (read as DECIMAL, or as DOUBLE where every value is small enough for a
-- double to hold its nanoseconds: pipelines/read/kineto/fields.py). Collective metadata is kept where
-- the trace has it: on the NCCL kernel itself (PyTorch 2.4+) or only on the `record_param_comms`
-- CPU op (older traces; join on `external_id`).
--
-- Grain: one row per run, rank, trace file and trace event.
--
-- Columns:
--   run_id VARCHAR  The run.
--   rank INTEGER  Global rank of the process that wrote the trace.
--   file_index INTEGER  Which of the run's trace files the event came from (see `ranks`).
--   ph VARCHAR  Chrome trace phase: X complete, i instant, M metadata, C counter.
--   cat VARCHAR  Kineto category: cpu_op, user_annotation, kernel, gpu_memcpy, cuda_runtime, ...
--   name VARCHAR  Event name (operator, kernel, annotation such as ProfilerStep#4).
--   pid VARCHAR  Process id; for GPU events the device index. Text, since traces use strings too.
--   tid VARCHAR  Thread id; for GPU events the stream.
--   ts_ns BIGINT  Start, in nanoseconds since the Unix epoch.
--   dur_ns BIGINT  Duration in nanoseconds; NULL for events without one.
--   external_id BIGINT  `External id`: links a CPU op, its runtime calls and its kernels.
--   correlation BIGINT  `correlation`: links a runtime launch to the kernel it launched.
--   device INTEGER  GPU index of a device event.
--   stream BIGINT  GPU stream of a device event.
--   collective VARCHAR  `Collective name` as PyTorch wrote it (allreduce, _allgather_base, ...).
--   in_nelems BIGINT  `In msg nelems`: elements in the collective's input.
--   out_nelems BIGINT  `Out msg nelems`: elements in its output.
--   group_size INTEGER  `Group size`: ranks in the process group.
--   dtype VARCHAR  Element type as PyTorch names it (Float, BFloat16, ...).
--   pg_name VARCHAR  `Process Group Name`.
--   pg_desc VARCHAR  `Process Group Description` (default_pg, ...).
--   pg_ranks VARCHAR  `Process Group Ranks`, as written (may be truncated for large groups).
--   seq BIGINT  `Seq`: the collective's sequence number in its process group.
--   comms_id UBIGINT  `Comms Id`: the same on every rank taking part in one collective.
--   in_split_sizes VARCHAR  `In split size` of all-to-all-v, as written.
--   out_split_sizes VARCHAR  `Out split size`, as written.
--   src_rank INTEGER  `Src Rank` of a point-to-point receive; for a `c10d::recv_` operator, the
--       source it names (its third concrete input), a rank of its process group.
--   dst_rank INTEGER  `Dst Rank` of a point-to-point send; for `c10d::send`, the destination it
--       names, a rank of its process group.
--   wait_on_stream BIGINT  A `cuda_sync` event's `wait_on_stream`: the stream whose recorded event
--       it waits for (-1 when none).
--   wait_on_correlation BIGINT  A `cuda_sync` event's `wait_on_cuda_event_record_corr_id`: the
--       correlation of the `cudaEventRecord` call that recorded that event (-1 when none).
--   input_dims VARCHAR  `Input Dims` (JSON list of shapes) when shapes were recorded.
--   input_types VARCHAR  `Input type` (JSON list of element types).
--   label VARCHAR  For metadata events: the process or thread name (`args.name`/`args.labels`).
SELECT
  getvariable('run_id') AS run_id,
  getvariable('rank') AS rank,
  getvariable('file_index') AS file_index,
  ph,
  cat,
  name,
  pid,
  tid,
  -- Doubles (times_as_double): whole microseconds and their fraction apart, each exact, so the
  -- nanoseconds are too; a decimal is exact as it is.
  CASE WHEN getvariable('times_as_double')
    THEN TRY_CAST(getvariable('base_ns')::HUGEINT + TRY_CAST(floor(ts) * 1000 + round((ts - floor(ts)) * 1000) AS BIGINT) AS BIGINT)
    ELSE TRY_CAST(getvariable('base_ns') + ts * 1000 AS BIGINT)
  END AS ts_ns,
  CASE WHEN getvariable('times_as_double')
    THEN TRY_CAST(floor(dur) * 1000 + round((dur - floor(dur)) * 1000) AS BIGINT)
    ELSE TRY_CAST(dur * 1000 AS BIGINT)
  END AS dur_ns,
  TRY_CAST(args."External id" AS BIGINT) AS external_id,
  TRY_CAST(args.correlation AS BIGINT) AS correlation,
  TRY_CAST(args.device AS INTEGER) AS device,
  TRY_CAST(args.stream AS BIGINT) AS stream,
  args."Collective name" AS collective,
  TRY_CAST(args."In msg nelems" AS BIGINT) AS in_nelems,
  TRY_CAST(args."Out msg nelems" AS BIGINT) AS out_nelems,
  TRY_CAST(args."Group size" AS INTEGER) AS group_size,
  args.dtype AS dtype,
  args."Process Group Name" AS pg_name,
  args."Process Group Description" AS pg_desc,
  args."Process Group Ranks" AS pg_ranks,
  TRY_CAST(args.Seq AS BIGINT) AS seq,
  TRY_CAST(args."Comms Id" AS UBIGINT) AS comms_id,
  args."In split size" AS in_split_sizes,
  args."Out split size" AS out_split_sizes,
  coalesce(TRY_CAST(args."Src Rank" AS INTEGER),
    CASE WHEN name = 'c10d::recv_' THEN TRY_CAST(json_extract_string(args."Concrete Inputs", '$[2]') AS INTEGER) END) AS src_rank,
  coalesce(TRY_CAST(args."Dst Rank" AS INTEGER),
    CASE WHEN name = 'c10d::send' THEN TRY_CAST(json_extract_string(args."Concrete Inputs", '$[2]') AS INTEGER) END) AS dst_rank,
  TRY_CAST(args.wait_on_stream AS BIGINT) AS wait_on_stream,
  TRY_CAST(args.wait_on_cuda_event_record_corr_id AS BIGINT) AS wait_on_correlation,
  args."Input Dims" AS input_dims,
  args."Input type" AS input_types,
  CASE WHEN ph = 'M' THEN coalesce(args.name, args.labels) END AS label
FROM read_json(
  getvariable('chunk_files'),
  format := getvariable('json_format'),
  columns := getvariable('event_columns')
)
WHERE ph IS NULL OR ph NOT IN ('s', 'f')
