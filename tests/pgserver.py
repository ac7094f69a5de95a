"""A throwaway PostgreSQL server for the tests, or an existing one named by a variable.

``JOBCTL_TEST_PG_URL`` points the tests at a server somebody else runs;
otherwise one is started from Debian's server binaries (``pg_config
--bindir``, then ``/usr/lib/postgresql/*/bin``): ``initdb`` into a temporary
directory, the Unix socket inside it and no TCP listener, ``pg_ctl start``,
and ``pg_ctl stop`` at the end of the session. The server refuses to run as
root, so under root the directory is handed to the ``postgres`` system user
and the server runs as that user. Each test gets a fresh schema of its own.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

URL_ENV = "JOBCTL_TEST_PG_URL"
PORT = 5432


def bindir() -> str | None:
    """The directory holding ``initdb`` and ``pg_ctl``, or None when there is none."""
    candidates = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        try:
            out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=True, timeout=10)
            candidates.append(out.stdout.strip())
        except (OSError, subprocess.SubprocessError):
            pass
    candidates.extend(sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True))
    for path in candidates:
        if os.access(os.path.join(path, "initdb"), os.X_OK) and os.access(os.path.join(path, "pg_ctl"), os.X_OK):
            return path
    return None


class Server:
    """One server for the session: started, asked for fresh schemas, stopped."""

    def __init__(self, url: str, data: str | None = None, bin: str | None = None, user: str | None = None) -> None:
        self.url = url
        self.data = data
        self.bin = bin
        self.user = user

    @classmethod
    def start(cls, bin: str) -> Server:
        user = None
        if os.geteuid() == 0:
            user = "postgres"
            try:
                pwd.getpwnam(user)
            except KeyError:
                raise RuntimeError("running as root, and there is no postgres system user to run the server") from None
        top = tempfile.mkdtemp(prefix="jobctl-pg-")
        data = os.path.join(top, "data")
        if user is not None:
            entry = pwd.getpwnam(user)
            os.chown(top, entry.pw_uid, entry.pw_gid)
        server = cls("", data=data, bin=bin, user=user)
        server.top = top
        server._run("initdb", "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
        server.options = f"-k {top} -c listen_addresses='' -p {PORT} -c fsync=off -c synchronous_commit=off"
        try:
            server._pg_ctl("start")
        except RuntimeError:
            log = os.path.join(top, "log")
            tail = Path(log).read_text(errors="replace")[-2000:] if os.path.exists(log) else ""
            shutil.rmtree(top, ignore_errors=True)
            raise RuntimeError(f"the test server did not start:\n{tail}") from None
        server.url = f"postgresql://postgres@/postgres?host={quote(top, safe='')}&port={PORT}"
        return server

    top = ""
    options = ""

    @property
    def restartable(self) -> bool:
        """True for a server this suite started (one named by ``JOBCTL_TEST_PG_URL`` is somebody else's)."""
        return self.data is not None

    def restart(self, while_down: Callable[[], object] | None = None) -> None:
        """Stop the server (fast: every session is ended, open transactions rolled back) and start it again.

        The same data directory, socket and options: what was committed is
        there after, and every connection from before is gone. ``while_down``
        runs between the stop and the start.
        """
        if not self.restartable:
            raise RuntimeError("this server was not started by the tests; it is not theirs to restart")
        if while_down is None:
            self._pg_ctl("restart", "-m", "fast")
            return
        self._pg_ctl("stop", "-m", "fast")
        try:
            while_down()
        finally:
            self._pg_ctl("start")

    def _pg_ctl(self, *action: str) -> None:
        assert self.data is not None
        log = os.path.join(self.top, "log")
        self._run("pg_ctl", "-D", self.data, "-o", self.options, "-l", log, "-w", "-t", "60", *action)

    def _run(self, tool: str, *args: str) -> None:
        assert self.bin is not None
        proc = subprocess.run(
            [os.path.join(self.bin, tool), *args],
            capture_output=True,
            text=True,
            timeout=120,
            user=self.user,
            cwd="/",
            stdin=subprocess.DEVNULL,
            check=False,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"{tool} failed ({proc.returncode}): {proc.stderr.strip() or proc.stdout.strip()}")

    def stop(self) -> None:
        if self.data is None:
            return
        try:
            self._run("pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.top, ignore_errors=True)

    def fresh_schema(self) -> str:
        """A URL whose connections see only a new, empty schema."""
        import psycopg

        name = "t_" + uuid.uuid4().hex[:16]
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {name}")  # a name made here, of [0-9a-f_t] only
        sep = "&" if "?" in self.url else "?"
        return f"{self.url}{sep}options={quote(f'-csearch_path={name}', safe='')}"


def for_bench(name: str) -> Server | None:
    """A benchmark's server: the one :data:`URL_ENV` names, else a throwaway one; None (said) without binaries."""
    url = os.environ.get(URL_ENV, "")
    if url:
        return Server(url)
    bin = bindir()
    if bin is None:
        print(f"{name}: skipped: no PostgreSQL server binaries (apt-get install postgresql)")
        return None
    return Server.start(bin)


#: ``n`` jobs of kind ``k`` straight into a store's table (schema version 3), in state ``%(state)s``,
#: the oldest ``n`` seconds ago, their ids ``%(prefix)s<n>``. Only the columns a row cannot do without.
ROWS = (
    "INSERT INTO jobctl_jobs (id, kind, state, spec, done, total, progress_at, owner, epoch, expires_at,"
    " requires, error, extension_keys, extension_values, created_at, updated_at, content, critical, after,"
    " scheduled)"
    " SELECT %(prefix)s || n, 'k', %(state)s, '{}', 0, 0, now(), '', %(epoch)s, '1970-01-01Z', '{}', '',"
    " '{}', '{}', now() - n * interval '1 second', now(), %(models)s, %(models)s, '{}', true"
    " FROM generate_series(1, %(n)s) AS n"
)


def add_rows(url: str, n: int, state: str = "complete") -> None:
    """``n`` jobs in ``state`` (:data:`ROWS`): finished ones are what a pick must not slow for."""
    import psycopg

    finished = state in ("complete", "failed", "cancelled")
    models = ["abstraction.job/base@1", *(["abstraction.job/terminal@1"] if finished else [])]
    params = {"prefix": f"{state}-", "state": state, "epoch": 1 if finished else 0, "models": models, "n": n}
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(ROWS.encode(), params)
