"""One worker process against a PostgreSQL store, for test_postgres_processes.py.

``_pg_worker.py URL OWNER LOG [--die-after K | --freeze-after K]`` picks jobs
with ``claim_next`` until none is left that is not complete, and for each
one makes a fenced write (``progress``), then finishes it ``complete``. Every
step that went through is appended to LOG as one line (O_APPEND, one write
per line, so lines from several processes never interleave)::

    ready - - OWNER                     (connected; waits for LOG.go before its first claim)
    claim ID EPOCH OWNER
    effect ID EPOCH OWNER SERVER-TIME   (progress accepted; its stamp is the server's clock)
    done ID EPOCH OWNER
    refused ID EPOCH OWNER VERDICT

``--die-after K`` SIGKILLs itself right after its K-th claim, holding the
lease; ``--freeze-after K`` SIGSTOPs itself there, and carries on (with a
stale epoch) when the test sends SIGCONT. Every worker starts claiming only
once the test creates ``LOG.go``, after all of them said ``ready``: a worker
whose start-up is slow would otherwise find the jobs taken by the others
before its K-th claim, and never die or freeze.
"""

from __future__ import annotations

import os
import signal
import sys
import time

from jobctl.errors import JobError
from jobctl.record import format_time
from jobctl.store.postgres import PostgresStore

TTL = 1.5


def main() -> int:
    url, owner, log_path = sys.argv[1:4]
    die = freeze = 0
    if len(sys.argv) == 6:
        die = int(sys.argv[5]) if sys.argv[4] == "--die-after" else 0
        freeze = int(sys.argv[5]) if sys.argv[4] == "--freeze-after" else 0
    log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def note(line: str) -> None:
        os.write(log, (line + "\n").encode())

    store = PostgresStore(url)
    store.list()  # connected, the driver imported: what a slow start costs is paid before the start line
    note(f"ready - - {owner}")
    go = log_path + ".go"
    deadline = time.monotonic() + 60
    while not os.path.exists(go):
        if time.monotonic() > deadline:
            return 2
        time.sleep(0.01)
    claims = 0
    while True:
        rec = store.claim_next(owner, TTL)
        if rec is None:
            if all(r.state == "complete" for r in store.list()):
                return 0
            time.sleep(0.05)  # a lease somebody holds has yet to lapse
            continue
        job_id, epoch = rec.id, rec.lease.epoch
        claims += 1
        note(f"claim {job_id} {epoch} {owner}")
        if claims == die:
            os.kill(os.getpid(), signal.SIGKILL)
        if claims == freeze:
            note(f"frozen {job_id} {epoch} {owner}")
            os.kill(os.getpid(), signal.SIGSTOP)
        try:
            done = store.progress(job_id, epoch, 1)
            assert done.progress.updated_at is not None
            note(f"effect {job_id} {epoch} {owner} {format_time(done.progress.updated_at)}")
            store.finish(job_id, epoch, "complete")
            note(f"done {job_id} {epoch} {owner}")
        except JobError as exc:
            note(f"refused {job_id} {epoch} {owner} {exc.verdict}")


if __name__ == "__main__":
    sys.exit(main())
