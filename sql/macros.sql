-- Macros shared by the table files. Each session's in-memory database defines them once, for
-- every connection to it (pipelines/warehouse/sql.py `session`); what they read is each session's variables.

-- Whether a trace event ran on a GPU stream: kernels, copies and fills. Kineto's categories, plus
-- the names traces from 2021 and earlier used.
CREATE OR REPLACE MACRO is_device_event(cat) AS
  cat IN ('kernel', 'gpu_memcpy', 'gpu_memset', 'Kernel', 'Memcpy', 'Memset');

-- Whether a device event moves memory rather than computing: a copy or a fill by its category,
-- a DMA (or a copy a tool filed as a kernel) by its name.
CREATE OR REPLACE MACRO is_memory_category(cat) AS
  cat IN ('gpu_memcpy', 'gpu_memset', 'Memcpy', 'Memset');
CREATE OR REPLACE MACRO is_memory_name(name) AS
  regexp_matches(name, '^(Memcpy|Memset|dma)');

-- Whether an event's name is that of communication. An event is communication when it carries
-- collective metadata or its name says so. The patterns (built-in plus the user's, from
-- wirespeed.toml) arrive in the `comm_pattern` variable. Test names once each (SELECT DISTINCT):
-- a regular expression per event is the slowest part of a query over millions of events.
CREATE OR REPLACE MACRO is_comm_name(name) AS
  regexp_matches(name, getvariable('comm_pattern'));

