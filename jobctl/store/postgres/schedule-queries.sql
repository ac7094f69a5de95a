-- The statements of recurring schedules (schedules.sql), loaded by name as queries.sql is.

-- name: schedule_add
INSERT INTO jobctl_schedules (name, every, cron, kind, spec, added_by, created_at)
VALUES (%(name)s, %(every)s, %(cron)s, %(kind)s, %(spec)s, %(by)s, %(created_at)s)
ON CONFLICT (name) DO NOTHING
RETURNING name;

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
