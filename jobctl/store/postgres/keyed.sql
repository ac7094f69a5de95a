-- The open jobs that carry an exclusive key (jobctl.exclusive), in pick
-- order: what claim_next reads at every pick, beside the jobs it claims.
-- Few or none in most stores, so a pick pays nothing for the keys it does
-- not meet; without it, claim_next walks every open job's entry of
-- jobctl_jobs_open and reads its row.
--
-- Not a schema version of its own: `jobctl db init` and `jobctl db migrate`
-- run this on a store of version 4 or later (the version that orders
-- jobctl_jobs_open by priority), as exclusive.sql. A store made before it
-- picks the same jobs without it, only slower.

CREATE INDEX IF NOT EXISTS jobctl_jobs_keyed ON jobctl_jobs (priority DESC, created_at, id)
    WHERE unfinished AND extension_keys @> ARRAY['jobctl.run/exclusive@1']::text[];
