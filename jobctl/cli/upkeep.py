"""Keeping a store healthy: ``init``, ``sweep``, and ``paths`` (alias ``doctor``)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import click

from .. import discovery
from ..errors import NoStore
from ..store.file import FileStore
from ..store.location import masked
from . import render
from .main import EXIT_FAILURE, PATH_TEXT, TEXT, JobCommand, State, common, complete_ids, pass_state

__all__ = ["init", "sweep", "paths", "doctor", "check_lock", "check_rename", "check_access", "check_owner"]

#: What every failed ownership check ends with: the model, and where to go instead.
ONE_USER = "a file store belongs to one user (docs/security.md); for several users, use the PostgreSQL store"


@click.command(cls=JobCommand, short_help="Create a store (jobs/ and work/) at DIR or the configured root.")
@click.argument("directory", metavar="[DIR]", required=False, type=PATH_TEXT)
@common
@pass_state
def init(state: State, directory: str | None) -> None:
    """Create a store at DIR (default: the root jobctl would use); print its root.

    Besides `submit` and `import`, this is the only command that creates a store: every
    other one given a root with no store exits 16 (no_store) naming the root
    and where it came from, so a mistyped --store or JOB_STORE is seen at
    once instead of hiding every job behind an empty store. An existing
    store is left as it is.

    \b
    Examples:
      jobctl init /srv/jobs
      JOB_STORE=/srv/jobs jobctl init
    """
    if directory is not None:
        root, rung = directory, "the DIR argument"
    else:
        root, rung = discovery.resolve(state.store_flag, state.env, warn=lambda line: click.echo(line, err=True))
    from ..store.location import is_database_url

    if is_database_url(root):
        raise click.UsageError("a database store is made with `jobctl db init`, not `jobctl init`")
    store = discovery.open_store(root, rung, create=True)
    assert isinstance(store, FileStore)  # a path, not a URL (above)
    if state.json:
        render.out_json({"root": store.root, "jobs": store.jobs_dir, "work": store.work_dir})
    else:
        render.out(store.root)


@click.command(cls=JobCommand, short_help="Remove temporaries left by writers that were killed mid-write.")
@click.argument("job_id", metavar="[ID]", required=False, type=TEXT, shell_complete=complete_ids)
@common
@pass_state
def sweep(state: State, job_id: str | None) -> None:
    """Remove stale staging files (`<id>.json.<u>.tmp`) of job ID, or of every job; print `removed=N`.

    A writer killed between staging a record and renaming it over the old
    one leaves its temporary behind. Sweeping takes each record's lock, so it
    never touches a write in progress. A record whose lock is refused (a
    link planted at its name, say) is left as it is and the others swept:
    `removed=N` is printed all the same, then one line a refusal on stderr,
    and the exit code is the first refusal's (9, invalid, for a link).

    \b
    Example (cron, nightly):
      17 3 * * * jobctl sweep >/dev/null
    """
    from ..errors import JobError
    from .main import refusal_line

    refused: list[JobError] = []
    removed = state.store().sweep(job_id, refused)
    if state.json:
        render.out_json({"removed": removed})
    else:
        render.out(f"removed={removed}")
    if refused:  # after the count: what was swept was swept; each refusal then one line, the first's exit code
        for exc in refused[1:]:
            click.echo(refusal_line(exc, "sweep"), err=True)
        raise refused[0]


def check_lock(root: str) -> str:
    """``ok`` when ``flock`` excludes a second open of the same file in the store's ``jobs/``, else why not."""
    import fcntl

    from .. import fsio
    from ..errors import JobError

    jobs_dir = os.path.join(root, "jobs")
    name = f".jobctl-probe-{os.getpid()}-{os.urandom(4).hex()}.lock"
    path = os.path.join(jobs_dir, name)
    try:
        at = fsio.open_dir(root, "jobs")  # the root followed, jobs/ not: a link there is refused
    except OSError as exc:
        return f"FAILED: cannot open {jobs_dir}: {exc.strerror or exc}"
    except JobError as exc:
        return f"FAILED: {exc}"
    try:
        try:
            first = fsio.open_lock(at, name)
        except JobError as exc:
            return f"FAILED: cannot create {path}: {exc}"
        try:
            second = fsio.open_lock(at, name)
            try:
                fcntl.flock(first, fcntl.LOCK_EX)
                try:
                    fcntl.flock(second, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    return "ok"
                return "FAILED: flock did not exclude a second holder; writers here would overwrite each other"
            finally:
                os.close(second)
        except (OSError, JobError) as exc:
            return f"FAILED: flock: {getattr(exc, 'strerror', None) or exc}"
        finally:
            os.close(first)
            try:
                fsio.unlink(at, name)
            except OSError:
                pass
    finally:
        at.close()


def check_rename(root: str) -> str:
    """``ok`` when a record-style write (stage, fsync, rename over, fsync the directory) works in ``jobs/``."""
    from .. import fsio, lock
    from ..errors import JobError

    name = f".jobctl-probe-{os.getpid()}-{os.urandom(4).hex()}"
    try:
        at = fsio.open_dir(root, "jobs")  # the root followed, jobs/ not: a link there is refused
    except OSError as exc:
        return f"FAILED: {exc.strerror or exc}"
    except JobError as exc:
        return f"FAILED: {exc}"
    try:
        lock.change(at, name, lambda current: b"first\n")
        lock.change(at, name, lambda current: (current or b"") + b"second\n")
        if lock.read(at, name) != b"first\nsecond\n":
            return "FAILED: the renamed file does not hold what was written"
        return "ok"
    except OSError as exc:
        return f"FAILED: {exc.strerror or exc}"
    except JobError as exc:
        return f"FAILED: {exc}"
    finally:
        for leftover in (name, name + ".lock"):
            try:
                fsio.unlink(at, leftover)
            except OSError:
                pass
        at.close()


def _user(uid: int) -> str:
    import pwd

    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def check_access(*directories: str) -> str:
    """``ok`` when the current user may list, create and remove files in each directory, else which not."""
    bad = [d for d in directories if not os.access(d, os.R_OK | os.W_OK | os.X_OK)]
    if not bad:
        return "ok"
    return f"FAILED: {_user(os.geteuid())} cannot write {', '.join(bad)}; {ONE_USER}"


def check_owner(jobs_dir: str, shown: int = 3) -> str:
    """``ok`` when every record and lock in ``jobs_dir`` is the current user's to read and write, else which not.

    Records and locks are 0600 [JOB-L3]: another user's cannot be read or
    locked, and a record root rewrites becomes root's, locking its owner out.
    Links and other odd files are not judged here (lstat, nothing followed).
    """
    import stat

    me = os.geteuid()
    foreign: dict[int, list[str]] = {}
    unusable: list[str] = []
    try:
        with os.scandir(jobs_dir) as entries:
            names = sorted(e.name for e in entries if e.name.endswith((".json", ".json.lock")))
    except OSError as exc:
        return f"FAILED: cannot list {jobs_dir}: {exc.strerror or exc}; {ONE_USER}"
    for name in names:
        path = os.path.join(jobs_dir, name)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        except OSError as exc:
            unusable.append(f"{name} ({exc.strerror})")
            continue
        if not stat.S_ISREG(st.st_mode):
            continue
        if st.st_uid != me:
            foreign.setdefault(st.st_uid, []).append(name)
        elif not os.access(path, os.R_OK | os.W_OK, follow_symlinks=False):
            unusable.append(name)
    if not foreign and not unusable:
        return "ok"
    parts = []
    for uid, files in sorted(foreign.items()):
        more = f" and {len(files) - shown} more" if len(files) > shown else ""
        parts.append(f"{len(files)} owned by {_user(uid)}: {', '.join(files[:shown])}{more}")
    if unusable:
        more = f" and {len(unusable) - shown} more" if len(unusable) > shown else ""
        parts.append(f"{len(unusable)} not readable and writable: {', '.join(unusable[:shown])}{more}")
    return f"FAILED: records or locks {_user(me)} cannot fully use: {'; '.join(parts)}; {ONE_USER}"


def check_leases(state: State, store: Any) -> str:
    """``ok`` when no lease runs further ahead than max_ttl; else which, and the way out (recall)."""
    from ..errors import Invalid

    try:
        listing = store.list()
        flagged = sorted(state.long_leases(listing))
    except Invalid as exc:
        return f"FAILED: {exc.message}"
    except OSError as exc:
        return f"FAILED: cannot list the store: {exc.strerror or exc}"
    if not flagged:
        return "ok"
    return (
        f"FAILED: {len(flagged)} lease(s) run more than max_ttl ({state.max_ttl():g} s) ahead: "
        f"{', '.join(flagged)}; nobody renews such a lease: jobctl recall ID --reason ... (docs/howto/recovery.md)"
    )


def _facts(state: State) -> tuple[list[tuple[str, str]], bool]:
    """Every resolved setting, and whether the store is fit to use."""
    problems: list[str] = []
    root, rung = discovery.resolve(state.store_flag, state.env, warn=problems.append)
    config = discovery.config_path()
    store_named, problem = discovery.read_config(config)
    if problem:
        config_status = f"ignored: it {problem}"
    elif store_named:
        config_status = f"names {masked(store_named)}"
    elif os.path.exists(config):
        config_status = "names no store"
    else:
        config_status = "absent"
    facts = [("root", masked(root)), ("rung", rung), ("config", config), ("config_status", config_status)]
    from ..store.location import is_database_url

    if is_database_url(root):  # who and where, the connection, the privileges, the clock
        from ..store.postgres import health as postgres_health

        found, healthy = postgres_health.examine(root)
        return facts + found, healthy
    healthy = True
    try:
        store = discovery.open_store(root, rung)
    except discovery.Unavailable as exc:
        facts.append(("check_open", "FAILED: " + exc.lines[0].removeprefix("jobctl: ")))
        return facts, False
    except NoStore as exc:  # a missing store is a failed check, not ok (jobctl init creates one)
        facts.append(("check_open", f"FAILED: {exc.message}; jobctl init creates it"))
        return facts, False
    assert isinstance(store, FileStore)  # a path, not a URL (above)
    facts += [("jobs", store.jobs_dir), ("work", store.work_dir), ("check_open", "ok")]
    checks: tuple[tuple[str, Callable[[], str]], ...] = (
        ("check_access", lambda: check_access(store.jobs_dir, store.work_dir)),
        ("check_owner", lambda: check_owner(store.jobs_dir)),
        # By the root: jobs/ is opened again not followed, so a link swapped in since the store opened is refused.
        ("check_lock", lambda: check_lock(store.root)),
        ("check_rename", lambda: check_rename(store.root)),
        ("check_leases", lambda: check_leases(state, store)),
    )
    for name, check in checks:
        verdict = check()
        healthy = healthy and verdict == "ok"
        facts.append((name, verdict))
    return facts, healthy


def _paths(state: State) -> None:
    from .. import settings  # only here: the worker's settings, from flags' absence down

    facts, healthy = _facts(state)
    worker = settings.describe()
    screen = state.screen()
    if state.json:
        obj: dict[str, Any] = dict(facts)
        obj["healthy"] = healthy
        obj["worker"] = [{"name": name, "value": value, "source": source} for name, value, source in worker]
        render.out_json(obj)
    elif screen.terminal:
        render.print_pairs(screen, facts)
        render.print_pairs(
            screen, [(f"worker {name}", f"{value}  ({source})" if source else value) for name, value, source in worker]
        )
    else:
        for key, value in facts:
            render.out(f"{key}={value}")
        for name, value, source in worker:
            render.out(f"worker.{name.replace(' ', '.')}={value}" + (f" ({source})" if source else ""))
    if not healthy:
        click.get_current_context().exit(EXIT_FAILURE)


_PATHS_HELP = """Print where the store is and why, and check that it works.

The root, the rung that chose it (--store, JOB_STORE, ABSTRACTION_STORE,
the config file, or the default), the per-user config file and what it
says, then the checks: the store opens (a root with no store fails this
check; `jobctl init` creates one); jobs/ and work/ are writable by the
current user; every record and lock is the current user's to read and
write (a file store belongs to one user; several users want the
PostgreSQL store); flock excludes a second holder; a write by rename
lands; no lease runs more than max_ttl ahead (jobctl recall ends one).
On a database store (a postgresql:// URL, its password masked): the
server, database, user, schema and schema version, then the checks: the
connection; the store opens (`jobctl db init` creates one); the role may
read and write the jobs table; the role does not own the tables or their
schema (a warning); this host's clock is within 1 s of the server's (a
warning). Exit 1 when a check fails; a warning does not fail. Last, the worker's settings (jobctl worker,
jobctl run): each value and where it came from -- environment, config file
or default.

\b
Example:
  jobctl paths
  JOB_STORE=/srv/jobs jobctl doctor --json
"""


@click.command(cls=JobCommand, help=_PATHS_HELP, short_help="Show the store root, who chose it, and check it.")
@common
@pass_state
def paths(state: State) -> None:
    _paths(state)


@click.command(cls=JobCommand, help=_PATHS_HELP, short_help="The same as paths.")
@common
@pass_state
def doctor(state: State) -> None:
    _paths(state)
