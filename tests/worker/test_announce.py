"""Running workers say what they handle; ``show`` and the job's JSON name a pending job nothing running handles.

On both stores, with real worker processes: the word is there while a
worker loops (renewed past its own expiry), gone at once after a clean
stop, and gone by expiry alone after a SIGKILL. ``show`` says nothing while
no worker has spoken, names an unhandled kind, and is silent about a handled
one. On a directory, what is planted among the words (garbage, links, FIFOs,
directories, a link at a worker's own name or in place of the directory) is
passed over or refused in one line, never followed, with no traceback.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from workertools import WorkerProcess, job_argv, no_config, submit, wait_until

from jobctl import FileStore
from jobctl.errors import Invalid
from jobctl.roster import Announcer, announce_ttl, roster_of
from jobctl.store.workers import file_name
from jobctl.worker import Worker

pytestmark = pytest.mark.timeout(120)

NOTE = "no running worker handles kind"


def jobctl(root: Any, *args: str) -> subprocess.CompletedProcess[str]:
    """The real command line on the store, its config file the test's own (absent)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JOB_", "JOBCTL_"))}
    env.update(JOB_STORE=str(root), JOBCTL_CONFIG=no_config())
    return subprocess.run([sys.executable, "-m", "jobctl", *args], env=env, capture_output=True, text=True, timeout=60)


def shown(root: Any, job_id: str) -> tuple[Any, str]:
    """``show --json``'s ``unhandled``, and plain ``show``'s stderr; neither may hold a traceback."""
    as_json = jobctl(root, "show", job_id, "--json")
    plain = jobctl(root, "show", job_id)
    for ran in (as_json, plain):
        assert ran.returncode == 0, ran.stderr
        assert "Traceback" not in ran.stderr, ran.stderr
    return json.loads(as_json.stdout)["unhandled"], plain.stderr


def owners(store: FileStore) -> list[str]:
    return [a.owner for a in store.announcements()]


def test_show_names_a_pending_kind_no_running_worker_handles(
    store: FileStore, root: Any, workers: Callable[..., WorkerProcess]
) -> None:
    render = submit(store, ["true"], kind="render")
    held = submit(store, ["true"], hold=True, by="ops")  # shell, pending, and no worker starts it
    assert shown(root, render) == (None, "")  # nobody has said what they handle: nothing is said

    worker = workers(handlers={"fetch": "true"})
    wait_until(lambda: owners(store) == [worker.owner], what="the worker's word")
    word = store.announcements()[0]
    assert word.kinds == {"shell", "fetch"}

    unhandled, err = shown(root, render)
    assert unhandled is True
    assert f"job {render}: {NOTE} render (the running workers handle: fetch, shell)" in err
    assert shown(root, held) == (False, "")  # a kind a running worker handles: nothing to say
    lines = jobctl(root, "list", "--json").stdout.splitlines()
    listed = {job["id"]: job["unhandled"] for job in map(json.loads, lines)}
    assert listed == {render: True, held: False}

    worker.signal(signal.SIGTERM)  # a clean stop takes its word back at once
    assert worker.wait() == 0
    assert store.announcements() == []
    assert shown(root, render) == (None, "")


def test_a_killed_worker_is_forgotten_when_its_word_expires_and_a_live_one_renews(
    store: FileStore, root: Any, workers: Callable[..., WorkerProcess]
) -> None:
    render = submit(store, ["true"], kind="render")
    lasting = workers(ttl=2.0)  # its word lasts 2 s: it must renew it to stay
    killed = workers(ttl=2.0)
    wait_until(lambda: set(owners(store)) == {lasting.owner, killed.owner}, what="both words")
    killed.kill()
    assert set(owners(store)) == {lasting.owner, killed.owner}  # SIGKILL takes nothing back ...
    wait_until(lambda: owners(store) == [lasting.owner], timeout=10, what="the killed worker's word to expire")
    time.sleep(3 * 2.0)  # ... and the live one's word outlives its own expiry many times over
    assert owners(store) == [lasting.owner]
    assert shown(root, render)[0] is True
    lasting.signal(signal.SIGTERM)
    assert lasting.wait() == 0
    assert store.announcements() == []


