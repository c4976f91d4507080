-- fr_entries: every collective the Flight Recorder kept, on every rank: what, how big, when, and how far it got.
--
-- One row per entry of each rank's dump (fr_dumps): the recorder writes one when a rank issues a
-- collective or point-to-point op, so its entries cover every step, profiled or not, up to the
-- buffer's size. An entry is matched across ranks by its process group and `seq_id` (fr_mismatches).
-- Coalesced collectives (NCCL) are several entries with one `collective_seq_id`, the last named
-- '*coalesced'. `bytes` follows collectives.bytes (nccl-tests' message size S). The recorder's
-- times are the host's: `time_created_ns` when the rank issued it, and the watchdog's discovery of
-- its start and completion, which can be late; `duration_ns` alone is measured, by device events,
-- and only NCCL with TORCH_NCCL_ENABLE_TIMING=1 records it. gloo marks nothing started or
-- completed: its entries stay 'scheduled', and `retired` says when gloo was done with one.
--
-- Grain: one row per run, rank, recorder and entry.
--
-- Columns:
--   run_id VARCHAR  The run.
--   rank INTEGER  Global rank whose recorder kept it.
--   recorder VARCHAR  'generic' (gloo and CPU collectives) or 'nccl'.
--   record_id BIGINT  The entry's number in the rank's recorder, from 0 when the recorder started.
--   pg_id BIGINT  The recorder's id of the process group in this process.
--   pg_name VARCHAR  Process group name (as in process_groups and collectives.pg).
--   pg_desc VARCHAR  Its description (default_pg, or what the program called it).
--   backend VARCHAR  The backend that ran it: gloo, nccl, ...
--   op VARCHAR  The collective by one name per kind, as in collectives: allreduce, allgather,
--       reducescatter, alltoall, broadcast, reduce, send, recv, barrier, ...
--   fr_op VARCHAR  The recorder's own name for it: all_reduce, _allgather_base, coalesced, ...
--   profiling_name VARCHAR  As recorded: '<backend>:<op>[ <peers>]'.
--   is_p2p BOOLEAN  Whether it is a point-to-point send or recv.
--   collective_seq_id BIGINT  The group's count of collectives on this rank when issued.
--   p2p_seq_id BIGINT  The group's count of point-to-point ops on this rank.
--   seq_id BIGINT  p2p_seq_id for point-to-point ops, else collective_seq_id: the number one
--       collective has on every rank of its group.
--   op_id BIGINT  The group's count of every op, parts of coalesced ones included.
--   peers VARCHAR  For send and recv, the group ranks as recorded ('0->1', '1<-0').
--   input_sizes VARCHAR  Shapes of the input tensors, JSON ([[1000]]).
--   input_dtypes VARCHAR  Their element types, JSON (["Float"]).
--   output_sizes VARCHAR  Shapes of the output tensors, JSON.
--   output_dtypes VARCHAR  Their element types, JSON.
--   input_bytes BIGINT  Bytes of the input tensors; NULL when an element type is unknown.
--   output_bytes BIGINT  Bytes of the output tensors.
--   bytes BIGINT  Message size S: the output for allgather and recv, else the input.
--   state VARCHAR  'scheduled', 'started' or 'completed', as the recorder last saw it.
--   retired BOOLEAN  Whether the backend was done with it (completed, failed or timed out) when dumped.
--   time_created_ns BIGINT  When the rank issued it, ns since the Unix epoch.
--   started_ns BIGINT  When the watchdog saw it start; NULL when it never did.
--   completed_ns BIGINT  When the watchdog saw it complete; NULL when it never did.
--   duration_ns BIGINT  Its duration from device events; NULL where the backend does not time it.
--   timeout_ns BIGINT  The process group's timeout for it.
--   thread_id VARCHAR  The thread that issued it, as torch names it.
--   thread_name VARCHAR  That thread's name.
--   frames VARCHAR  The Python stack that issued it, one 'name (file:line)' per line, innermost
--       first; NULL when the dump has none (torch's JSON dumps keep no stacks).
--   file VARCHAR  The dump file.
WITH sized AS (
  SELECT
    *,
    collective_op(fr_op) AS op,
    tensor_bytes(input_sizes, input_dtypes) AS input_bytes,
    tensor_bytes(output_sizes, output_dtypes) AS output_bytes
  FROM _fr_entries_input
)
SELECT
  *,
  CASE WHEN is_p2p THEN p2p_seq_id ELSE collective_seq_id END AS seq_id,
  CASE WHEN op IN ('allgather', 'recv') THEN output_bytes ELSE input_bytes END AS bytes,
  CAST(round(duration_ms * 1e6) AS BIGINT) AS duration_ns,
  timeout_ms * 1000000 AS timeout_ns
FROM sized
