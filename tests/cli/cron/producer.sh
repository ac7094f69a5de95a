#!/usr/bin/env bash
# A cron producer: submit N fetch jobs and print their ids, oldest first.
#   crontab: 0 * * * * producer.sh 3
set -eu
n=${1:-3}
for i in $(seq 1 "$n"); do
    jobctl submit --kind fetch --spec "{\"source\": \"s$i\", \"chunks\": 10}" --total 10
done