def test_a_stopping_worker_takes_its_word_back_before_its_last_job_ends(
    store: FileStore, tmp_path: Path, workers: Callable[..., WorkerProcess]
) -> None:
    """Asked to stop, a worker claims nothing more: a pending job is no longer its to run, at once."""
    mine, other = tmp_path / "mine", tmp_path / "other"
    job = submit(store, job_argv("barrier", mine, other))
    worker = workers(shutdown_grace=30.0)
    wait_until(mine.exists, what="the job to start")
    assert owners(store) == [worker.owner]
    worker.signal(signal.SIGTERM)
    worker.next_event(lambda e: e["what"] == "stopping")
    assert worker.proc.poll() is None  # still running its job ...
    assert store.announcements() == []  # ... but no longer saying it handles anything
    other.touch()
    worker.next_event(lambda e: e["what"] == "complete" and e["id"] == job)
    assert worker.wait() == 0


def test_the_command_line_worker_and_its_kinds(store: FileStore, root: Any, tmp_path: Path) -> None:
    """``jobctl worker`` itself: --kind narrows what it says, and SIGTERM takes the word back."""
    resize = submit(store, ["true"], kind="resize")
    held = submit(store, ["true"], kind="fetch", hold=True, by="ops")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JOB_", "JOBCTL_"))}
    env.update(JOB_STORE=str(root), JOBCTL_CONFIG=no_config())
    flags = ["--handler", "fetch=true", "--handler", "resize=true", "--kind", "fetch", "--poll-interval", "0.1"]
    with (tmp_path / "worker.err").open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "jobctl", "worker", *flags, "--ttl", "3"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
        try:
            got = wait_until(store.announcements, what="the worker's word")
            assert [a.kinds for a in got] == [{"fetch"}]  # resize has a handler, but --kind leaves it out
            assert shown(root, resize)[0] is True
            assert shown(root, held)[0] is False
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(30) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert store.announcements() == []
    assert "Traceback" not in (tmp_path / "worker.err").read_text()


def test_renewals_are_few_and_off_the_job_path(store: FileStore) -> None:
    """A worker that runs many jobs writes its word every third of its expiry, not once a job."""
    writes: list[float] = []
    announce = store.announce

    def counted(owner: str, kinds: Any, ttl_seconds: float) -> None:
        writes.append(time.monotonic())
        announce(owner, kinds, ttl_seconds)

    store.announce = counted  # type: ignore[method-assign]
    for _ in range(60):
        submit(store, [sys.executable, "-c", "pass"])
    worker = Worker(store, poll_interval=0.05, ttl=3.0, grace=0.5, concurrency=2)
    began = time.monotonic()
    summary = worker.run("drain")
    took = time.monotonic() - began
    assert summary["complete"] == 60
    ttl = announce_ttl(3.0, 0.05)
    assert 1 <= len(writes) <= 1 + took / (ttl / 3) + 1, (len(writes), took)
    assert store.announcements() == []  # drain's end takes it back


def test_an_announcer_renews_at_a_third_and_says_a_refusal_once() -> None:
    class Flaky:
        def __init__(self) -> None:
            self.calls: list[str] = []
            self.refuse = True

        def announce(self, owner: str, kinds: Any, ttl_seconds: float) -> None:
            self.calls.append("announce")
            if self.refuse:
                raise Invalid("work/.jobctl/workers is a symbolic link, not a directory")

        def withdraw(self, owner: str) -> None:
            self.calls.append("withdraw")

    store, said = Flaky(), []
    word = Announcer(store, "w@h:1", ["shell"], 9.0, said.append)
    for at in (0.0, 1.0, 2.9, 3.0, 5.0, 6.0):
        word.tick(at)
    assert store.calls == ["announce"] * 3  # at 0, 3 and 6: never between
    assert said == ["cannot say what this worker handles: work/.jobctl/workers is a symbolic link, not a directory"]
    store.refuse = False
    word.tick(9.0)
    word.withdraw()
    word.withdraw()
    word.tick(100.0)
    assert store.calls == ["announce"] * 4 + ["withdraw"]  # taken back once; nothing after


