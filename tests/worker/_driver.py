"""Run one :class:`jobctl.worker.Worker` in this process, for tests/worker's real-process tests.

``python _driver.py STORE MODE OPTIONS_JSON``: STORE is a directory or a
database URL; OPTIONS are Worker keyword
arguments. Every event goes to stdout as one JSON line, flushed, so the test
can react to ``started``; SIGTERM/SIGINT stop the worker as the CLI's would.
The summary is the last line.
"""

from __future__ import annotations

import json
import sys

from jobctl import open_store
from jobctl.worker import Event, Worker


def main() -> None:
    root, mode, options = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])

    def report(event: Event) -> None:
        sys.stdout.write(json.dumps({"what": event.what, "id": event.job_id, "detail": event.detail}) + "\n")
        sys.stdout.flush()

    worker = Worker(open_store(root), on_event=report, **options)
    sys.stdout.write(json.dumps({"what": "ready", "owner": worker.owner}) + "\n")
    sys.stdout.flush()
    with worker.signals():
        summary = worker.run(mode)
    sys.stdout.write(json.dumps({"what": "summary", "counts": summary.counts}) + "\n")


if __name__ == "__main__":
    main()
