-- Exclusive keys (jobctl.exclusive): one row a key, naming the job that holds
-- it and the epoch it claimed it at. A claim of a job with a key locks the
-- key's row (exclusive_take), reads its holder's row in a statement of its own
-- (so it sees every claim committed before the lock was had), and writes
-- itself as the holder in the transaction that claims the job
-- (exclusive_hold): claims of one key wait on each other, never on anything else.
--
-- Not a schema version of its own: `jobctl db init` and `jobctl db migrate`
-- run this on a store of any version (it changes nothing when the table is
-- there), as workers.sql. Until it is run there, a job with a key is claimed
-- by nobody (the claim is refused, naming `jobctl db migrate`).

CREATE TABLE IF NOT EXISTS jobctl_exclusive (
    key     text COLLATE "C" PRIMARY KEY,  -- the key, as the job carries it
    job_id  text COLLATE "C" NOT NULL,     -- the job that holds it ('' before its first claim)
    epoch   bigint NOT NULL                -- the epoch that job claimed it at
);
