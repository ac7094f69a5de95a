-- The end of schema version 3 (see migrate-3.sql): the new table takes the
-- old one's name, its index and its change-notice trigger.

DROP TABLE jobctl_jobs;
ALTER TABLE jobctl_jobs_3 RENAME TO jobctl_jobs;
ALTER INDEX jobctl_jobs_3_pkey RENAME TO jobctl_jobs_pkey;

-- Picking the next runnable job walks only jobs that may still start, oldest
-- first: finished ones never enter this index, so a pick does not slow as they grow.
CREATE INDEX jobctl_jobs_startable ON jobctl_jobs (created_at, id) WHERE state IN ('pending', 'running');

CREATE TRIGGER jobctl_jobs_notify AFTER INSERT OR UPDATE OR DELETE ON jobctl_jobs
    FOR EACH ROW EXECUTE FUNCTION jobctl_notify();

-- The oldest runnable jobs, up to `wanted`, locked for the caller's claim
-- (queries.sql, claim_next): jobctl.schedule.runnable in SQL. Pending or
-- running, nobody holding the lease, not paused, scheduling data readable,
-- not before its not_before time, of one of `kinds` (every kind when NULL),
-- every job it waits for complete, no critical model the reader does not know
-- [JOB-D7]; SKIP LOCKED passes over a row another transaction holds, so
-- pickers never wait on each other, and FOR UPDATE judges each row again as
-- it is when locked.
--
-- A function for one reason: `enable_sort = off`. Oldest first must be a walk
-- of jobctl_jobs_startable in order that stops at the first `wanted` rows;
-- but on a table without statistics (a new store) or in a plan made before
-- the parameters are known (a prepared statement's generic plan), the
-- planner's default estimates say almost nothing matches these conditions,
-- and sorting every startable row then looks cheaper than the walk. It never
-- is for a pick. The setting holds inside this function only, and its plan is
-- kept for the session like a prepared statement's.
CREATE FUNCTION jobctl_runnable(now timestamptz, understood text[], kinds text[], wanted bigint)
RETURNS SETOF text LANGUAGE plpgsql VOLATILE ROWS 1 SET enable_sort = off AS $$
BEGIN
    RETURN QUERY
    SELECT r.id FROM jobctl_jobs r
    WHERE r.state IN ('pending', 'running')
      AND (r.owner = '' OR r.expires_at <= now)
      AND r.want IS DISTINCT FROM 'pause'
      AND r.scheduled
      AND r.critical <@ understood
      AND (r.not_before IS NULL OR r.not_before <= now)
      AND (kinds IS NULL OR r.kind = ANY(kinds))
      AND (cardinality(r.after) = 0 OR NOT EXISTS (
          SELECT 1 FROM unnest(r.after) AS dep(id)
          WHERE NOT EXISTS (
              SELECT 1 FROM jobctl_jobs d
              WHERE d.id = dep.id AND d.state = 'complete' AND d.critical <@ understood)))
    ORDER BY r.created_at, r.id
    LIMIT wanted
    FOR UPDATE OF r SKIP LOCKED;
END
$$;
