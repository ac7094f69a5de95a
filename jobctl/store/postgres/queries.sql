-- Named queries of jobctl's PostgreSQL store, loaded by name (jobctl.store.postgres).
-- Parameters only: nothing is ever formatted into these statements.

-- name: schema_exists
SELECT to_regclass('jobctl_schema') IS NOT NULL;

-- name: schema_version
SELECT version FROM jobctl_schema;

-- name: set_version
UPDATE jobctl_schema SET version = %(version)s;

-- name: first_version
INSERT INTO jobctl_schema (version) VALUES (%(version)s);

-- name: clock
SELECT clock_timestamp();

-- name: load
SELECT data FROM jobctl_jobs WHERE id = %(id)s;

-- name: load_for_update
-- The outer SELECT projects only rows the CTE has locked, so the server's
-- clock is read after the lock is held (as the file store reads it under flock),
-- in the same round trip.
WITH locked AS (SELECT data FROM jobctl_jobs WHERE id = %(id)s FOR UPDATE)
SELECT data, clock_timestamp() FROM locked;

-- name: lock_patience
-- Before load_for_update in a claim that will not wait: a row another
-- transaction holds longer than this fails (lock_not_available) instead.
SELECT set_config('lock_timeout', %(ms)s::text, true);

-- name: read_epoch
SELECT epoch, data FROM jobctl_jobs WHERE id = %(id)s;

-- name: ids
SELECT id FROM jobctl_jobs ORDER BY id;

-- name: list
SELECT id, data FROM jobctl_jobs ORDER BY id;

-- name: list_open
-- Every row's state, and the bytes of the rows not yet ended: one statement,
-- so one snapshot. A finished row never changes state again [JOB-T1]; its
-- state column, derived from its bytes when they were written, stands for it.
SELECT id, state, CASE WHEN state IN ('complete', 'failed', 'cancelled') THEN NULL ELSE data END
FROM jobctl_jobs ORDER BY id;

-- name: scan_after
-- One page of a scan, by id after the last one seen: no cursor (and no lock)
-- is held between pages while the caller prints what it has.
SELECT id, data FROM jobctl_jobs WHERE id > %(after)s ORDER BY id LIMIT %(limit)s;

-- name: orphan_candidates
-- Not terminal, not transferred, not held, not paused unless running [JOB-I11] [JOB-I12] [JOB-T2];
-- the shared is_orphan rule has the last word on each row.
SELECT id, data FROM jobctl_jobs
WHERE state IN ('pending', 'running')
  AND (owner = '' OR expires_at IS NULL OR expires_at <= %(now)s)
  AND (want <> 'pause' OR state = 'running')
ORDER BY id;

-- name: next_runnable
-- The oldest job a worker may claim now: an orphan whose dependencies are all
-- complete, whose not-before time has passed, not paused, of one of the kinds
-- (all kinds when NULL). SKIP LOCKED passes over a row another picker holds.
-- "Now" is %(now)s when the caller has a clock of its own (tests), else the
-- server's, read once in this statement and returned with the row, so a pick
-- needs no round trip of its own to learn the time it is judged by.
WITH clock AS MATERIALIZED (SELECT coalesce(%(now)s::timestamptz, clock_timestamp()) AS now)
SELECT picked.id, picked.data, (SELECT now FROM clock) FROM (
    SELECT j.id, j.data FROM jobctl_jobs j
    WHERE j.state IN ('pending', 'running')
      AND (j.owner = '' OR j.expires_at IS NULL OR j.expires_at <= (SELECT now FROM clock))
      AND j.want <> 'pause'
      AND j.scheduled
      AND NOT (j.id = ANY(%(passed)s::text[]))
      AND (j.not_before IS NULL OR j.not_before <= (SELECT now FROM clock))
      AND (%(kinds)s::text[] IS NULL OR j.kind = ANY(%(kinds)s::text[]))
      AND NOT EXISTS (
          SELECT 1 FROM unnest(j.after) AS dep(id)
          WHERE NOT EXISTS (SELECT 1 FROM jobctl_jobs d WHERE d.id = dep.id AND d.state = 'complete')
      )
    ORDER BY j.created_at, j.id
    LIMIT 1
    FOR UPDATE OF j SKIP LOCKED
) AS picked;

-- name: insert
INSERT INTO jobctl_jobs (id, data, state, kind, epoch, owner, expires_at, want, not_before, after, pipeline,
                         scheduled, created_at)
VALUES (%(id)s, %(data)s, %(state)s, %(kind)s, %(epoch)s, %(owner)s, %(expires_at)s, %(want)s, %(not_before)s,
        %(after)s, %(pipeline)s, %(scheduled)s, %(created_at)s)
ON CONFLICT (id) DO NOTHING;

-- name: update
UPDATE jobctl_jobs
SET data = %(data)s, state = %(state)s, kind = %(kind)s, epoch = %(epoch)s, owner = %(owner)s,
    expires_at = %(expires_at)s, want = %(want)s, not_before = %(not_before)s, after = %(after)s,
    pipeline = %(pipeline)s, scheduled = %(scheduled)s, created_at = %(created_at)s
WHERE id = %(id)s;

-- name: unscheduled
SELECT id, data FROM jobctl_jobs WHERE NOT scheduled AND state IN ('pending', 'running') ORDER BY id;

-- name: replace_data
UPDATE jobctl_jobs SET data = %(data)s WHERE id = %(id)s;

-- name: lock_for_remove
SELECT data FROM jobctl_jobs WHERE id = %(id)s FOR UPDATE;

-- name: remove
DELETE FROM jobctl_jobs WHERE id = %(id)s;

-- name: listen
-- Change notices (schema version 2): the trigger jobctl_jobs_notify sends one
-- per row written or removed, when its transaction commits.
LISTEN jobctl_jobs;

-- name: current_schema
-- Which store's notices are this listener's: the schema its search_path finds first.
SELECT current_schema();

-- name: guardian_lease
-- A guardian's look at the leases it guards (ids: an array), by the primary
-- key: for each, the epoch and the seconds its lease has left by the server's
-- clock (NULL when it has no end). A read only: a guardian never writes.
SELECT id, epoch, extract(epoch FROM expires_at - statement_timestamp())::float8
  FROM jobctl_jobs WHERE id = ANY(%(ids)s);

-- name: notices_sync
-- One round trip on the listening connection: the server sends every notice
-- committed before it first, so a read after a write another process made is
-- never behind it, and a dropped connection shows at once.
SELECT 1;