@pytest.mark.file_only("planted files and links in the store's directory")
def test_planted_words_are_passed_over_without_a_traceback(store: FileStore, root: Any, tmp_path: Path) -> None:
    render = submit(store, ["true"], kind="render")
    store.announce("real@host:1", ["shell"], 60)
    words = Path(store.root, "work", ".jobctl", "workers")
    outside = tmp_path / "outside.json"
    forged = {"owner": "forged@host:2", "kinds": ["render"], "expires_at": "2999-01-01T00:00:00.000000Z"}
    outside.write_text(json.dumps(forged))
    (words / file_name("forged@host:2")).symlink_to(outside)  # a link: never followed
    (words / "garbage.json").write_bytes(b"\xff{not json")
    (words / "list.json").write_text("[1, 2]")
    (words / "wrong-name.json").write_text(json.dumps(forged))  # a word under another worker's name
    bad = {"owner": "bad@host:3", "kinds": "render", "expires_at": "2999-01-01T00:00:00.000000Z"}
    (words / file_name("bad@host:3")).write_text(json.dumps(bad))
    (words / file_name("dir@host:4")).mkdir()
    os.mkfifo(words / file_name("fifo@host:5"))
    big = {**forged, "owner": "big@host:6", "pad": "x" * (70 << 10)}
    (words / file_name("big@host:6")).write_text(json.dumps(big))
    expired = {**forged, "owner": "old@host:7", "expires_at": "2000-01-01T00:00:00.000000Z"}
    (words / file_name("old@host:7")).write_text(json.dumps(expired))

    assert [(a.owner, a.kinds) for a in store.announcements()] == [("real@host:1", {"shell"})]
    assert roster_of(store).unhandled(store.load(render))
    unhandled, err = shown(root, render)
    assert unhandled is True and f"{NOTE} render (the running workers handle: shell)" in err

    # A worker's own name taken by a link or a FIFO: refused in one line, the link's target untouched.
    target = tmp_path / "target.json"
    target.write_text("mine")
    (words / file_name("mine@host:8")).symlink_to(target)
    with pytest.raises(Invalid, match=r"is a symbolic link, not a worker's announcement.*does not follow links"):
        store.announce("mine@host:8", ["shell"], 60)
    with pytest.raises(Invalid, match="is a FIFO, not a worker's announcement"):
        store.announce("fifo@host:5", ["shell"], 60)
    assert target.read_text() == "mine"
    assert sorted(p.name for p in words.iterdir() if p.name.endswith(".tmp")) == []  # no temporary left behind


@pytest.mark.file_only("a link in place of the store's directory of words")
def test_a_worker_whose_word_cannot_be_written_says_so_once_and_works(
    store: FileStore, tmp_path: Path, workers: Callable[..., WorkerProcess]
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    jobctl_dir = Path(store.root, "work", ".jobctl")
    jobctl_dir.mkdir(parents=True, exist_ok=True)
    (jobctl_dir / "workers").symlink_to(elsewhere)
    worker = workers(ttl=1.0)
    job = submit(store, ["true"])
    worker.next_event(lambda e: e["what"] == "complete" and e["id"] == job)
    time.sleep(1.0)  # a few renewals' worth
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    said = [e for e in worker.seen if e["what"] == "unannounced"]
    assert len(said) == 1, worker.seen
    assert "is a symbolic link, not a directory" in said[0]["detail"]
    assert list(elsewhere.iterdir()) == []  # nothing written through the link
    assert store.announcements() == []


@pytest.mark.file_only("what a killed worker leaves in the directory")
def test_a_starting_worker_removes_words_long_expired(store: FileStore, tmp_path: Path) -> None:
    words = Path(store.root, "work", ".jobctl", "workers")
    store.announce("gone@host:1", ["shell"], -3600)  # expired an hour ago
    store.announce("recent@host:2", ["shell"], -1)  # expired just now: its worker may be only stopped
    (words / "x.json.0123456789.tmp").write_text("half")
    os.utime(words / "x.json.0123456789.tmp", (time.time() - 3600, time.time() - 3600))
    (words / "y.json.0123456789.tmp").write_text("being written")
    (words / "notes.txt").write_text("not ours")
    store.announce("new@host:3", ["shell"], 60)
    left = sorted(p.name for p in words.iterdir())
    assert left == sorted([file_name("recent@host:2"), file_name("new@host:3"), "y.json.0123456789.tmp", "notes.txt"])
    assert oct(os.stat(words / file_name("new@host:3")).st_mode & 0o777) == "0o600"
