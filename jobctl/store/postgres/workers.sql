-- What running workers have said they handle: one row a worker, renewed as it
-- loops, deleted when it stops, and judged by its expiry (the server's clock)
-- when a worker is killed outright. A hint beside the jobs, never a job.
--
-- Not a schema version of its own: `jobctl db init` and `jobctl db migrate`
-- run this on a store of any version (it changes nothing when the table is
-- there), so a store made before it is not refused; until it is run there,
-- workers announce nothing and `show` says nothing of what they handle.

CREATE TABLE IF NOT EXISTS jobctl_workers (
    owner       text COLLATE "C" PRIMARY KEY,  -- the worker's lease owner, <name>@<host>:<pid>
    kinds       text[] NOT NULL,               -- the kinds it runs
    expires_at  timestamptz NOT NULL           -- its word holds until then
);
