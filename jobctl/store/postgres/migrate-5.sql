-- Schema version 5 of jobctl's PostgreSQL store: jobctl's updates keep the
-- row's revision, `unfinished` and the change notice themselves; the trigger
-- does it for every other writer's.
--
-- A row trigger on UPDATE costs every UPDATE of the table, and most of it is
-- paid before its WHEN clause is judged (the executor copies the table's
-- triggers for each statement, and a BEFORE UPDATE trigger locks the row
-- again before it is called). Measured on a claim-next + finish cycle, the
-- trigger of version 3 cost ~25-30 us of the server's ~220, the function's
-- own body (the revision, `unfinished`, the notice) a good part of it. So
-- from this version each UPDATE in queries.sql raises `revision`, sets
-- `unfinished` where it may change the state, and sends the row's notice
-- from its RETURNING list (one pg_notify a row written, the payload as
-- before), in its own transaction: the notice still goes out when (and only
-- if) the write commits.
--
-- Every other UPDATE is still announced: the trigger's body runs on an UPDATE
-- whose new row does not raise the revision (an administrator's psql that
-- reopens a job, a script of its own), and does what it did in version 3:
-- raises the revision by one, keeps `unfinished` true to the state (or the
-- job reopened by hand would never be picked) and sends the notice. An
-- UPDATE that raises `revision` itself is taken for one that does all three
-- itself (docs/reference/postgres.md says so to administrators). Inserts
-- (submit, import, a schedule's slot, a foreign INSERT) and deletes (gc, a
-- foreign DELETE) keep the trigger as they had it.
--
-- `jobctl db migrate` runs this script (no row changes). A jobctl of version
-- 4 refuses a store of version 5, as every jobctl refuses a store newer than
-- its own.

-- The function is version 3's (migrate-3-finish.sql), unchanged: only the
-- triggers that call it change.
DROP TRIGGER jobctl_jobs_written ON jobctl_jobs;

CREATE TRIGGER jobctl_jobs_written BEFORE INSERT OR DELETE ON jobctl_jobs
    FOR EACH ROW EXECUTE FUNCTION jobctl_written();

-- Another writer's UPDATE: one whose new row does not raise the revision
-- (kept as it was, or set lower) gets the trigger's body; jobctl's own
-- statements raise it, and skip the body.
CREATE TRIGGER jobctl_jobs_updated BEFORE UPDATE ON jobctl_jobs
    FOR EACH ROW WHEN (NEW.revision <= OLD.revision) EXECUTE FUNCTION jobctl_written();
