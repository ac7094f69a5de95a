-- Schema version 4 of jobctl's PostgreSQL store: jobs are picked by priority, then oldest first.
--
-- `priority` is the job's jobctl.run/priority@1 (jobctl.priority.priority_of:
-- 0 when the record has none, or a value no jobctl writes), written with the
-- extensions by their writer, as not_before is. The record's bytes still
-- render from extension_values: the column is the pick's copy of it.
-- `jobctl db migrate` runs this script, then sets the column of the rows that
-- carry the key (decoded in Python, as every reader decodes them): one
-- transaction. Adding a column with a constant default rewrites no row.

ALTER TABLE jobctl_jobs ADD COLUMN priority integer NOT NULL DEFAULT 0;

-- The jobs not finished, in pick order: the highest priority first, then the
-- oldest. A pick walks it in order and stops at the first it may take, so a
-- pick stays as cheap beside 100,000 finished rows as beside none [JOB-T1];
-- a claim changes none of its columns (a HOT update, as before).
DROP INDEX jobctl_jobs_open;
CREATE INDEX jobctl_jobs_open ON jobctl_jobs (priority DESC, created_at, id) WHERE unfinished;
