-- The end of schema version 3 (see migrate-3.sql): the new table takes the
-- old one's name, its index and its change notices.

DROP TABLE jobctl_jobs;
DROP FUNCTION jobctl_notify();
ALTER TABLE jobctl_jobs_3 RENAME TO jobctl_jobs;
ALTER INDEX jobctl_jobs_3_pkey RENAME TO jobctl_jobs_pkey;

-- The jobs not finished, oldest first: what a pick walks (in order, stopping
-- at the first it may take) and what a listing of open jobs reads. Finished
-- ones never enter this index, so neither slows as they pile up [JOB-T1].
CREATE INDEX jobctl_jobs_open ON jobctl_jobs (created_at, id) WHERE unfinished;

-- Every insert, update and delete of a row announces itself on the channel
-- jobctl_jobs (as schema version 2 began), in the writer's own transaction:
-- the notice goes out when (and only if) the change commits, whoever wrote it
-- (jobctl, an import, an administrator's psql). `watch`, `wait` and idle
-- workers LISTEN and read again at once, instead of waiting a poll interval.
-- The payload is a JSON array [schema, "written" | "removed", id, revision]:
-- one database may hold several stores, one per schema, and a listener keeps
-- its own; the revision lets a writer know its own writes when their notices
-- come back. Before the row is written, so that it also keeps `unfinished`
-- true to the state and raises the revision, whoever writes: a reader that
-- holds the row at a revision knows it is the row as it is while the
-- revision stays (store.py lays a step's answer over the row it holds).
CREATE FUNCTION jobctl_written() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM pg_notify('jobctl_jobs', json_build_array(TG_TABLE_SCHEMA, 'removed', OLD.id, OLD.revision)::text);
        RETURN OLD;
    END IF;
    IF TG_OP = 'UPDATE' THEN
        NEW.revision := OLD.revision + 1;
    END IF;
    NEW.unfinished := NEW.state NOT IN ('complete', 'failed', 'cancelled');
    PERFORM pg_notify('jobctl_jobs', json_build_array(TG_TABLE_SCHEMA, 'written', NEW.id, NEW.revision)::text);
    RETURN NEW;
END
$$;

CREATE TRIGGER jobctl_jobs_written BEFORE INSERT OR UPDATE OR DELETE ON jobctl_jobs
    FOR EACH ROW EXECUTE FUNCTION jobctl_written();
