-- Named queries of jobctl's PostgreSQL store, loaded by name (jobctl.store.postgres).
-- Parameters only: nothing is ever formatted into these statements.
--
-- A record is a row of jobctl_jobs (migrate-3.sql). Queries that hand records
-- back select or return `j.*`: the record's columns come first, in the order
-- jobctl.store.postgres.row reads them.
--
-- Each step of the contract is one statement. Its WHERE clause states the
-- step's preconditions (DIGEST §5, in jobctl.store.contract) and its SET the
-- step's effect; a statement that changes no row was refused, and the store
-- then judges the row with the contract's Python rules, which name the
-- refusal. Every UPDATE raises the row's revision, keeps `unfinished` true
-- to the state where it may change it, and sends the row's change notice
-- last in its RETURNING list (migrate-5.sql says why not a trigger; the
-- trigger does it for an UPDATE that does not raise the revision): the
-- store reads a row's answer without that last column. A claim hands back
-- the record's columns and the revision (the row's head: `j.*` without the
-- scheduling columns at its end); the other steps hand back the revision
-- and the columns they set, which the store lays over the row it holds at
-- the revision before (or reads it in the same round trip when it holds
-- none).
-- `now` is %(now)s when the store was given a clock of its own (tests), else
-- statement_timestamp(): the server's clock as the statement
-- starts, one instant for every judgement and every time the statement writes
-- [JOB-O4]. %(understood)s is the critical models this reader knows: a row
-- that names another must not be touched [JOB-D7].

-- name: schema_exists
SELECT to_regclass('jobctl_schema') IS NOT NULL;

-- name: schema_version
-- Every row, as text: a store's table holds one whole number, and anything
-- else an administrator left there is refused by name (schema.schema_status).
SELECT version::text FROM jobctl_schema LIMIT 3;

-- name: set_version
UPDATE jobctl_schema SET version = %(version)s;

-- name: first_version
INSERT INTO jobctl_schema (version) VALUES (%(version)s);

-- name: encoding
SELECT current_setting('server_encoding');

-- name: session
-- Every connection of a store, once, in one round trip:
-- - times are read and written in UTC: psycopg hands timestamptz values back
--   in the session's zone, and the record's times are UTC [JOB-E5];
-- - the session never sorts (session.py says why): no statement of the store
--   needs the server to sort what it reads;
-- - a statement waits %(ms)s ms at most for a row another transaction holds
--   before it fails (lock_not_available); session.py runs it again for a
--   caller that waits without end;
-- - no statement is compiled with JIT: each reads a few rows, and compiling
--   costs tens of milliseconds, which the planner pays whenever its estimate
--   passes jit_above_cost -- as a generic plan's does on a large table, and
--   any plan that would sort (enable_sort = off prices a sort past it).
SELECT set_config('TimeZone', 'UTC', false), set_config('enable_sort', 'off', false),
    set_config('lock_timeout', %(ms)s::text, false), set_config('jit', 'off', false);

-- name: clock
SELECT clock_timestamp();

-- name: load
SELECT j.* FROM jobctl_jobs j WHERE j.id = %(id)s;

-- name: lock_record
-- The row, locked for the rest of the transaction, and the server's clock read
-- after the lock is held (as the file store reads its clock under flock): the
-- outer SELECT projects only the row the CTE has locked.
WITH locked AS (SELECT j.* FROM jobctl_jobs j WHERE j.id = %(id)s FOR UPDATE)
SELECT locked.*, clock_timestamp() FROM locked;

-- name: migrate_4_rows
-- Schema version 4's fill: the rows that carry a priority (jobctl.priority), for Python to read it.
SELECT j.* FROM jobctl_jobs j WHERE 'jobctl.run/priority@1' = ANY(j.extension_keys) ORDER BY j.id;

-- name: migrate_4_priority
UPDATE jobctl_jobs SET priority = %(priority)s WHERE id = %(id)s;

-- name: state_of
SELECT state, critical FROM jobctl_jobs WHERE id = %(id)s;

-- name: ids
SELECT id FROM jobctl_jobs ORDER BY id;

-- name: list
SELECT j.* FROM jobctl_jobs j ORDER BY j.id;