-- The first built-in rule a communication kernel's name matches: the library family it comes
-- from and the op its name says, as a struct (family, pattern, op); NULL when no rule matches (a
-- user's pattern from wirespeed.toml, or a kernel recognised by its metadata alone). The rules come
-- from pipelines/read/comm_kernels.py, in order in `comm_kernel_rules` and as one expression with a
-- named group per rule in `comm_kernel_regex`, which finds the first matching rule in one pass:
-- the position of the one group that captured text is the rule's. Call it on distinct names.
CREATE OR REPLACE MACRO comm_kernel_match(name) AS
  getvariable('comm_kernel_rules')[list_position(
    list_transform(
      json_extract_string(to_json(regexp_extract(name, getvariable('comm_kernel_regex'), getvariable('comm_kernel_groups'))), '$.*'),
      lambda captured: captured <> ''),
    true)];

-- The buckets, `bucket_ns` wide, that the span [start_ns, end_ns) touches: how an instant finds
-- its step by hash join rather than ASOF join (see `_step_spans`).
CREATE OR REPLACE MACRO span_buckets(start_ns, end_ns, bucket_ns) AS
  range(start_ns // bucket_ns, (end_ns - 1) // bucket_ns + 1);

-- Whether a rank is in the piece of the run being built: a large run builds some tables a few of
-- its ranks at a time (`piece_first_rank` to `piece_last_rank`, pipelines/analysis/tables.py);
-- with them unset, every rank is. Constants to the scan, so it skips the other ranks' row groups.
CREATE OR REPLACE MACRO in_piece(rank) AS
  rank BETWEEN coalesce(getvariable('piece_first_rank'), -2147483648) AND coalesce(getvariable('piece_last_rank'), 2147483647);

-- Whether an event is a usable interval: timed, positive and not a counter overflow.
CREATE OR REPLACE MACRO is_valid_interval(ts_ns, dur_ns) AS
  ts_ns IS NOT NULL AND dur_ns > 0 AND dur_ns <= getvariable('max_dur_ns');

-- Whether an event is an instance of the annotation chosen as the step (`step_annotation`, from
-- `wirespeed ingest --step-annotation` or wirespeed.toml [steps]; NULL: none chosen, and then no
-- event is). As HTA's critical path analysis finds an annotation's instances, the name need only
-- hold that text, case and all. Only usable spans on the CPU count: not kernels, nor the copy of
-- a user annotation that the profiler draws on the GPU's timeline, so each instance counts once.
CREATE OR REPLACE MACRO is_step_instance(ph, cat, name, ts_ns, dur_ns) AS
  getvariable('step_annotation') IS NOT NULL AND ph = 'X' AND contains(name, getvariable('step_annotation'))
  AND cat <> 'gpu_user_annotation' AND NOT is_device_event(cat) AND is_valid_interval(ts_ns, dur_ns);

-- One name per collective, whatever spelling PyTorch, NCCL or gloo used:
-- `allreduce`, `_allgather_base`, `ncclDevKernel_AllGather_...`, `gloo:all_reduce`,
-- `reduce_scatter_tensor_coalesced` all become allreduce, allgather, reducescatter, ...
-- Letters only are compared; longer names are tested before their prefixes.
CREATE OR REPLACE MACRO collective_op(raw) AS (
  WITH letters AS (SELECT regexp_replace(lower(regexp_replace(raw, '^(gloo|nccl|c10d):+', '')), '[^a-z]', '', 'g') AS s)
  SELECT CASE
    WHEN raw IS NULL THEN NULL
    WHEN s LIKE 'allreduce%' THEN 'allreduce'
    WHEN s LIKE 'allgather%' THEN 'allgather'
    WHEN s LIKE 'reducescatter%' THEN 'reducescatter'
    WHEN s LIKE 'alltoall%' THEN 'alltoall'
    WHEN s LIKE 'broadcast%' THEN 'broadcast'
    WHEN s LIKE 'sendrecv%' THEN 'sendrecv'
    WHEN s LIKE 'send%' THEN 'send'
    WHEN s LIKE 'recv%' THEN 'recv'
    WHEN s LIKE 'reduce%' THEN 'reduce'
    WHEN s LIKE 'gather%' THEN 'gather'
    WHEN s LIKE 'scatter%' THEN 'scatter'
    WHEN s LIKE 'barrier%' THEN 'barrier'
    WHEN s = '' THEN NULL
    ELSE s
  END FROM letters
);

-- The collective named in an NCCL or RCCL kernel's name (`ncclKernel_AllReduce_RING_LL_Sum_float`,
-- `ncclDevKernel_ReduceScatter_Sum_f32_RING_LL`, NCCL 2.27's symmetric
-- `ncclSymkDevKernel_AllReduce_RSxLD_AGxST_sum_f32`); NULL for generic kernels.
CREATE OR REPLACE MACRO kernel_collective(name) AS
  nullif(nullif(regexp_extract(name, '^(?:nccl|rccl)[A-Za-z]*Kernel_([A-Za-z]+)', 1), 'Generic'), '');

-- Bytes per element of a PyTorch (`Float`, `BFloat16`), NumPy-style (`float32`) or kernel-name
-- (`f32`, `bf16`) element type.
CREATE OR REPLACE MACRO dtype_bytes(dtype) AS (
  CASE
    WHEN dtype IS NULL THEN NULL
    WHEN lower(dtype) IN ('double', 'float64', 'f64', 'long', 'int64', 'uint64', 'complexfloat', 'complex64') THEN 8
    WHEN lower(dtype) IN ('float', 'float32', 'f32', 'fp32', 'int', 'int32', 'uint32', 'i32') THEN 4
    WHEN lower(dtype) IN ('half', 'float16', 'f16', 'fp16', 'bfloat16', 'bf16', 'short', 'int16', 'uint16') THEN 2
    WHEN lower(dtype) IN ('byte', 'char', 'bool', 'int8', 'uint8', 'i8', 'u8') OR lower(dtype) LIKE 'float8%' OR lower(dtype) LIKE 'fp8%' THEN 1
    WHEN lower(dtype) = 'complexdouble' THEN 16
  END
);

-- Elements in a profiler `Input Dims` value: the sum over its tensors of the product of their
-- dimensions (`[[64, 32], [32]]` holds 2080). Scalars count as one element.
CREATE OR REPLACE MACRO dims_elements(input_dims) AS
  CAST(list_sum(list_transform(
    TRY(from_json(input_dims, '[["BIGINT"]]')),
    lambda dims: coalesce(list_product(dims), 1)
  )) AS BIGINT);

-- Bytes of a list of tensors from their shapes and element types as the Flight Recorder writes
-- them (JSON: `[[3, 1000], [5]]` and `["Float", "Half"]`). A shape of no dimension is a scalar (one
-- element), no tensor at all is 0 bytes, and an unknown element type makes the whole NULL.
CREATE OR REPLACE MACRO tensor_bytes(sizes, dtypes) AS (
  WITH tensors AS (
    SELECT list_zip(TRY(from_json(sizes, '[["BIGINT"]]')), TRY(from_json(dtypes, '["VARCHAR"]'))) AS t
  )
  SELECT CASE
    WHEN len(t) = 0 THEN 0
    WHEN list_bool_or(list_transform(t, lambda x: dtype_bytes(x[2]) IS NULL)) THEN NULL
    ELSE CAST(list_sum(list_transform(t, lambda x: coalesce(list_product(x[1]), 1) * dtype_bytes(x[2]))) AS BIGINT)
  END FROM tensors
);

-- nccl-tests' bus-bandwidth factor: what each rank sends, as a multiple of the message size S, in
-- the ring algorithm. Bus bandwidth (algorithm bandwidth times this) is comparable with the link's
-- line rate whatever the number of ranks n.
CREATE OR REPLACE MACRO busbw_factor(op, n) AS (
  CASE
    WHEN n IS NULL OR n < 1 THEN NULL
    WHEN op = 'allreduce' THEN 2.0 * (n - 1) / n
    WHEN op IN ('allgather', 'reducescatter', 'alltoall') THEN (n - 1) / n
    WHEN op IN ('broadcast', 'reduce', 'send', 'recv', 'sendrecv') THEN 1.0
  END
);

-- A rooted collective: its root only sends (broadcast, scatter) or only receives (reduce,
-- gather), so some of its ranks only send and may return once their data is buffered.
CREATE OR REPLACE MACRO is_rooted(op) AS op IN ('broadcast', 'scatter', 'reduce', 'gather');

-- Which way of a full-duplex link an op's bytes take: a send out of its rank's host, a receive
-- into it, any other op both ('out', 'in', 'both'). A pipeline's activations going one way and
-- its gradients the other share no way of the link (_host_traffic, whatif_inputs).
CREATE OR REPLACE MACRO link_way(op) AS CASE op WHEN 'send' THEN 'out' WHEN 'recv' THEN 'in' ELSE 'both' END;

-- The one-way links a `link_way` holds.
CREATE OR REPLACE MACRO link_ways(way) AS CASE way WHEN 'both' THEN ['out', 'in'] ELSE [way] END;

-- P(Z > z) for a standard normal Z: Abramowitz and Stegun 26.2.17, absolute error below 7.5e-8.
CREATE OR REPLACE MACRO normal_tail(t, x) AS
  exp(-x * x / 2) / sqrt(2 * pi())
    * t * (0.319381530 + t * (-0.356563782 + t * (1.781477937 + t * (-1.821255978 + t * 1.330274429))));
CREATE OR REPLACE MACRO normal_sf(z) AS
  CASE WHEN z >= 0 THEN normal_tail(1 / (1 + 0.2316419 * z), z) ELSE 1 - normal_tail(1 / (1 - 0.2316419 * z), -z) END;

-- Ranks in words, for verdicts: `rank 2`, `ranks 0, 1, 3`, and runs of three or more as ranges:
-- `ranks 0-6, 8-255`. A run starts where a rank does not follow the one before, and ends where
-- the next does not follow it.
CREATE OR REPLACE MACRO ranks_text(ranks) AS (
  WITH sorted AS (SELECT list_sort(ranks) AS r),
  runs AS (
    SELECT r,
      list_filter(r, lambda x, i: i = 1 OR x <> r[i - 1] + 1) AS starts,
      list_filter(r, lambda x, i: i = len(r) OR r[i + 1] <> x + 1) AS ends
    FROM sorted
  )
  SELECT CASE WHEN len(r) = 1 THEN 'rank ' ELSE 'ranks ' END || array_to_string(list_transform(list_zip(starts, ends),
    lambda run: CASE run[2] - run[1] WHEN 0 THEN CAST(run[1] AS VARCHAR) WHEN 1 THEN run[1] || ', ' || run[2]
                ELSE run[1] || '-' || run[2] END), ', ')
  FROM runs
);

-- Why a utilisation measured above 1 is not believed (the tables report 1 with this note): no
-- link carries more than its line rate, so either the measure's clocks disagree (`clocks` says how
-- they enter it) or the rate given is too low.
CREATE OR REPLACE MACRO over_line_rate(measured, link_gbps, clocks) AS
  printf('measured at %.0f%% of the %g Gbit/s line rate, which no link carries: ', 100 * measured, link_gbps)
  || clocks || ', or the line rate given is lower than the link''s (check --link-gbps)';

