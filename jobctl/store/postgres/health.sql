-- Named queries of `jobctl paths` / `jobctl doctor` on a database store
-- (jobctl.store.postgres_health). Read-only; parameters only.

-- name: who
-- Who this connection is, where it landed, and the server's clock.
SELECT current_user, current_database(), current_schema(), current_setting('server_version'), clock_timestamp();

-- name: privileges
-- What the role may do with the store's tables, as the server resolves the
-- names through search_path: NULLs when a table is not visible (no store
-- here, or no USAGE on its schema). A superuser or the owner (or a member of
-- the owning role) of the tables or of their schema may alter or drop them.
WITH t AS (
    SELECT to_regclass('jobctl_jobs') AS jobs, to_regclass('jobctl_schema') AS version
)
SELECT
    has_table_privilege(t.jobs, 'SELECT'),
    has_table_privilege(t.jobs, 'INSERT'),
    has_table_privilege(t.jobs, 'UPDATE'),
    has_table_privilege(t.version, 'SELECT'),
    n.nspname,
    pg_has_role(c.relowner, 'USAGE') AS owns_table,
    pg_has_role(n.nspowner, 'USAGE') AS owns_schema,
    (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) AS superuser
FROM t
LEFT JOIN pg_class c ON c.oid = t.jobs
LEFT JOIN pg_namespace n ON n.oid = c.relnamespace;
