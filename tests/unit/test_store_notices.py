"""How a store says its records changed (Store.notices), and the watch that rides on it, on every backend.

The file store's notices are inotify on ``jobs/``; PostgreSQL's are LISTEN on
the channel the schema-2 trigger sends on. ``watch`` [JOB-N1] keeps its rules
(present first, coalescing, quiet, a renewal is no change) over either.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import jobctl
from jobctl import Record

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the file store's notices are inotify's"),
    pytest.mark.timeout(90),
]

#: A poll interval no test waits out: what arrives before it came by a notice.
LONG_POLL = 600.0
#: How long a test waits for what a notice brings (far less than LONG_POLL, far more than it takes).
SOON = 30.0


def submit_elsewhere(address: str, kind: str = "k", after: float = 0.0) -> subprocess.Popen[str]:
    """Submit a job from another process, as another host's jobctl would, ``after`` seconds from now.

    The delay lets the caller be waiting in ``next()`` (past its read on entry)
    when the write comes; :func:`submitted` gives the id.
    """
    code = (
        "import sys, time, jobctl; time.sleep(float(sys.argv[3]));"
        " print(jobctl.open_store(sys.argv[1]).submit(jobctl.Record(kind=sys.argv[2], spec={})))"
    )
    return subprocess.Popen([sys.executable, "-c", code, address, kind, str(after)], stdout=subprocess.PIPE, text=True)


def submitted(proc: subprocess.Popen[str]) -> str:
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0
    return out.strip()


def next_within(w: jobctl.Watch, seconds: float) -> jobctl.Notice:
    """``w.next()`` with no timeout of its own, which must answer within ``seconds``.

    ``next(timeout=...)`` reads the store once more when the timeout passes,
    so it cannot tell a notice from a last look; this can. Without notices
    the watch would sleep out its poll interval (LONG_POLL) first.
    """
    got: list[jobctl.Notice | None] = []
    waiter = threading.Thread(target=lambda: got.append(w.next()), daemon=True)
    waiter.start()
    waiter.join(seconds)
    if not got:
        pytest.fail(f"no notice within {seconds:g} s; the watch's poll interval is {LONG_POLL:g} s")
    notice = got[0]
    assert notice is not None
    return notice


def address_of(store: Any) -> str:
    return str(getattr(store, "url", None) or store.root)


def test_notices_name_the_records_written_and_removed(any_store: Any) -> None:
    s = any_store
    notices = s.notices()
    assert notices is not None
    try:
        assert notices.read() == (set(), set())
        a = s.submit(Record(kind="k", spec={}))
        epoch = s.claim(a, "w", 30).lease.epoch
        b = s.submit(Record(kind="k", spec={}))
        assert notices.read() == ({a, b}, set())
        assert notices.read() == (set(), set())  # drained
        s.finish(a, epoch, "complete")
        assert s.remove(a)
        assert notices.read() == (set(), {a})  # written, then removed: the last word stands
    finally:
        notices.close()


def test_a_watch_sees_a_submit_from_another_process_without_waiting_the_poll(any_store: Any) -> None:
    s = any_store
    first = s.submit(Record(kind="k", spec={}))
    w = jobctl.Watch(s, "k", poll=LONG_POLL)
    present = w.next()
    assert present is not None and present.what == "changed" and [r.id for r in present.records] == [first]
    proc = submit_elsewhere(address_of(s), after=1.0)
    notice = next_within(w, SOON)  # a polling watch would say nothing for LONG_POLL
    assert notice.what == "changed"
    assert [r.id for r in notice.records] == [first, submitted(proc)]
    w.close()
    assert w.next().what == "closed"  # type: ignore[union-attr]  # and its listener with it


def test_watch_rules_hold_present_first_coalescing_quiet_and_a_renewal_is_no_change(any_store: Any) -> None:
    """[JOB-N1] on every backend, with notices doing the waking."""
    s = any_store
    w = jobctl.Watch(s, "k", budget=0.3, poll=LONG_POLL)
    present = w.next()
    assert present is not None and (present.what, present.records) == ("changed", [])  # the present, even empty
    quiet = w.next(timeout=SOON)
    assert quiet is not None and quiet.what == "quiet"
    made = [s.submit(Record(kind="k", spec={})) for _ in range(3)]
    s.submit(Record(kind="other", spec={}))  # another kind's record is nobody's news here
    coalesced = w.next(timeout=SOON)
    assert coalesced is not None and coalesced.what == "changed"
    # Three writes, one notice with the latest. The records come in list order: ids minted in one
    # millisecond order by their random part, not by when they were made.
    assert [r.id for r in coalesced.records] == sorted(made)
    epoch = s.claim(made[0], "w", 30).lease.epoch
    claimed = w.next(timeout=SOON)
    assert claimed is not None and claimed.what == "changed"
    assert {r.id: r.lease.owner for r in claimed.records}[made[0]] == "w"
    s.renew(made[0], epoch, 60)
    after = w.next(timeout=SOON)
    assert after is not None and after.what == "quiet"  # the renewal woke it; nothing visible moved
    w.close()
    closed = w.next()
    assert closed is not None and closed.what == "closed"


# -- PostgreSQL only: what a connection adds -----------------------------------------------


def test_a_listener_keeps_to_its_own_schema(pg_store: Any, pg_server: Any) -> None:
    """One database, two stores (schemas): the trigger names the schema, and each listener keeps its own."""
    from jobctl.store import postgres

    other_url = pg_server.fresh_schema()
    postgres.init(other_url)
    notices = pg_store.notices()
    try:
        with postgres.PostgresStore(other_url) as other:
            other.submit(Record(kind="k", spec={}))
        assert notices.read() == (set(), set())
        mine = pg_store.submit(Record(kind="k", spec={}))
        assert notices.read() == ({mine}, set())
    finally:
        notices.close()


def backend_pid(notices: Any) -> int:
    pid: int = notices._conn.info.backend_pid  # the listening connection's server process
    return pid


def terminate(url: str, pid: int) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone()
        assert row == (True,)


def test_a_dropped_listening_connection_is_made_again_and_says_notices_were_lost(pg_store: Any) -> None:
    s = pg_store
    notices = s.notices()
    try:
        old = backend_pid(notices)
        terminate(s.url, old)
        lost = s.submit(Record(kind="k", spec={}))  # sent while nobody listened
        assert notices.read() is None  # look at everything: the notice of `lost` never came
        assert backend_pid(notices) != old
        later = s.submit(Record(kind="k", spec={}))
        assert notices.read() == ({later}, set())
        assert lost != later
    finally:
        notices.close()


def test_a_watch_outlives_its_listening_connection(pg_store: Any) -> None:
    s = pg_store
    w = jobctl.Watch(s, "k", poll=LONG_POLL)
    assert w.next() is not None
    assert w._changes is not None
    terminate(s.url, backend_pid(w._changes._notices))
    proc = submit_elsewhere(s.url, after=1.0)
    notice = next_within(w, SOON)  # it finds the connection gone, listens again, and hears the write
    job = submitted(proc)
    assert [r.id for r in notice.records] == [job]
    proc = submit_elsewhere(s.url, after=1.0)
    notice = next_within(w, SOON)  # and the new connection brings the next one
    assert [r.id for r in notice.records] == [job, submitted(proc)]
    w.close()
    assert w.next().what == "closed"  # type: ignore[union-attr]  # and its listener with it


def test_migrate_moves_a_version_1_schema_to_pushed_changes(pg_url: str, tmp_path: Path) -> None:
    """A store made by the jobctl of schema 1 is refused until `jobctl db migrate`, then notices work on it."""
    from jobctl.errors import Refused
    from jobctl.store import postgres

    assert postgres.init(pg_url, target=1) == (0, 1)
    with pytest.raises(Refused, match=f"has schema version 1; this jobctl needs {postgres.SCHEMA_VERSION}"):
        postgres.PostgresStore(pg_url)
    ran = subprocess.run(
        [str(Path(sys.executable).parent / "jobctl"), "db", "migrate", "--store", pg_url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    with postgres.PostgresStore(pg_url) as s:
        assert s.schema_version == postgres.SCHEMA_VERSION
        notices = s.notices()
        try:
            job = s.submit(Record(kind="k", spec={}))
            assert notices.read() == ({job}, set())
        finally:
            notices.close()
