#!/bin/sh
# The main job of jobctl, on a real file store: work that survives its worker.
#
# A producer submits a download and a batch of shell jobs. Worker A claims the
# download, records a checkpoint and dies without a word. Once its lease
# lapses, the job is an orphan; worker B adopts it and resumes from A's
# checkpoint, and A's late write is refused by the epoch fence. Then a real
# worker drains the shell jobs, dependencies first.
set -eu

store=${DEMO_STORE:-./demo-store}
rm -rf "$store"
export JOB_STORE="$store"
# Bold headings on a terminal only: never escape codes into a pipe, a file or under NO_COLOR.
if [ -t 1 ] && [ -z "${NO_COLOR:-}" ] && [ "${TERM:-dumb}" != dumb ]; then
    say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
else
    say() { printf '\n== %s\n' "$*"; }
fi

say "submit a job (the spec is kept byte for byte: 1.50 stays 1.50)"
id=$(jobctl submit --kind download --total 4096 \
    --spec '{"url": "https://example.invalid/big.iso", "chunk": 1.50}')
echo "$id"

say "worker A claims it for 2 seconds and checkpoints 1 KiB"
jobctl claim "$id" --owner worker-a --ttl 2
epoch_a=1
JOB_ID=$id JOB_EPOCH=$epoch_a jobctl checkpoint '{"offset": 1024}' --done 1024

say "worker A dies (nobody renews); while its lease lives nobody may take the job"
jobctl claim "$id" --owner worker-b --ttl 30 || echo "exit $? (lease_held)"
sleep 2.2

say "the next start finds the orphan"
jobctl orphans

say "worker B adopts the oldest runnable orphan and resumes from A's checkpoint"
vars=$(jobctl claim --next --owner worker-b --ttl 30 --format env)
echo "$vars"
eval "$vars"
epoch_b=$JOB_EPOCH

say "worker A wakes up and writes: refused by the epoch fence"
JOB_ID=$id JOB_EPOCH=$epoch_a jobctl checkpoint '{"offset": 2048}' || echo "exit $? (stale_epoch)"

say "worker B finishes the job, with its final checkpoint in the same write"
jobctl finish "$id" --epoch "$epoch_b" --state complete --checkpoint '{"offset": 4096}' --done 4096
jobctl show "$id"

say "a pipeline of shell jobs: fetch, then two conversions in parallel, then a report"
fetch=$(jobctl submit --kind shell --pipeline nightly --stage fetch \
    --spec '{"argv": ["sh", "-c", "sleep 0.2; echo fetched"]}')
a=$(jobctl submit --kind shell --pipeline nightly --stage convert --after "$fetch" \
    --spec '{"argv": ["sh", "-c", "sleep 0.3; echo converted a"]}')
b=$(jobctl submit --kind shell --pipeline nightly --stage convert --after "$fetch" \
    --spec '{"argv": ["sh", "-c", "sleep 0.3; echo converted b"]}')
jobctl submit --kind shell --pipeline nightly --stage report --after "$a" --after "$b" \
    --spec '{"argv": ["sh", "-c", "echo report"]}' >/dev/null
jobctl worker --drain --concurrency 2 --ttl 10
jobctl pipeline nightly

say "what the fetch stage printed (one log per attempt)"
jobctl logs "$fetch"

say "every job in the store"
jobctl list