-- How clocks can make a network series (net_utilization.source) read above its line rate.
CREATE OR REPLACE MACRO series_clocks(source) AS
  CASE source
    WHEN 'collectives' THEN 'the collectives'' transfers are timed from the traces, where a send and its '
      || 'receive on two hosts are timed by two clocks, so clock skew shortens them'
    ELSE 'a sample is timed when it was stamped, not when its counters were read, so a late reading crowds one window'
  END;

-- A process group in words: its description (`default_pg`, `tp`), else its name.
CREATE OR REPLACE MACRO group_text(pg_desc, pg_name) AS
  CASE WHEN coalesce(pg_desc, '') IN ('', 'undefined') THEN 'process group ' || pg_name ELSE pg_desc END;

-- The innermost `n` frames of a stack written one `name (path:line)` per line, on one line, with
-- the files' folders left out: `train (job.py:50) ← _wrap (spawn.py:87)`.
CREATE OR REPLACE MACRO stack_brief(stack, n) AS
  array_to_string(list_transform(string_split(stack, chr(10))[1:n], lambda f: regexp_replace(f, '\([^()]*/', '(')), ' ← ');


-- A host's CPUs are saturated from this share of their time busy: what a collective took beyond its
-- bits at the line rate is then the CPU's, which a faster link does not shorten (whatif_inputs).
-- Below it, the CPUs had time to spare and that part is the protocol's. At 0.9, a DDP run at
-- 200 Mbit/s whose machine other work kept 90-97 % busy kept 11 % of its transfers as the CPU's,
-- and its step at 1 Gbit/s came out 61 % long; the fsdp x tp runs the rule is for were 100 % busy.
CREATE OR REPLACE MACRO cpu_saturated_share() AS 0.97;


-- The least part of the line rate a protocol reaches where the host reaches more (whatif_inputs):
-- an op whose transfers carried less than this share of the most the host's link carried for any
-- op was bound by its latency, not by its protocol's rate, and what it lost stays the host's.
CREATE OR REPLACE MACRO protocol_least_efficiency() AS 0.5;


-- Exposed stretches closer than this are one wait (whatif_inputs): a thread may resume just
-- before the collective it waited for closes its annotation, and wait again.
CREATE OR REPLACE MACRO resume_gap_ns() AS 1000000;


-- How long after a rank resumed from a wait the annotation of what it waited for may still close
-- (whatif_inputs): gloo's worker thread wakes the rank, then waits for a CPU to close it. On two
-- cores with four ranks it closed 0.04 to 4.9 ms late; counted as ending while the rank was busy,
-- a 110 ms wait went to no collective and stayed at every rate, putting a 200 Mbit/s run's step
-- at 1 Gbit/s +59 %.
CREATE OR REPLACE MACRO annotation_lag_ns() AS 5000000;
