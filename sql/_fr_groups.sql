-- _fr_groups: the members of each process group a rank's Flight Recorder names, as the matching needs them.
--
-- An intermediate table (not published) read by `fr_mismatches` and `collective_bw`. To say that
-- a rank never entered a collective, the matching must know who should have: the group's global
-- ranks. They come, in order of preference, from the rank's own dump (fr_process_groups), from
-- another rank's dump that lists a membership holding this rank, from the traces' process groups
-- (process_groups), for the default group from the world (every rank of the run), and last from
-- the ranks whose entries name the group, which cannot see a member that never issued any of
-- its collectives. Split groups can share a name across different members, so a group's key is
-- its recorder, name and members together.
--
-- Grain: one row per rank, recorder and process group that rank's dump names.
-- Empty without: fr_dumps
--
-- Columns:
--   rank INTEGER  Global rank whose dump names the group.
--   recorder VARCHAR  'generic' or 'nccl' (see fr_dumps): each counts its own sequence ids.
--   pg_name VARCHAR  Process group name.
--   pg_desc VARCHAR  Its description (default_pg, or what the program called it).
--   members INTEGER[]  The group's global ranks, ascending.
--   group_size INTEGER  How many there are.
--   members_source VARCHAR  'dump', 'other dump', 'trace', 'world' or 'entries'.
--   group_key VARCHAR  recorder:name:hash of the members, the same on every member's rows.
WITH named AS (
  SELECT rank, recorder, pg_name, any_value(pg_desc) AS pg_desc
  FROM (
    SELECT rank, recorder, pg_name, pg_desc FROM fr_entries
    UNION ALL
    SELECT rank, recorder, pg_name, pg_desc FROM fr_process_groups
  )
  GROUP BY rank, recorder, pg_name
),
listed AS (
  SELECT DISTINCT rank, recorder, pg_name, list_sort(from_json(pg_ranks, '["INTEGER"]')) AS members
  FROM fr_process_groups
  WHERE pg_ranks IS NOT NULL
),
-- Ranks whose own dump does not list the group's members look for them elsewhere.
lacking AS (
  SELECT n.* FROM named AS n ANTI JOIN listed AS l USING (rank, recorder, pg_name)
),
memberships AS (
  SELECT DISTINCT recorder, pg_name, members FROM listed
),
traced AS (
  SELECT DISTINCT pg_name, list_sort(TRY(from_json(pg_ranks, '["INTEGER"]'))) AS members
  FROM process_groups
),
world AS (
  SELECT greatest(
    (SELECT max(world_size) FROM runs),
    (SELECT max(world_size) FROM fr_dumps),
    (SELECT max(rank) + 1 FROM fr_dumps)
  ) AS ranks
),
issuers AS (
  SELECT recorder, pg_name, list(DISTINCT rank ORDER BY rank) AS members FROM fr_entries GROUP BY recorder, pg_name
),
candidates AS (
  SELECT n.rank, n.recorder, n.pg_name, l.members, 1 AS preference, 'dump' AS members_source
  FROM named AS n JOIN listed AS l USING (rank, recorder, pg_name)
  UNION ALL
  SELECT n.rank, n.recorder, n.pg_name, m.members, 2, 'other dump'
  FROM lacking AS n JOIN memberships AS m ON m.recorder = n.recorder AND m.pg_name = n.pg_name AND list_contains(m.members, n.rank)
  UNION ALL
  SELECT n.rank, n.recorder, n.pg_name, t.members, 3, 'trace'
  FROM lacking AS n JOIN traced AS t ON t.pg_name = n.pg_name AND list_contains(t.members, n.rank)
  UNION ALL
  SELECT n.rank, n.recorder, n.pg_name, CAST(range(w.ranks) AS INTEGER[]), 4, 'world'
  FROM lacking AS n, world AS w
  WHERE n.pg_desc = 'default_pg' AND w.ranks IS NOT NULL
  UNION ALL
  SELECT n.rank, n.recorder, n.pg_name, i.members, 5, 'entries'
  FROM lacking AS n JOIN issuers AS i USING (recorder, pg_name)
)
SELECT
  n.rank,
  n.recorder,
  n.pg_name,
  n.pg_desc,
  c.members,
  len(c.members) AS group_size,
  c.members_source,
  n.recorder || ':' || n.pg_name || ':' || hash(c.members) AS group_key
FROM named AS n
JOIN (
  SELECT rank, recorder, pg_name, arg_min(members, preference) AS members, arg_min(members_source, preference) AS members_source
  FROM candidates
  GROUP BY rank, recorder, pg_name
) AS c USING (rank, recorder, pg_name)
