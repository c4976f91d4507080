-- step_comm_groups: which process group's communication each step waited for, and on which link.
--
-- Each step's exposed communication (`step_breakdown.exposed_comm_ns`) is shared out among the
-- process groups communicating when it was exposed. The exposed stretches of `step_timeline` are
-- cut wherever one of the rank's groups starts or stops communicating (a group's collectives are
-- first merged into the spans during which any of them runs); each piece goes in equal parts to
-- the groups communicating throughout it. A piece during which no group's collective runs (a
-- training thread inside a collective call, or waiting for one whose work has not started yet)
-- goes to the group of the next collective to start on the rank, or, when none follows (a thread
-- returning from the step's last collective), to the group of the last one to end before it. The equal parts are counted exactly, in units of 1/L ns with L the least common
-- multiple of 1..k for the most groups k ever communicating at once; each row's total is rounded
-- down to whole ns and the nanoseconds left over go to the groups with the largest remainders, so
-- that the rows of a step add up to its `exposed_comm_ns` exactly (an asset check).
--
-- `dimension` says which parallel dimension a group serves, by the first rule that applies:
--   1. the user's `[dimensions]` in wirespeed.toml, keyed by pg_desc or pg name ('override');
--   2. the group's description, split into words (PyTorch's DeviceMesh names its groups
--      `mesh_<dim>`, torchtitan's dims are dp_shard, dp_replicate, tp, pp, cp, ep, ...; Megatron's
--      TENSOR_MODEL_PARALLEL_GROUP, DATA_PARALLEL_GROUP, EXPERT_MODEL_PARALLEL_GROUP, ...), first
--      match in this order: fsdp (fsdp, shard, zero, efsdp), tp (tp, tensor, etp, tmp), pp (pp,
--      pipeline, pipe), dp (dp, data, replicate, ddp), cp (cp, context, sequence, sp), ep (ep,
--      expert, expt, moe) ('name');
--   3. what the group does over the run ('ops'): any all-to-all: ep; only point-to-point: pp;
--      any all-gather (parameters gathered before use, gradients reduce-scattered or all-reduced
--      after): fsdp; all-reduces issued before the step's backward pass began (`_backward_starts`):
--      tp; other all-reduces: dp; anything else:
--      other. A sequence-parallel tensor-parallel group also all-gathers: such groups are named
--      by the frameworks that make them (rule 2), or by the user (rule 1).
-- Collectives of no known group (a kernel without metadata) form one group of their own, with pg
-- NULL, which also takes the exposure of a rank that has no collective at all.
--
-- Grain: one row per run, rank, step and process group that communicated in the step or had
-- exposed communication attributed to it.
--
-- Columns:
--   run_id VARCHAR  The run.
--   rank INTEGER  Global rank.
--   step BIGINT  Step number.
--   pg VARCHAR  Process group name; NULL for collectives of no known group (and for exposure on a
--       rank without any collective).
--   pg_desc VARCHAR  Process group description.
--   dimension VARCHAR  dp, fsdp, tp, pp, ep, cp or other.
--   dimension_source VARCHAR  'override', 'name' or 'ops': which rule gave the dimension.
--   group_size INTEGER  Ranks in the group.
--   scope VARCHAR  'intra' (within one host), 'inter' (across hosts) or 'unknown': the link its
--       collectives use (see collectives).
--   collectives BIGINT  The group's collective instances that started in the step on this rank.
--   bytes BIGINT  Their message sizes S summed; NULL when none is known.
--   comm_ns BIGINT  Their durations summed (they may overlap one another).
--   exposed_comm_ns BIGINT  The step's exposed communication attributed to the group.
--   busbw_gbps DOUBLE  Bus bandwidth over the instances of known size: 8 * sum(S * factor) /
--       sum(duration), in Gbit/s (see collective_bw for the factor).
WITH instances AS (
  SELECT rank, step, coalesce('pg ' || pg, 'no group') AS group_key, pg, pg_desc, group_size, op, scope, bytes, start_ns, end_ns, dur_ns,
    coalesce(launched_ns, start_ns) AS issued_ns
  FROM collectives
  WHERE end_ns > start_ns
),
group_behaviour AS (
  SELECT
    i.group_key,
    any_value(i.pg) AS pg,
    any_value(i.pg_desc) AS pg_desc,
    bool_or(i.op = 'alltoall') AS all_to_all,
    bool_and(i.op IN ('send', 'recv', 'sendrecv')) AS point_to_point,
    bool_or(i.op = 'allgather') AS gathers,
    bool_or(i.op = 'allreduce') AS all_reduce,
    bool_or(i.op = 'allreduce' AND i.issued_ns < b.backward_cpu_ns) AS reduces_before_backward
  FROM instances AS i
  LEFT JOIN _backward_starts AS b USING (rank, step)
  GROUP BY i.group_key
),
group_words AS (
  SELECT *, regexp_split_to_array(lower(coalesce(pg_desc, '')), '[^a-z0-9]+') AS words FROM group_behaviour
),
overrides AS (
  SELECT
    unnest(CAST(getvariable('dimension_keys') AS VARCHAR[])) AS key,
    unnest(CAST(getvariable('dimension_values') AS VARCHAR[])) AS dimension
),
dimensions AS (
  SELECT
    g.group_key,
    CASE
      WHEN override IS NOT NULL THEN override
      WHEN list_has_any(words, ['fsdp', 'shard', 'zero', 'efsdp']) THEN 'fsdp'
      WHEN list_has_any(words, ['tp', 'tensor', 'etp', 'tmp']) THEN 'tp'
      WHEN list_has_any(words, ['pp', 'pipeline', 'pipe']) THEN 'pp'
      WHEN list_has_any(words, ['dp', 'data', 'replicate', 'ddp']) THEN 'dp'
      WHEN list_has_any(words, ['cp', 'context', 'sequence', 'sp']) THEN 'cp'
      WHEN list_has_any(words, ['ep', 'expert', 'expt', 'moe']) THEN 'ep'
      WHEN all_to_all THEN 'ep'
      WHEN point_to_point THEN 'pp'
      WHEN gathers THEN 'fsdp'
      WHEN reduces_before_backward THEN 'tp'
      WHEN all_reduce THEN 'dp'
      ELSE 'other'
    END AS dimension,
    CASE
      WHEN override IS NOT NULL THEN 'override'
      WHEN list_has_any(words, ['fsdp', 'shard', 'zero', 'efsdp', 'tp', 'tensor', 'etp', 'tmp', 'pp', 'pipeline', 'pipe',
        'dp', 'data', 'replicate', 'ddp', 'cp', 'context', 'sequence', 'sp', 'ep', 'expert', 'expt', 'moe']) THEN 'name'
      ELSE 'ops'
    END AS dimension_source
  FROM (
    SELECT g.*, coalesce(by_desc.dimension, by_name.dimension) AS override
    FROM group_words AS g
    LEFT JOIN overrides AS by_desc ON by_desc.key = g.pg_desc
    LEFT JOIN overrides AS by_name ON by_name.key = g.pg
  ) AS g
),
group_spans AS (
  -- A group's collectives merged into maximal spans: a new span starts where an instance starts
  -- after every earlier instance of the group has ended.
  SELECT rank, group_key, min(start_ns) AS start_ns, max(end_ns) AS end_ns
  FROM (
    SELECT rank, group_key, start_ns, end_ns,
      sum(CASE WHEN start_ns > prior_end_ns THEN 1 ELSE 0 END) OVER (PARTITION BY rank, group_key ORDER BY start_ns, end_ns) AS span
    FROM (
      SELECT rank, group_key, start_ns, end_ns,
        coalesce(max(end_ns) OVER (PARTITION BY rank, group_key ORDER BY start_ns, end_ns ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), start_ns - 1) AS prior_end_ns
      FROM instances
    )
  )
  GROUP BY rank, group_key, span
),
exposed AS (
  SELECT rank, step, start_ns, end_ns FROM step_timeline WHERE state = 'exposed_comm' AND step IS NOT NULL
),
cuts AS (
  SELECT DISTINCT rank, t FROM (
    SELECT rank, start_ns AS t FROM exposed UNION ALL SELECT rank, end_ns FROM exposed
    UNION ALL SELECT rank, start_ns FROM group_spans UNION ALL SELECT rank, end_ns FROM group_spans
  )
),
pieces AS (
  SELECT p.rank, e.step, p.start_ns, p.end_ns
  FROM (SELECT rank, t AS start_ns, lead(t) OVER (PARTITION BY rank ORDER BY t) AS end_ns FROM cuts) AS p
  ASOF JOIN exposed AS e ON e.rank = p.rank AND p.start_ns >= e.start_ns
  WHERE p.end_ns IS NOT NULL AND p.end_ns <= e.end_ns
),
rank_groups AS (
  SELECT DISTINCT rank, group_key FROM group_spans
),
active AS (
  -- Each piece against each of the rank's groups: the group is active when its latest span to
  -- start at or before the piece is still running.
  SELECT p.rank, p.step, p.start_ns, p.end_ns, g.group_key
  FROM (SELECT p.*, r.group_key FROM pieces AS p JOIN rank_groups AS r USING (rank)) AS p
  ASOF JOIN group_spans AS g ON g.rank = p.rank AND g.group_key = p.group_key AND g.start_ns <= p.start_ns
  WHERE g.end_ns > p.start_ns
),
idle_pieces AS (
  SELECT p.*
  FROM pieces AS p
  ANTI JOIN active AS a ON a.rank = p.rank AND a.start_ns = p.start_ns
),
claimed AS (
  SELECT rank, step, start_ns, end_ns, group_key, count(*) OVER (PARTITION BY rank, start_ns) AS sharing FROM active
  UNION ALL
  SELECT p.rank, p.step, p.start_ns, p.end_ns, coalesce(g.group_key, e.group_key, 'no group') AS group_key, 1 AS sharing
  FROM idle_pieces AS p
  ASOF LEFT JOIN group_spans AS g ON g.rank = p.rank AND g.start_ns >= p.end_ns
  ASOF LEFT JOIN (SELECT rank, group_key, end_ns FROM group_spans) AS e ON e.rank = p.rank AND e.end_ns <= p.start_ns
),
scale AS (
  SELECT CAST(list_reduce(range(1, coalesce(max(sharing), 1) + 1), lambda a, b: lcm(a, b)) AS HUGEINT) AS units_per_ns FROM claimed
),
scaled AS (
  SELECT c.rank, c.step, c.group_key, sum(CAST(c.end_ns - c.start_ns AS HUGEINT) * s.units_per_ns // c.sharing) AS units, any_value(s.units_per_ns) AS units_per_ns
  FROM claimed AS c, scale AS s
  GROUP BY c.rank, c.step, c.group_key
),
rounded AS (
  SELECT *,
    CAST(units // units_per_ns AS BIGINT) AS floor_ns,
    sum(units) OVER step_rows // units_per_ns - sum(units // units_per_ns) OVER step_rows AS left_over_ns,
    row_number() OVER (PARTITION BY rank, step ORDER BY units % units_per_ns DESC, group_key) AS remainder_rank
  FROM scaled
  WINDOW step_rows AS (PARTITION BY rank, step)
),
attributed AS (
  SELECT rank, step, group_key, floor_ns + CASE WHEN remainder_rank <= left_over_ns THEN 1 ELSE 0 END AS exposed_comm_ns
  FROM rounded
),
per_step AS (
  SELECT
    rank, step, group_key,
    count(*) AS collectives,
    sum(bytes) AS bytes,
    sum(dur_ns) AS comm_ns,
    8.0 * sum(bytes * busbw_factor(op, group_size)) / sum(dur_ns) FILTER (WHERE bytes * busbw_factor(op, group_size) IS NOT NULL) AS busbw_gbps
  FROM instances
  WHERE step IS NOT NULL
  GROUP BY rank, step, group_key
),
rows AS (
  SELECT
    coalesce(s.rank, a.rank) AS rank,
    coalesce(s.step, a.step) AS step,
    coalesce(s.group_key, a.group_key) AS group_key,
    s.collectives, s.bytes, s.comm_ns, s.busbw_gbps,
    a.exposed_comm_ns
  FROM per_step AS s
  FULL JOIN attributed AS a ON a.rank = s.rank AND a.step = s.step AND a.group_key = s.group_key
),
group_facts AS (
  SELECT rank, group_key, any_value(pg) AS pg, any_value(pg_desc) AS pg_desc, max(group_size) AS group_size, mode(scope) AS scope
  FROM instances
  GROUP BY rank, group_key
)
SELECT
  getvariable('run_id') AS run_id,
  r.rank,
  r.step,
  f.pg,
  f.pg_desc,
  coalesce(d.dimension, 'other') AS dimension,
  coalesce(d.dimension_source, 'ops') AS dimension_source,
  f.group_size,
  coalesce(f.scope, 'unknown') AS scope,
  coalesce(r.collectives, 0) AS collectives,
  r.bytes,
  coalesce(r.comm_ns, 0) AS comm_ns,
  coalesce(r.exposed_comm_ns, 0) AS exposed_comm_ns,
  r.busbw_gbps
FROM rows AS r
LEFT JOIN group_facts AS f ON f.rank = r.rank AND f.group_key = r.group_key
LEFT JOIN dimensions AS d ON d.group_key = r.group_key
ORDER BY r.rank, r.step, f.pg
