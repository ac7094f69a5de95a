#!/usr/bin/env bash
# The cron scenario of issue 3, end to end, with the installed jobctl on PATH.
# Run by tests/cli/test_cli_cron.py as: scenario.sh <empty work directory>
#
# A producer submits three jobs. Consumer A claims the oldest, checkpoints it and is
# killed with SIGKILL. Once its lease lapses `jobctl orphans` lists the job with A's
# checkpoint; consumer B claims it with `claim --next` and resumes from there. A's
# late write (its old epoch) is refused with stale_epoch (exit 5), the record untouched;
# B finishes all three jobs.
set -u
here=$(cd "$(dirname "$0")" && pwd)
work=$1
export JOB_STORE="$work/store"
unset JOB_ID JOB_EPOCH JOB_OWNER ABSTRACTION_STORE

fail() { echo "FAIL: $*" >&2; for f in "$work"/*.log; do echo "--- $f" >&2; cat "$f" >&2; done; exit 1; }
wait_for() {  # wait_for SECONDS COMMAND...: poll until COMMAND succeeds (a deadline, not a timing claim)
    local deadline=$((SECONDS + $1)); shift
    until "$@"; do
        [ "$SECONDS" -lt "$deadline" ] || return 1
        sleep 0.1
    done
}

echo "== producer submits three jobs"
bash "$here/producer.sh" 3 > "$work/ids" || fail "producer exited $?"
[ "$(wc -l < "$work/ids")" -eq 3 ] || fail "producer printed $(wc -l < "$work/ids") ids"
first=$(head -n 1 "$work/ids")
[ "$(jobctl orphans | wc -l)" -eq 3 ] || fail "three new jobs are three orphans"

echo "== consumer A claims the oldest job, checkpoints twice, and is killed with SIGKILL"
HOLD_AT=2 HOLD_FILE="$work/held-a" GO_FILE="$work/never" TTL=3 bash "$here/consumer.sh" A > "$work/a.log" 2>&1 &
a=$!
wait_for 60 test -s "$work/held-a" || fail "consumer A never got to chunk 2"
read -r held_id held_epoch < "$work/held-a"
[ "$held_id" = "$first" ] || fail "A took $held_id, not the oldest job $first"
[ "$held_epoch" = 1 ] || fail "A holds epoch $held_epoch, not 1"
kill -KILL "$a" || fail "could not kill consumer A"  # no trap, no cleanup: it just stops
wait "$a" 2>/dev/null

echo "== after the lease lapses, orphans lists the job with A's checkpoint"
orphaned() { jobctl orphans | grep -qxF "$first kind=fetch state=running checkpoint={\"offset\":2}"; }
wait_for 60 orphaned || fail "orphans never listed $first: $(jobctl orphans)"

echo "== consumer B claims it with claim --next and resumes from the checkpoint"
HOLD_AT=5 HOLD_FILE="$work/held-b" GO_FILE="$work/go-b" bash "$here/consumer.sh" B > "$work/b.log" 2>&1 &
b=$!
wait_for 60 test -s "$work/held-b" || fail "consumer B never got to chunk 5"
grep -qxF "B took $first epoch=2 from=2" "$work/b.log" || fail "B did not resume $first from offset 2"

echo "== A's late write, with its old epoch, is refused: stale_epoch, exit 5, record untouched"
before=$(cat "$JOB_STORE/jobs/$first.json")
JOB_ID=$first JOB_EPOCH=$held_epoch jobctl checkpoint '{"offset": 3}' > "$work/stale.out" 2> "$work/stale.err"
rc=$?
[ "$rc" -eq 5 ] || fail "the stale write exited $rc, not 5: $(cat "$work/stale.err")"
[ ! -s "$work/stale.out" ] || fail "the refused write printed on stdout"
[ "$(wc -l < "$work/stale.err")" -eq 1 ] || fail "the refusal is not one line"
grep -q "^jobctl: stale_epoch: .*$first" "$work/stale.err" || fail "the refusal does not name verdict and job"
[ "$(cat "$JOB_STORE/jobs/$first.json")" = "$before" ] || fail "the refused write changed the record"

echo "== B finishes all three jobs"
touch "$work/go-b"
wait "$b" || fail "consumer B exited $?"
[ "$(jobctl list --state complete | wc -l)" -eq 3 ] || fail "not all complete: $(jobctl list)"
[ "$(grep -c '^B finished ' "$work/b.log")" -eq 3 ] || fail "B did not finish three jobs"
jobctl list | grep -qxF "$first kind=fetch state=complete done=10 checkpoint={\"offset\":10}" ||
    fail "first job: $(jobctl list)"
[ -z "$(jobctl orphans)" ] || fail "orphans left behind: $(jobctl orphans)"

echo "== once the job has ended, A's epoch gets terminal (exit 7)"
JOB_ID=$first JOB_EPOCH=$held_epoch jobctl checkpoint '{}' 2>/dev/null
rc=$?
[ "$rc" -eq 7 ] || fail "a write to an ended job exited $rc, not 7"
echo "ok"