-- name: list_open
-- The rows not yet ended, in jobctl_jobs_open's order (a walk of that index:
-- the sessions never sort, and the store sorts them by id); finished_states
-- gives the others' states.
SELECT j.* FROM jobctl_jobs j
WHERE j.unfinished
ORDER BY j.priority DESC, j.created_at, j.id;

-- name: finished_states
-- A finished row never changes state again [JOB-T1]: its state column stands for it,
-- when this reader can read the row at all.
SELECT id, state, critical <@ %(understood)s::text[] FROM jobctl_jobs
WHERE state IN ('complete', 'failed', 'cancelled');

-- name: scan_after
-- One page of a scan, by id after the last one seen: no cursor (and no lock)
-- is held between pages while the caller prints what it has.
SELECT j.* FROM jobctl_jobs j WHERE j.id > %(after)s ORDER BY j.id LIMIT %(limit)s;

-- name: orphan_candidates
-- Not terminal, not transferred, not held, not paused unless running [JOB-I11] [JOB-I12] [JOB-T2],
-- with the time they were judged at; the shared is_orphan rule has the last word on each row.
-- In jobctl_jobs_open's order, as list_open: the store sorts them by id.
SELECT j.*, coalesce(%(now)s::timestamptz, statement_timestamp()) FROM jobctl_jobs j
WHERE j.unfinished AND j.state IN ('pending', 'running')
  AND (j.owner = '' OR j.expires_at <= coalesce(%(now)s::timestamptz, statement_timestamp()))
  AND (j.want IS DISTINCT FROM 'pause' OR j.state = 'running')
ORDER BY j.priority DESC, j.created_at, j.id;

-- name: unpickable
-- What claim_next passes over for what is at the row, to be named: open jobs
-- whose scheduling data cannot be read, that this reader cannot read (a
-- critical model it does not know, a NULL no record holds), or whose epoch
-- no claim can raise (at 2^63-1, or NULL); with the time of the look. Open rows
-- only, through jobctl_jobs_open: a pick never reads the finished ones.
-- In that index's order, as list_open: the store sorts them by id.
SELECT j.*, coalesce(%(now)s::timestamptz, statement_timestamp()) FROM jobctl_jobs j
WHERE j.unfinished AND j.state IN ('pending', 'running')
  AND (NOT j.scheduled OR NOT j.critical <@ %(understood)s::text[] OR (j.epoch < 9223372036854775807) IS NOT TRUE
       OR num_nulls(j.kind, j.spec, j.owner, j.expires_at, j.done, j.total, j.progress_at,
                    j.error, j.created_at, j.updated_at, j.content) > 0)
ORDER BY j.priority DESC, j.created_at, j.id;

-- name: insert
-- submit and import, refused (no row) when the id is taken. A submit's times
-- are the store's clock (%(fresh)s), an intent's `at` too when it has none;
-- an import keeps every time the record has.
INSERT INTO jobctl_jobs (
    id, kind, state, envelope_schema, envelope_actions, spec, checkpoint, done, total, progress_at,
    step_name, step_ordinal, step_of, step_done, step_total, owner, epoch, expires_at,
    recall_reason, recall_by, recall_at, recall_until, delegation_system, delegation_external_id,
    delegation_delivered, requires, error, want, intent_by, intent_at, extension_keys, extension_values,
    created_at, updated_at, content, critical, verbatim, not_before, after, pipeline, scheduled, priority)
SELECT
    %(id)s, %(kind)s, %(state)s, %(envelope_schema)s, %(envelope_actions)s, %(spec)s, %(checkpoint)s,
    %(done)s, %(total)s, CASE WHEN %(fresh)s THEN c.now ELSE %(progress_at)s END,
    %(step_name)s, %(step_ordinal)s, %(step_of)s, %(step_done)s, %(step_total)s, %(owner)s, %(epoch)s,
    %(expires_at)s, %(recall_reason)s, %(recall_by)s, %(recall_at)s, %(recall_until)s, %(delegation_system)s,
    %(delegation_external_id)s, %(delegation_delivered)s, %(requires)s, %(error)s, %(want)s, %(intent_by)s,
    CASE WHEN %(fresh)s AND %(want)s::text IS NOT NULL THEN coalesce(%(intent_at)s, c.now) ELSE %(intent_at)s END,
    %(extension_keys)s, %(extension_values)s,
    CASE WHEN %(fresh)s THEN c.now ELSE %(created_at)s END, CASE WHEN %(fresh)s THEN c.now ELSE %(updated_at)s END,
    %(content)s, %(critical)s, %(verbatim)s, %(not_before)s, %(after)s, %(pipeline)s, %(scheduled)s, %(priority)s
