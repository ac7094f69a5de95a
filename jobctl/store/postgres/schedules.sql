-- Recurring schedules: one row a schedule, its job's kind and spec, when it
-- recurs, and the latest slot a worker fired. Beside the jobs, never a job.
--
-- Not a schema version of its own: `jobctl db init` and `jobctl db migrate`
-- run this on a store of any version (it changes nothing when the table is
-- there), as workers.sql; until it is run there, a store keeps no schedule
-- (`schedule add` is refused with that advice, workers fire nothing).

CREATE TABLE IF NOT EXISTS jobctl_schedules (
    name        text COLLATE "C" PRIMARY KEY,  -- the schedule's name
    every       bigint,                        -- seconds between slots, or NULL with a cron line
    cron        text,                          -- m h dom mon dow (UTC), or NULL with every
    kind        text NOT NULL,                 -- the kind of each slot's job
    spec        text NOT NULL,                 -- its spec, the JSON text as given
    added_by    text NOT NULL,                 -- who added it: each job's submitter
    created_at  timestamptz NOT NULL,          -- the store's clock when it was added
    fired       timestamptz,                   -- the latest slot fired, NULL before the first
    CHECK ((every IS NULL) <> (cron IS NULL))
);
