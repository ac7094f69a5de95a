"""A worker that holds secrets, for test_secrets.py: ``python _secret_driver.py STORE PREFIX``.

It submits one ``shell`` job running ``_snoop.py PREFIX`` (with this
interpreter) and runs a worker until the store is idle. Its secrets: the
environment it was given (``PGPASSWORD``, ``WEBHOOK_SECRET``), and
``FD_SECRET``, which it moves out of its environment into a memfd it keeps
open, as a worker keeps a connection or a key file open.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from jobctl import Record, open_store
from jobctl.worker import Worker

HERE = Path(__file__).resolve().parent


def main() -> None:
    root, prefix = sys.argv[1], sys.argv[2]
    held = os.memfd_create("held")  # inherited by no child: close_fds
    os.write(held, os.environ.pop("FD_SECRET").encode())
    store = open_store(root)
    store.submit(Record(kind="shell", spec={"argv": [sys.executable, str(HERE / "_snoop.py"), prefix]}))
    summary = Worker(store, ttl=10.0, poll_interval=0.05).run("drain")
    print(summary.counts, flush=True)
    os.close(held)


if __name__ == "__main__":
    main()
