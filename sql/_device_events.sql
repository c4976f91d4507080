-- _device_events: every usable device event (kernel, copy, fill) of the run, with its launch and class.
--
-- An intermediate table (not published) that reads `trace_events` once for what every analysis of
-- the device timeline needs, so no later query scans the raw events again. A device event's launch
-- is the runtime call with the same `correlation` in the same trace file (the earliest, should
-- there be several; a file is one rank's, so the file and the correlation identify it); it is
-- NULL when the trace has none. An event is communication if it carries collective metadata or
-- its name matches a communication pattern, memory if it is a copy, fill or DMA. The patterns are
-- tested once per distinct name, not once per event: a run repeats a few thousand kernel names
-- millions of times. Only communication keeps its name: later queries need no other, and the
-- names of millions of compute kernels would be most of the table's memory. So the distinct names
-- come from a pass of their own over `trace_events` (0.2 s over 72 million events: it reads
-- little more than the name column), and the events are classified as they are read. For the
-- same reason a kernel's collective metadata stays in `trace_events`, where `collectives` reads
-- it for the few kernels that have it: nine columns, NULL on nearly every row, had made this
-- table twice as wide, and its building 40 % slower.
--
-- A rank's rows come from its own files alone, so a large run builds it a piece of its ranks at a
-- time (`piece_first_rank` to `piece_last_rank`, see pipelines/analysis/tables.py): one piece's
-- joins fit in memory, where the whole run's spill to disk.
--
-- Grain: one row per run, rank and device event with a usable interval.
--
-- Columns:
--   rank INTEGER  Global rank.
--   file_index INTEGER  Trace file the event came from.
--   name VARCHAR  Kernel name, of communication events only.
--   start_ns BIGINT  Start, ns since the Unix epoch.
--   end_ns BIGINT  End.
--   launched_ns BIGINT  When its runtime call launched it; NULL when the trace has no such call.
--   external_id BIGINT  Links it to the CPU operator that launched it.
--   stream BIGINT  GPU stream.
--   is_comm BOOLEAN  Communication: collective metadata or a communication name.
--   is_memory BOOLEAN  A copy, fill or DMA.
WITH names AS (
  SELECT name, is_comm_name(name) AS comm_name, is_memory_name(name) AS memory_name
  FROM (SELECT DISTINCT name FROM trace_events WHERE ph = 'X' AND is_device_event(cat) AND in_piece(rank))
),
device AS MATERIALIZED (
  SELECT
    e.rank, e.file_index, e.ts_ns, e.dur_ns, e.correlation, e.external_id, e.stream,
    e.collective IS NOT NULL OR coalesce(n.comm_name, false) AS is_comm,
    is_memory_category(e.cat) OR coalesce(n.memory_name, false) AS is_memory,
    CASE WHEN is_comm THEN e.name END AS name
  FROM trace_events AS e
  LEFT JOIN names AS n ON n.name = e.name
  WHERE e.ph = 'X' AND is_device_event(e.cat) AND is_valid_interval(e.ts_ns, e.dur_ns) AND in_piece(e.rank)
),
launches AS (
  -- Only the runtime calls that launched a device event: most are not launches at all.
  SELECT file_index, correlation, min(ts_ns) AS launched_ns
  FROM trace_events
  WHERE cat IN ('cuda_runtime', 'cuda_driver', 'Runtime', 'Driver') AND correlation IS NOT NULL AND in_piece(rank)
    AND (file_index, correlation) IN (SELECT file_index, correlation FROM device)
  GROUP BY ALL
)
SELECT
  d.rank,
  d.file_index,
  d.name,
  d.ts_ns AS start_ns,
  d.ts_ns + d.dur_ns AS end_ns,
  l.launched_ns,
  d.external_id,
  d.stream,
  d.is_comm,
  d.is_memory
FROM device AS d
LEFT JOIN launches AS l ON l.file_index = d.file_index AND l.correlation = d.correlation
