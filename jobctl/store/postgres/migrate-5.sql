-- Schema version 5 of jobctl's PostgreSQL store: jobctl's updates keep the row's revision, `unfinished`
-- and the change notice themselves; the trigger stays for inserts and deletes.
--
-- Any row trigger on UPDATE, whatever it does, costs every UPDATE of the
-- table: the executor copies the table's triggers for each statement, and a
-- BEFORE UPDATE trigger locks the row again before it is called (a WHEN
-- clause is judged only after that lock); measured on a claim-next + finish
-- cycle, the trigger of version 3 cost ~25-30 us of the server's ~220, of
-- which the function's own body (the revision, `unfinished`, the notice) was
-- a third. So from this version each UPDATE in queries.sql raises
-- `revision`, sets `unfinished` where it may change the state, and sends the
-- row's notice from its RETURNING list (one pg_notify a row written, the
-- payload as before), in its own transaction: the notice still goes out when
-- (and only if) the write commits.
--
-- Inserts (submit, import, a schedule's slot, a foreign INSERT) and deletes
-- (gc, a foreign DELETE) keep the trigger: whoever inserts or deletes a row
-- is announced, and an inserted row's `unfinished` is true to its state. An
-- UPDATE by another writer than jobctl (an administrator's psql) raises no
-- revision and sends no notice unless it does so itself (docs/reference/postgres.md
-- says how); readers see it at their next full read.
--
-- `jobctl db migrate` runs this script (no row changes). A jobctl of version
-- 4 refuses a store of version 5: its updates would raise no revision and
-- send no notice.

DROP TRIGGER jobctl_jobs_written ON jobctl_jobs;

CREATE OR REPLACE FUNCTION jobctl_written() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM pg_notify('jobctl_jobs', json_build_array(TG_TABLE_SCHEMA, 'removed', OLD.id, OLD.revision)::text);
        RETURN OLD;
    END IF;
    NEW.unfinished := NEW.state NOT IN ('complete', 'failed', 'cancelled');
    PERFORM pg_notify('jobctl_jobs', json_build_array(TG_TABLE_SCHEMA, 'written', NEW.id, NEW.revision)::text);
    RETURN NEW;
END
$$;

CREATE TRIGGER jobctl_jobs_written BEFORE INSERT OR DELETE ON jobctl_jobs
    FOR EACH ROW EXECUTE FUNCTION jobctl_written();
