-- Schema version 3 of jobctl's PostgreSQL store: the columns are the record.
--
-- Every field of the file binding's record has a typed column; the values
-- the contract keeps opaque (spec, checkpoint, each extension's value) are
-- their exact compact texts, spelling kept [JOB-E7]. A record's canonical
-- bytes are rendered from these columns by jobctl.record.encode, the one
-- encoder the file store uses, so each step of the contract can be one
-- UPDATE whose WHERE clause states the step's precondition.
--
-- `jobctl db migrate` runs this script, then fills the new table from the
-- version 2 rows (their bytes decoded in Python, as any reader decodes them),
-- then runs migrate-3-finish.sql: one transaction.

CREATE TABLE jobctl_jobs_3 (
    id                      text COLLATE "C" PRIMARY KEY,  -- "C": ids sort by byte order, as on disk
    kind                    text NOT NULL,
    state                   text NOT NULL
        CONSTRAINT jobctl_state CHECK (state IN ('pending', 'running', 'transferred', 'complete', 'failed', 'cancelled')),
    envelope_schema         text,                          -- NULL: no envelope
    envelope_actions        text[],
    spec                    text NOT NULL,                 -- the compact text, spelling as written
    checkpoint              text,                          -- NULL: none
    done                    bigint NOT NULL CONSTRAINT jobctl_done CHECK (done >= 0),
    total                   bigint NOT NULL CONSTRAINT jobctl_total CHECK (total >= 0),
    progress_at             timestamptz NOT NULL,          -- progress.updated_at
    step_name               text,                          -- NULL: no step
    step_ordinal            bigint,
    step_of                 bigint,
    step_done               bigint,
    step_total              bigint,
    owner                   text NOT NULL,                 -- '': nobody holds the lease
    epoch                   bigint NOT NULL CONSTRAINT jobctl_epoch CHECK (epoch >= 0),
    expires_at              timestamptz NOT NULL,          -- 1970-01-01: never claimed
    recall_reason           text,                          -- NULL: no recall
    recall_by               text,
    recall_at               timestamptz,
    recall_until            timestamptz,
    delegation_system       text,                          -- NULL: not delegated
    delegation_external_id  text,
    delegation_delivered    boolean,
    requires                text[] NOT NULL,
    error                   text NOT NULL,                 -- '': none
    want                    text                           -- NULL: no intent (reads as run [JOB-I2])
        CONSTRAINT jobctl_want CHECK (want IN ('run', 'pause', 'cancel')),
    intent_by               text,
    intent_at               timestamptz,
    extension_keys          text[] NOT NULL,               -- sorted by key
    extension_values        text[] NOT NULL,               -- each key's compact text, in the same order
    created_at              timestamptz NOT NULL,
    updated_at              timestamptz NOT NULL,
    -- The lists as last written (or as read, for a record imported as it was):
    -- every render derives them afresh from these and the fields [JOB-D2].
    content                 text[] NOT NULL,
    critical                text[] NOT NULL,
    -- A record's bytes as they came, while rendering the columns would not give
    -- them back (another writer's spacing, a legacy schema, a forged name):
    -- readers are handed these; the next write clears them.
    verbatim                bytea,
    -- Scheduling, from jobctl's extensions (jobctl.schedule), by the writer of the extensions.
    not_before              timestamptz,                   -- jobctl.run/retry@1 not_before
    after                   text[] NOT NULL,               -- jobctl.run/after@1 jobs
    pipeline                text,                          -- jobctl.run/pipeline@1 name
    scheduled               boolean NOT NULL,              -- the scheduling metadata could be read
    CONSTRAINT jobctl_extensions CHECK (cardinality(extension_keys) = cardinality(extension_values))
);
