"""Keeping a store healthy: ``init``, ``sweep``, and ``paths`` (alias ``doctor``)."""

from __future__ import annotations

import os
from typing import Any

import click

from .. import discovery
from ..errors import NoStore
from . import render
from .main import EXIT_FAILURE, TEXT, JobCommand, State, common, complete_ids, pass_state

__all__ = ["init", "sweep", "paths", "doctor", "check_lock", "check_rename"]


@click.command(cls=JobCommand, short_help="Create a store (jobs/ and work/) at DIR or the configured root.")
@click.argument("directory", metavar="[DIR]", required=False, type=TEXT)
@common
@pass_state
def init(state: State, directory: str | None) -> None:
    """Create a store at DIR (default: the root jobctl would use); print its root.

    Besides `submit`, this is the only command that creates a store: every
    other one given a root with no store exits 14 (no_store) naming the root
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
    store = discovery.open_store(root, rung, create=True)
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
    never touches a write in progress.

    \b
    Example (cron, nightly):
      17 3 * * * jobctl sweep >/dev/null
    """
    removed = state.store().sweep(job_id)
    if state.json:
        render.out_json({"removed": removed})
    else:
        render.out(f"removed={removed}")


def check_lock(jobs_dir: str) -> str:
    """``ok`` when ``flock`` excludes a second open of the same file here, else why not."""
    import fcntl

    path = os.path.join(jobs_dir, f".jobctl-probe-{os.getpid()}-{os.urandom(4).hex()}.lock")
    try:
        first = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        return f"FAILED: cannot create {path}: {exc.strerror or exc}"
    try:
        second = os.open(path, os.O_RDWR)
        try:
            fcntl.flock(first, fcntl.LOCK_EX)
            try:
                fcntl.flock(second, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return "ok"
            return "FAILED: flock did not exclude a second holder; writers here would overwrite each other"
        finally:
            os.close(second)
    except OSError as exc:
        return f"FAILED: flock: {exc.strerror or exc}"
    finally:
        os.close(first)
        try:
            os.unlink(path)
        except OSError:
            pass


def check_rename(jobs_dir: str) -> str:
    """``ok`` when a record-style write (stage, fsync, rename over, fsync the directory) works here."""
    from .. import lock

    path = os.path.join(jobs_dir, f".jobctl-probe-{os.getpid()}-{os.urandom(4).hex()}")
    try:
        lock.change(path, lambda current: b"first\n")
        lock.change(path, lambda current: (current or b"") + b"second\n")
        if lock.read(path) != b"first\nsecond\n":
            return "FAILED: the renamed file does not hold what was written"
        return "ok"
    except OSError as exc:
        return f"FAILED: {exc.strerror or exc}"
    finally:
        for leftover in (path, path + ".lock"):
            try:
                os.unlink(leftover)
            except OSError:
                pass


def _facts(state: State) -> tuple[list[tuple[str, str]], bool]:
    """Every resolved setting, and whether the store is fit to use."""
    problems: list[str] = []
    root, rung = discovery.resolve(state.store_flag, state.env, warn=problems.append)
    config = discovery.config_path()
    store_named, problem = discovery.read_config(config)
    if problem:
        config_status = f"ignored: it {problem}"
    elif store_named:
        config_status = f"names {store_named}"
    elif os.path.exists(config):
        config_status = "names no store"
    else:
        config_status = "absent"
    facts = [("root", root), ("rung", rung), ("config", config), ("config_status", config_status)]
    healthy = True
    try:
        store = discovery.open_store(root, rung)
    except discovery.Unavailable as exc:
        facts.append(("check_open", "FAILED: " + exc.lines[0].removeprefix("jobctl: ")))
        return facts, False
    except NoStore as exc:  # a missing store is a failed check, not ok (jobctl init creates one)
        facts.append(("check_open", f"FAILED: {exc.message}; jobctl init creates it"))
        return facts, False
    facts += [("jobs", store.jobs_dir), ("work", store.work_dir), ("check_open", "ok")]
    for name, check in (("check_lock", check_lock), ("check_rename", check_rename)):
        verdict = check(store.jobs_dir)
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
says, then three checks in the store's jobs/ directory: it opens (a root
with no store fails this check; `jobctl init` creates one), flock excludes
a second holder, and a write by rename lands. Exit 1 when a check fails.
Last, the worker's settings (jobctl worker, jobctl run): each value and
where it came from -- environment, config file or default.

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
