-- Schema version 3 of jobctl's PostgreSQL store: the columns are the record.
--
-- Every field of the file binding's record has a typed column; the values
-- the contract keeps opaque (spec, checkpoint, each extension's value) are
-- their exact compact texts, spelling kept [JOB-E7]. A record's canonical
-- bytes are rendered from these columns by jobctl.record.encode, the one
-- encoder the file store uses, so each step of the contract can be one
-- UPDATE whose WHERE clause states the step's precondition.
--
-- No CHECK constraints: every read judges a row as a decode judges a file
-- (jobctl.record.restore), and a constraint is compiled again for every
-- single-row statement -- six of them cost a step 15 us of the server's time,
-- half again what its UPDATE costs.
--
-- `jobctl db migrate` runs this script, then fills the new table from the
-- version 2 rows (their bytes decoded in Python, as any reader decodes them),
-- then runs migrate-3-finish.sql: one transaction.

CREATE TABLE jobctl_jobs_3 (
    id                      text COLLATE "C" PRIMARY KEY,  -- "C": ids sort by byte order, as on disk
    kind                    text NOT NULL,
    state                   text NOT NULL,                 -- pending running transferred complete failed cancelled
    envelope_schema         text,                          -- NULL: no envelope
    envelope_actions        text[],
    spec                    text NOT NULL,                 -- the compact text, spelling as written
    checkpoint              text,                          -- NULL: none
    done                    bigint NOT NULL,
    total                   bigint NOT NULL,
    progress_at             timestamptz NOT NULL,          -- progress.updated_at
    step_name               text,                          -- NULL: no step
    step_ordinal            bigint,
    step_of                 bigint,
    step_done               bigint,
    step_total              bigint,
    owner                   text NOT NULL,                 -- '': nobody holds the lease
    epoch                   bigint NOT NULL,
    expires_at              timestamptz NOT NULL,          -- 1970-01-01: never claimed
    recall_reason           text,                          -- NULL: no recall
    recall_by               text,
    recall_at               timestamptz,
    recall_until            timestamptz,
    delegation_system       text,                          -- NULL: not delegated
    delegation_external_id  text,
    delegation_delivered    boolean,
    requires                text[],                        -- NULL: none
    error                   text NOT NULL,                 -- '': none
    want                    text,                          -- run pause cancel; NULL: no intent (reads as run [JOB-I2])
    intent_by               text,
    intent_at               timestamptz,
    extension_keys          text[],                        -- sorted by key; NULL: no extensions
    extension_values        text[],                        -- each key's compact text, in the same order
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
    -- Raised by every write: a step hands back only what it changed, and a
    -- reader that holds the row at revision - 1 knows the rest.
    revision                bigint NOT NULL DEFAULT 0,
    -- Scheduling, from jobctl's extensions (jobctl.schedule), by the writer of the extensions.
    not_before              timestamptz,                   -- jobctl.run/retry@1 not_before
    after                   text[] NOT NULL,               -- jobctl.run/after@1 jobs
    pipeline                text,                          -- jobctl.run/pipeline@1 name
    scheduled               boolean NOT NULL,              -- the scheduling metadata could be read
    -- state is not complete, failed or cancelled: kept so by the trigger
    -- jobctl_jobs_written, whoever writes. The index of jobs a pick walks is on
    -- this, not on state, so that a claim (pending to running) changes no
    -- indexed column and PostgreSQL writes it in place (a HOT update: no new
    -- index entries), in the room the fill factor leaves on each page.
    unfinished              boolean NOT NULL DEFAULT true
) WITH (fillfactor = 80);
