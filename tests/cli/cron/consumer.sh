#!/usr/bin/env bash
# A cron consumer: claim runnable fetch jobs one after another, resume each from its
# checkpoint, checkpoint after every chunk, finish it; exit 0 once nothing is runnable.
#   crontab: * * * * * consumer.sh "$(hostname)"
#
# Test hook: with HOLD_AT=N it stops after checkpointing chunk N of its first job,
# writes "<id> <epoch>" to $HOLD_FILE and waits until $GO_FILE exists (or until killed).
set -u
owner=$1
ttl=${TTL:-30}
held=""
while :; do
    vars=$(jobctl claim --next --kind fetch --owner "$owner" --ttl "$ttl" --format env)
    rc=$?
    if [ "$rc" -eq 3 ]; then
        exit 0                                  # not_found: nothing runnable, done for now
    elif [ "$rc" -ne 0 ]; then
        echo "$owner: claim --next exited $rc" >&2
        exit 1
    fi
    eval "export $vars"                         # JOB_ID JOB_EPOCH JOB_KIND JOB_CHECKPOINT
    offset=$(printf '%s' "$JOB_CHECKPOINT" | sed -n 's/.*"offset":\([0-9][0-9]*\).*/\1/p')
    offset=${offset:-0}
    echo "$owner took $JOB_ID epoch=$JOB_EPOCH from=$offset"
    while [ "$offset" -lt 10 ]; do
        offset=$((offset + 1))                  # ... one chunk of real work here ...
        if ! jobctl checkpoint "{\"offset\": $offset}" --done "$offset" >/dev/null; then
            echo "$owner lost $JOB_ID"          # stale_epoch / lease_expired / terminal: not ours any more
            continue 2
        fi
        if [ -z "$held" ] && [ "${HOLD_AT:-0}" -eq "$offset" ]; then
            held=1
            echo "$JOB_ID $JOB_EPOCH" > "$HOLD_FILE"
            until [ -e "$GO_FILE" ]; do sleep 0.05; done
        fi
    done
    jobctl finish --state complete --done "$offset" >/dev/null && echo "$owner finished $JOB_ID"
done