FROM (SELECT coalesce(%(now)s::timestamptz, statement_timestamp()) AS now) AS c
ON CONFLICT (id) DO NOTHING
RETURNING id;

-- name: write
-- A whole record, written back under the row lock lock_record took: update(),
-- and a step the rules allowed after its statement was refused.
UPDATE jobctl_jobs AS j SET
    kind = %(kind)s, state = %(state)s, envelope_schema = %(envelope_schema)s,
    envelope_actions = %(envelope_actions)s, spec = %(spec)s, checkpoint = %(checkpoint)s, done = %(done)s,
    total = %(total)s, progress_at = %(progress_at)s, step_name = %(step_name)s, step_ordinal = %(step_ordinal)s,
    step_of = %(step_of)s, step_done = %(step_done)s, step_total = %(step_total)s, owner = %(owner)s,
    epoch = %(epoch)s, expires_at = %(expires_at)s, recall_reason = %(recall_reason)s,
    recall_by = %(recall_by)s, recall_at = %(recall_at)s, recall_until = %(recall_until)s,
    delegation_system = %(delegation_system)s, delegation_external_id = %(delegation_external_id)s,
    delegation_delivered = %(delegation_delivered)s, requires = %(requires)s, error = %(error)s,
    want = %(want)s, intent_by = %(intent_by)s, intent_at = %(intent_at)s, extension_keys = %(extension_keys)s,
    extension_values = %(extension_values)s, created_at = %(created_at)s, updated_at = %(updated_at)s,
    content = %(content)s, critical = %(critical)s, verbatim = %(verbatim)s, not_before = %(not_before)s,
    after = %(after)s, pipeline = %(pipeline)s, scheduled = %(scheduled)s, priority = %(priority)s,
    unfinished = %(unfinished)s, revision = j.revision + 1
WHERE j.id = %(id)s
RETURNING pg_notify('jobctl_jobs', json_build_array(current_schema(), 'written', j.id, j.revision)::text);

-- name: forged
-- Bytes at the row this reader cannot decode (replay's `plant` forges them, as
-- a newer writer would write them), with the lists they declare: every step
-- refuses the row for its critical list, and readers are handed the bytes.
-- The other columns stay as they were.
UPDATE jobctl_jobs AS j
SET verbatim = %(verbatim)s, content = %(content)s, critical = %(critical)s, revision = j.revision + 1
WHERE j.id = %(id)s
RETURNING pg_notify('jobctl_jobs', json_build_array(current_schema(), 'written', j.id, j.revision)::text);

-- name: claim
-- [JOB-L4]: the lease is taken and the epoch raised; pending and running
-- become running [JOB-T2]; a recall goes [JOB-R7]; updated_at stays.
-- Refused: a finished job [JOB-T1]; a lease held by another owner, or by this
-- owner under a recall [JOB-O1] [JOB-R5]. Each of %(ids)s, judged on its
-- own: one job (`claim ID`), or the several a worker's free slots take at
-- once (claim_each). Two such claims may meet each other's rows in opposite
-- orders: the server's deadlock check ends one, which session.py names
-- LockBusy, and claim_each then claims that batch one job at a time.
-- An epoch the claim cannot raise (the largest a record holds, 2^63-1, or
-- NULL) is left to the rules, which refuse it as the directory store does;
-- so is a row with NULL where no record holds one (an administrator dropped
-- a NOT NULL): the claim writes none of what it could not hand back.
UPDATE jobctl_jobs AS j
SET epoch = j.epoch + 1, owner = %(owner)s,
    expires_at = coalesce(%(now)s::timestamptz, statement_timestamp()) + %(ttl)s::interval,
    recall_reason = NULL, recall_by = NULL, recall_at = NULL, recall_until = NULL,
    state = CASE WHEN j.state IN ('pending', 'running') THEN 'running' ELSE j.state END,
    verbatim = NULL, revision = j.revision + 1
