-- Named queries of `jobctl paths` / `jobctl doctor` on a database store
-- (jobctl.store.postgres.health). Read-only; parameters only.

-- name: who
-- Who this connection is, where it landed, and the server's clock.
SELECT current_user, current_database(), current_schema(), current_setting('server_version'), clock_timestamp();

-- name: table_privileges
-- For each table named (tables: an array, in its order), as the server
-- resolves the name through search_path: whether the role sees it, and
-- whether it may SELECT, INSERT, UPDATE and DELETE its rows (NULLs when the
-- table is not visible: not made yet, or no USAGE on its schema).
SELECT t.name, c.oid IS NOT NULL,
    has_table_privilege(c.oid, 'SELECT'),
    has_table_privilege(c.oid, 'INSERT'),
    has_table_privilege(c.oid, 'UPDATE'),
    has_table_privilege(c.oid, 'DELETE')
FROM unnest(%(tables)s::text[]) WITH ORDINALITY AS t(name, n)
LEFT JOIN LATERAL (SELECT to_regclass(t.name)::oid AS oid) c ON true
ORDER BY t.n;

-- name: owner
-- Whether the role may alter or drop the store's tables: a superuser, or the
-- owner (or a member of the owning role) of jobctl_jobs or of its schema.
-- NULLs but superuser when jobctl_jobs is not visible.
WITH t AS (SELECT to_regclass('jobctl_jobs') AS jobs)
SELECT
    n.nspname,
    pg_has_role(c.relowner, 'USAGE') AS owns_table,
    pg_has_role(n.nspowner, 'USAGE') AS owns_schema,
    (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) AS superuser
FROM t
LEFT JOIN pg_class c ON c.oid = t.jobs
LEFT JOIN pg_namespace n ON n.oid = c.relnamespace;

-- name: read_only
-- Whether this session's transactions may write: the transaction's setting
-- (a standby's are read-only whatever is set), the default a new one takes
-- and where that default came from (pg_settings.source: 'user' for ALTER
-- ROLE, 'database', 'database user', 'client' for the connection's options,
-- 'configuration file', ...), and whether the server is a standby.
SELECT current_setting('transaction_read_only'), s.setting, s.source, pg_is_in_recovery()
FROM pg_settings s WHERE s.name = 'default_transaction_read_only';
