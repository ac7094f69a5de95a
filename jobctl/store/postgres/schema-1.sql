-- Schema version 1 of jobctl's PostgreSQL store, created by `jobctl db init`.
--
-- A record's canonical bytes (the file binding's, from jobctl.record.encode)
-- are the record; every other column is derived from those bytes by the
-- writer in the same transaction, to serve queries.

CREATE TABLE jobctl_schema (
    version integer NOT NULL
);

CREATE TABLE jobctl_jobs (
    id          text COLLATE "C" PRIMARY KEY,  -- "C": ids sort by byte order, as on disk
    data        bytea NOT NULL,                -- the canonical record bytes, exactly
    state       text NOT NULL,
    kind        text NOT NULL,
    epoch       bigint NOT NULL,
    owner       text NOT NULL,
    expires_at  timestamptz,                   -- the lease's expiry; NULL when never claimed
    want        text NOT NULL,                 -- the intent's word; "run" when absent
    not_before  timestamptz,                   -- jobctl.run/retry@1 not_before
    after       text[] NOT NULL,               -- jobctl.run/after@1 jobs
    pipeline    text,                          -- jobctl.run/pipeline@1 name
    scheduled   boolean NOT NULL,              -- the scheduling metadata could be read
    created_at  timestamptz NOT NULL
);

-- Picking the next runnable job walks only jobs that may still start:
-- finished ones never enter this index, so a pick does not slow as they grow.
CREATE INDEX jobctl_jobs_startable ON jobctl_jobs (created_at, id) WHERE state IN ('pending', 'running');