WHERE j.id = ANY(%(ids)s::text[])
  AND j.critical <@ %(understood)s::text[]
  AND j.epoch < 9223372036854775807
  AND num_nulls(j.kind, j.spec, j.owner, j.expires_at, j.done, j.total, j.progress_at,
                j.error, j.created_at, j.updated_at, j.content) = 0
  AND j.state NOT IN ('complete', 'failed', 'cancelled')
  -- A job with an exclusive key is claimed by the rules' path, which takes its key (exclusive.sql).
  AND NOT coalesce(j.extension_keys @> ARRAY['jobctl.run/exclusive@1']::text[], false)
  AND NOT (j.owner <> '' AND j.expires_at > coalesce(%(now)s::timestamptz, statement_timestamp())
           AND (j.owner <> %(owner)s OR j.recall_reason IS NOT NULL))
RETURNING j.id, j.kind, j.state, j.envelope_schema, j.envelope_actions, j.spec, j.checkpoint, j.done, j.total,
    j.progress_at, j.step_name, j.step_ordinal, j.step_of, j.step_done, j.step_total, j.owner, j.epoch, j.expires_at,
    j.recall_reason, j.recall_by, j.recall_at, j.recall_until, j.delegation_system, j.delegation_external_id,
    j.delegation_delivered, j.requires, j.error, j.want, j.intent_by, j.intent_at, j.extension_keys,
    j.extension_values, j.created_at, j.updated_at, j.content, j.critical, j.verbatim, j.revision,
    pg_notify('jobctl_jobs', json_build_array(current_schema(), 'written', j.id, j.revision)::text);

-- name: claim_next
-- The first runnable jobs (jobctl.schedule.runnable), up to %(limit)s, claimed
-- as `claim` claims: the epoch raised, the lease taken, running, a recall gone.
-- Runnable: pending or running, nobody holding the lease, not paused,
-- scheduling data readable, not before its not_before time, of one of
-- %(kinds)s (every kind when NULL), every job it waits for complete, no
-- critical model the reader does not know [JOB-D7], an epoch a claim can
-- raise and no NULL a record cannot hold (what is not is named by
-- `unpickable`). SKIP LOCKED passes over
-- a row another transaction holds, so pickers never wait on each other, and
-- FOR UPDATE judges each row again as it is when locked. First is the
-- highest priority, then the oldest (jobctl.priority.pick_key): a walk of
-- jobctl_jobs_open in order that stops at the first %(limit)s rows: the
-- store's sessions never sort (session.py says why). Each claimed row's
-- head, and its notice. A job with an exclusive key is passed over: the
-- store claims it with its key (keyed_open) for the slots this leaves free.
-- One UPDATE and nothing around it: each plan node a statement has is set
-- up again at every run, and a pick runs at every job.
UPDATE jobctl_jobs AS j
SET epoch = j.epoch + 1, owner = %(owner)s,
    expires_at = coalesce(%(now)s::timestamptz, statement_timestamp()) + %(ttl)s::interval,
    recall_reason = NULL, recall_by = NULL, recall_at = NULL, recall_until = NULL,
    state = 'running', verbatim = NULL, revision = j.revision + 1
