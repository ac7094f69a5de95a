-- Schema version 2 of jobctl's PostgreSQL store: changes are pushed.
--
-- Every insert, update and delete of a row announces itself on the channel
-- jobctl_jobs, from the trigger, in the writer's own transaction: the notice
-- goes out when (and only if) the change commits, whoever wrote it (jobctl,
-- an import, an administrator's psql). `watch`, `wait` and idle workers LISTEN
-- and read again at once, instead of waiting a poll interval.
--
-- The payload is a JSON array [schema, "written" | "removed", id]: one database
-- may hold several stores, one per schema, and a listener keeps its own.

CREATE FUNCTION jobctl_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM pg_notify('jobctl_jobs', json_build_array(TG_TABLE_SCHEMA, 'removed', OLD.id)::text);
    ELSE
        PERFORM pg_notify('jobctl_jobs', json_build_array(TG_TABLE_SCHEMA, 'written', NEW.id)::text);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER jobctl_jobs_notify AFTER INSERT OR UPDATE OR DELETE ON jobctl_jobs
    FOR EACH ROW EXECUTE FUNCTION jobctl_notify();
