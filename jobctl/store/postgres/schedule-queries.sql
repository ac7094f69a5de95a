-- The statements of recurring schedules (schedules.sql), loaded by name as queries.sql is.

-- name: schedule_add
INSERT INTO jobctl_schedules (name, every, cron, kind, spec, added_by, created_at)
VALUES (%(name)s, %(every)s, %(cron)s, %(kind)s, %(spec)s, %(by)s, %(created_at)s)
ON CONFLICT (name) DO NOTHING
RETURNING name;

-- name: schedule_put
-- A declaration: added, or its plan replaced (created_at and fired kept), or nothing when the plan is the same
-- (no row back). inserted: xmax is 0 on a row this statement inserted, the updating transaction's id otherwise.
INSERT INTO jobctl_schedules AS s (name, every, cron, kind, spec, added_by, created_at)
VALUES (%(name)s, %(every)s, %(cron)s, %(kind)s, %(spec)s, %(by)s, %(created_at)s)
ON CONFLICT (name) DO UPDATE
SET every = EXCLUDED.every, cron = EXCLUDED.cron, kind = EXCLUDED.kind, spec = EXCLUDED.spec, added_by = EXCLUDED.added_by
WHERE (s.every, s.cron, s.kind, s.spec) IS DISTINCT FROM (EXCLUDED.every, EXCLUDED.cron, EXCLUDED.kind, EXCLUDED.spec)
RETURNING (s.xmax = 0) AS inserted;

-- name: schedules
SELECT name, every, cron, kind, spec, added_by, created_at, fired FROM jobctl_schedules ORDER BY name;

-- name: schedule
SELECT name, every, cron, kind, spec, added_by, created_at, fired FROM jobctl_schedules WHERE name = %(name)s;

-- name: schedule_remove
DELETE FROM jobctl_schedules WHERE name = %(name)s RETURNING name;

-- name: schedule_fired
-- Forward only; nothing for a schedule removed (or removed and added again) since it was read.
WITH hit AS (
    SELECT name FROM jobctl_schedules WHERE name = %(name)s AND created_at = %(created_at)s FOR UPDATE
), moved AS (
    UPDATE jobctl_schedules s SET fired = %(slot)s
    FROM hit WHERE s.name = hit.name AND (s.fired IS NULL OR s.fired < %(slot)s)
)
SELECT count(*) FROM hit;