FROM (
    SELECT r.id FROM jobctl_jobs r
    WHERE r.unfinished AND r.state IN ('pending', 'running')
      AND (r.owner = '' OR r.expires_at <= coalesce(%(now)s::timestamptz, statement_timestamp()))
      AND r.want IS DISTINCT FROM 'pause'
      AND r.scheduled
      AND r.critical <@ %(understood)s::text[]
      AND r.epoch < 9223372036854775807
      AND num_nulls(r.kind, r.spec, r.owner, r.expires_at, r.done, r.total, r.progress_at,
                    r.error, r.created_at, r.updated_at, r.content) = 0
      AND (r.not_before IS NULL OR r.not_before <= coalesce(%(now)s::timestamptz, statement_timestamp()))
      AND (%(kinds)s::text[] IS NULL OR r.kind = ANY(%(kinds)s::text[]))
      -- A job with an exclusive key is claimed with its key, after this statement (exclusive.sql).
      AND NOT coalesce(r.extension_keys @> ARRAY['jobctl.run/exclusive@1']::text[], false)
      AND (cardinality(r.after) = 0 OR NOT EXISTS (
          SELECT 1 FROM unnest(r.after) AS dep(id)
          WHERE NOT EXISTS (
              SELECT 1 FROM jobctl_jobs d
              WHERE d.id = dep.id AND d.state = 'complete' AND d.critical <@ %(understood)s::text[])))
    ORDER BY r.priority DESC, r.created_at, r.id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
) AS picked
WHERE j.id = picked.id
RETURNING j.id, j.kind, j.state, j.envelope_schema, j.envelope_actions, j.spec, j.checkpoint, j.done, j.total,
    j.progress_at, j.step_name, j.step_ordinal, j.step_of, j.step_done, j.step_total, j.owner, j.epoch,
    j.expires_at, j.recall_reason, j.recall_by, j.recall_at, j.recall_until, j.delegation_system,
    j.delegation_external_id, j.delegation_delivered, j.requires, j.error, j.want, j.intent_by, j.intent_at,
    j.extension_keys, j.extension_values, j.created_at, j.updated_at, j.content, j.critical, j.verbatim,
    j.revision, pg_notify('jobctl_jobs', json_build_array(current_schema(), 'written', j.id, j.revision)::text);

-- name: keyed_open
-- The open jobs with an exclusive key that nobody holds, the row's head each
-- and the time of the look: read when a pick (claim_next) leaves slots free,
-- which claim_some offers them, each with its key's claim (judged again
-- under its row lock and its key's). Through jobctl_jobs_keyed (keyed.sql),
-- which holds none in most stores, in its order: an order of their own
-- would be a sort.
SELECT k.id, k.kind, k.state, k.envelope_schema, k.envelope_actions, k.spec, k.checkpoint, k.done, k.total,
    k.progress_at, k.step_name, k.step_ordinal, k.step_of, k.step_done, k.step_total, k.owner, k.epoch,
    k.expires_at, k.recall_reason, k.recall_by, k.recall_at, k.recall_until, k.delegation_system,
    k.delegation_external_id, k.delegation_delivered, k.requires, k.error, k.want, k.intent_by, k.intent_at,
    k.extension_keys, k.extension_values, k.created_at, k.updated_at, k.content, k.critical, k.verbatim,
    k.revision, coalesce(%(now)s::timestamptz, statement_timestamp())
FROM jobctl_jobs k
WHERE k.unfinished AND k.extension_keys @> ARRAY['jobctl.run/exclusive@1']::text[]
  AND k.state IN ('pending', 'running')
  AND (k.owner = '' OR k.expires_at <= coalesce(%(now)s::timestamptz, statement_timestamp()))
  AND (%(kinds)s::text[] IS NULL OR k.kind = ANY(%(kinds)s::text[]))
ORDER BY k.priority DESC, k.created_at, k.id;

-- name: renew
-- The lease extended to now + ttl, capped at a recall's until [JOB-R4];
-- allowed on a finished job [JOB-T6]; updated_at stays.
-- Refused: another epoch (stale_epoch), a lease not held (lease_expired).
UPDATE jobctl_jobs AS j
SET expires_at = CASE
        WHEN j.recall_until IS NOT NULL
         AND coalesce(%(now)s::timestamptz, statement_timestamp()) + %(ttl)s::interval > j.recall_until
        THEN j.recall_until
        ELSE coalesce(%(now)s::timestamptz, statement_timestamp()) + %(ttl)s::interval END,
    verbatim = NULL, revision = j.revision + 1
WHERE j.id = %(id)s
  AND j.critical <@ %(understood)s::text[]
  AND j.epoch = %(epoch)s
  AND j.owner <> '' AND j.expires_at > coalesce(%(now)s::timestamptz, statement_timestamp())
RETURNING j.revision, j.expires_at, pg_notify('jobctl_jobs', json_build_array(current_schema(), 'written', j.id, j.revision)::text);

-- name: progress
-- The holder's progress: done, its time, and the checkpoint when one is given
-- (%(carry)s: the checkpoint carries verified ranges, a model a later write
-- carries on [JOB-C1]). Refused, as every write of the holder's [JOB-T3]
-- [JOB-L1] [JOB-L5]: a finished job, another epoch, a lease not held.
UPDATE jobctl_jobs AS j
SET done = %(done)s, progress_at = coalesce(%(now)s::timestamptz, statement_timestamp()),
    checkpoint = CASE WHEN %(set_checkpoint)s THEN %(checkpoint)s ELSE j.checkpoint END,
    content = CASE WHEN %(carry)s::text IS NULL OR %(carry)s::text = ANY(j.content) THEN j.content
                   ELSE j.content || %(carry)s::text END,
    updated_at = coalesce(%(now)s::timestamptz, statement_timestamp()), verbatim = NULL,
    revision = j.revision + 1
WHERE j.id = %(id)s
  AND j.critical <@ %(understood)s::text[]
  AND j.state NOT IN ('complete', 'failed', 'cancelled')
  AND j.epoch = %(epoch)s
  AND j.owner <> '' AND j.expires_at > coalesce(%(now)s::timestamptz, statement_timestamp())
RETURNING j.revision, j.done, j.progress_at, j.checkpoint, j.content, j.updated_at,
    pg_notify('jobctl_jobs', json_build_array(current_schema(), 'written', j.id, j.revision)::text);

-- name: finish
-- The holder sets the state, with error, checkpoint and done in the same
-- write [JOB-S2] [JOB-T4]. Refused as progress is.
UPDATE jobctl_jobs AS j
SET state = %(state)s, error = coalesce(%(error)s, j.error),
    checkpoint = CASE WHEN %(set_checkpoint)s THEN %(checkpoint)s ELSE j.checkpoint END,
    content = CASE WHEN %(carry)s::text IS NULL OR %(carry)s::text = ANY(j.content) THEN j.content
                   ELSE j.content || %(carry)s::text END,
    done = coalesce(%(done)s, j.done),
    progress_at = CASE WHEN %(done)s::bigint IS NULL THEN j.progress_at
                       ELSE coalesce(%(now)s::timestamptz, statement_timestamp()) END,
    updated_at = coalesce(%(now)s::timestamptz, statement_timestamp()), verbatim = NULL,
    unfinished = %(state)s NOT IN ('complete', 'failed', 'cancelled'), revision = j.revision + 1
WHERE j.id = %(id)s
  AND j.critical <@ %(understood)s::text[]
  AND j.state NOT IN ('complete', 'failed', 'cancelled')
  AND j.epoch = %(epoch)s
  AND j.owner <> '' AND j.expires_at > coalesce(%(now)s::timestamptz, statement_timestamp())
RETURNING j.revision, j.state, j.error, j.checkpoint, j.content, j.done, j.progress_at, j.updated_at,
    pg_notify('jobctl_jobs', json_build_array(current_schema(), 'written', j.id, j.revision)::text);

-- name: release
-- The holder gives the lease up: it ends now, nobody owns it, running becomes
-- pending unless delegated [JOB-L6]; the epoch and a recall stay [JOB-R6].
-- Refused as progress is [JOB-T5].
UPDATE jobctl_jobs AS j
SET expires_at = coalesce(%(now)s::timestamptz, statement_timestamp()), owner = '',
    state = CASE WHEN j.state = 'running' AND j.delegation_system IS NULL THEN 'pending' ELSE j.state END,
    updated_at = coalesce(%(now)s::timestamptz, statement_timestamp()), verbatim = NULL, revision = j.revision + 1
WHERE j.id = %(id)s
  AND j.critical <@ %(understood)s::text[]
  AND j.state NOT IN ('complete', 'failed', 'cancelled')
  AND j.epoch = %(epoch)s
  AND j.owner <> '' AND j.expires_at > coalesce(%(now)s::timestamptz, statement_timestamp())
RETURNING j.revision, j.expires_at, j.owner, j.state, j.updated_at, pg_notify('jobctl_jobs', json_build_array(current_schema(), 'written', j.id, j.revision)::text);

-- name: set_intent
-- What somebody wants, recorded with no epoch [JOB-I3]; run is recorded too
-- [JOB-I7]. Refused: a finished job [JOB-I5].
UPDATE jobctl_jobs AS j
SET want = %(want)s, intent_by = %(by)s, intent_at = coalesce(%(now)s::timestamptz, statement_timestamp()),
    updated_at = coalesce(%(now)s::timestamptz, statement_timestamp()), verbatim = NULL, revision = j.revision + 1
WHERE j.id = %(id)s
  AND j.critical <@ %(understood)s::text[]
  AND j.state NOT IN ('complete', 'failed', 'cancelled')
RETURNING j.revision, j.want, j.intent_by, j.intent_at, j.updated_at, pg_notify('jobctl_jobs', json_build_array(current_schema(), 'written', j.id, j.revision)::text);

-- name: recall
-- The lease demanded back by until = now + grace, which the lease's end
-- comes down to when it is later [JOB-R3]; the intent stays [JOB-R8].
-- Refused: a finished job, another epoch than the issuer read [JOB-R1], a
-- lease nobody holds [JOB-R2].
UPDATE jobctl_jobs AS j
SET recall_reason = %(reason)s, recall_by = %(by)s,
    recall_at = coalesce(%(now)s::timestamptz, statement_timestamp()),
    recall_until = coalesce(%(now)s::timestamptz, statement_timestamp()) + %(grace)s::interval,
    expires_at = least(j.expires_at, coalesce(%(now)s::timestamptz, statement_timestamp()) + %(grace)s::interval),
    updated_at = coalesce(%(now)s::timestamptz, statement_timestamp()), verbatim = NULL, revision = j.revision + 1
WHERE j.id = %(id)s
  AND j.critical <@ %(understood)s::text[]
  AND j.state NOT IN ('complete', 'failed', 'cancelled')
  AND j.epoch = %(epoch)s
  AND j.owner <> '' AND j.expires_at > coalesce(%(now)s::timestamptz, statement_timestamp())
RETURNING j.revision, j.recall_reason, j.recall_by, j.recall_at, j.recall_until, j.expires_at, j.updated_at,
    pg_notify('jobctl_jobs', json_build_array(current_schema(), 'written', j.id, j.revision)::text);

-- name: remove
-- jobctl gc: an ended job this reader can read [JOB-D7]; nobody writes a
-- finished record again [JOB-T1], so nothing is lost. With a revision, only
-- the row as it was read then (not a job of the same id submitted since).
DELETE FROM jobctl_jobs
WHERE id = %(id)s AND state IN ('complete', 'failed', 'cancelled') AND critical <@ %(understood)s::text[]
  AND (%(revision)s::bigint IS NULL OR revision = %(revision)s::bigint)
RETURNING id;

-- name: listen
-- Change notices: one per row written or removed, when its transaction commits,
-- sent by jobctl's updates here and by the triggers (migrate-5.sql) on inserts,
-- deletes and every other writer's update.
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

-- name: announce
-- A worker's word (workers.sql), replacing its last; the words expired an
-- hour ago or more go in the same statement (workers killed outright).
WITH gone AS (
    DELETE FROM jobctl_workers
    WHERE expires_at < coalesce(%(now)s::timestamptz, statement_timestamp()) - interval '1 hour'
)
INSERT INTO jobctl_workers (owner, kinds, expires_at)
VALUES (%(owner)s, %(kinds)s, coalesce(%(now)s::timestamptz, statement_timestamp()) + %(ttl)s::interval)
ON CONFLICT (owner) DO UPDATE SET kinds = excluded.kinds, expires_at = excluded.expires_at;

-- name: withdraw
DELETE FROM jobctl_workers WHERE owner = %(owner)s;

-- name: announcements
SELECT owner, kinds, expires_at FROM jobctl_workers
WHERE expires_at > coalesce(%(now)s::timestamptz, statement_timestamp());

-- name: exclusive_take
-- An exclusive key's row, made when missing and locked for the rest of the
-- claim's transaction either way (exclusive.sql): its holder, as last written.
INSERT INTO jobctl_exclusive (key, job_id, epoch) VALUES (%(key)s, '', 0)
ON CONFLICT (key) DO UPDATE SET key = excluded.key
RETURNING job_id, epoch;

-- name: exclusive_hold
-- The claim's job as the key's holder, in the transaction that claims it.
UPDATE jobctl_exclusive SET job_id = %(job)s, epoch = %(epoch)s WHERE key = %(key)s;
