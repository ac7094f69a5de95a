"""The seed's "Generate Video" pipeline (§7), built from Python processors, run by real worker processes.

script -> voice and image in parallel -> video -> compositing: each stage is
a processor that makes the next ones (``Result.next_jobs``). Two
``jobctl worker --app`` processes share the store, and one is SIGKILLed,
either in the middle of a stage or between submitting a stage's next jobs
and completing it. Every stage takes an exclusive ``flock`` of its own while
it runs and writes ``DOUBLE`` when it finds it taken: no stage may run twice
at once, none may be lost, none duplicated, and every result is stored.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from workertools import gone, wait_until

from jobctl import FileStore, Record, results, schedule
from jobctl.store.location import address

pytestmark = pytest.mark.timeout(120)

APP = textwrap.dedent(
    '''
    """The Generate Video pipeline's processors, for the test (written next to it as gv_app.py)."""
    import fcntl
    import os
    import signal
    import time

    import jobctl

    MARKS = os.environ["GV_MARKS"]
    worker = jobctl.Worker(os.environ["GV_STORE"], concurrency=2, ttl=2.0, grace=0.5, poll_interval=0.05)


    def note(what, job):
        line = f"{what} {job.kind} {job.id} {os.getpid()}\\n".encode()
        fd = os.open(os.path.join(MARKS, "events"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)


    def stage(job, seconds):
        """Hold the stage's own lock while it works; a second holder at once is a DOUBLE."""
        lock = open(os.path.join(MARKS, job.id + ".lock"), "a")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            note("DOUBLE", job)
            lock.close()
            raise
        try:
            note("start", job)
            end = time.monotonic() + seconds
            while time.monotonic() < end and not job.stop_requested:
                time.sleep(0.02)
                job.progress(min(100, int(100 - 100 * (end - time.monotonic()) / seconds)), 100)
            note("end", job)
        finally:
            lock.close()


    @worker.processor("script_generation")
    def script(job):
        stage(job, 0.3)
        text = "A script about " + job.spec["topic"]
        voice = jobctl.NewJob("voice_synthesis", {"text": text})
        image = jobctl.NewJob("image_generation", {"prompt": text})
        video = jobctl.NewJob("video_generation", {"fps": 24}, after=[voice, image])
        return jobctl.Result(data={"chars": len(text)}, next_jobs=[voice, image, video])


    @worker.processor("voice_synthesis")
    async def voice(job):
        import asyncio

        await asyncio.sleep(0)
        stage(job, 0.3)
        return {"voice": "voice.mp3", "words": len(job.spec["text"].split())}


    @worker.processor("image_generation")
    def image(job):
        stage(job, 0.3)
        return {"image": "image.png"}


    @worker.processor("video_generation")
    def video(job):
        stage(job, float(os.environ.get("GV_VIDEO_SECONDS", "1.5")))
        return jobctl.Result(data={"video": "video.mp4", "fps": job.spec["fps"]},
                             next_jobs=[jobctl.NewJob("compositing", {"layers": 2})])


    @worker.processor("compositing")
    def compositing(job):
        stage(job, 0.2)
        return {"final": "final.mp4"}


    if os.environ.get("GV_DIE_BEFORE_COMPLETING"):
        # Die in the gap the next jobs' derived ids exist for: after they are
        # submitted, before the write that completes their parent.
        store = worker.store
        real_update = store.update

        def update(job_id, epoch, mutate):
            probe = store.load(job_id)
            if probe.kind == os.environ["GV_DIE_BEFORE_COMPLETING"]:
                mutate(probe)
                if probe.state == "complete":
                    fd = os.open(os.path.join(MARKS, "events"), os.O_WRONLY | os.O_APPEND)
                    os.write(fd, f"dying {probe.kind} {job_id} {os.getpid()}\\n".encode())
                    os.kill(os.getpid(), signal.SIGKILL)
            return real_update(job_id, epoch, mutate)

        store.update = update
    '''
)

KINDS = ["script_generation", "voice_synthesis", "image_generation", "video_generation", "compositing"]


class Pipeline:
    def __init__(self, tmp_path: Path, store: Any) -> None:
        self.dir = tmp_path
        self.store = store
        self.marks = tmp_path / "marks"
        self.marks.mkdir()
        (tmp_path / "gv_app.py").write_text(APP)
        self.procs: list[subprocess.Popen[bytes]] = []

    def worker(self, **env: str) -> subprocess.Popen[bytes]:
        full = dict(os.environ, GV_STORE=address(self.store), GV_MARKS=str(self.marks), **env)
        proc = subprocess.Popen(
            [sys.executable, "-m", "jobctl", "worker", "--app", "gv_app:worker", "--quiet"],
            cwd=self.dir,
            env=full,
            stdin=subprocess.DEVNULL,
        )
        self.procs.append(proc)
        return proc

    def events(self) -> list[tuple[str, str, str, int]]:
        path = self.marks / "events"
        if not path.exists():
            return []
        out = []
        for line in path.read_text().splitlines():
            what, kind, job_id, pid = line.split()
            out.append((what, kind, job_id, int(pid)))
        return out

    def count(self, what: str, kind: str) -> int:
        return sum(1 for w, k, _, _ in self.events() if (w, k) == (what, kind))

    def submit(self) -> str:
        rec = Record(kind="script_generation", spec={"topic": "otters"})
        schedule.plan(rec, pipeline="generate-video")
        return self.store.submit(rec)

    def all_complete(self) -> bool:
        recs = [self.store.load(i) for i in self.store.ids()]
        return len(recs) == len(KINDS) and all(r.state == "complete" for r in recs)

    def check_the_promise(self, ran_again: str = "") -> None:
        """Every stage once in the store, complete, with its result; none ever ran twice at once.

        ``ran_again``: the stage whose first run ended but was never completed (its worker died).
        """
        recs = {r.kind: r for r in (self.store.load(i) for i in self.store.ids())}
        assert sorted(recs) == sorted(KINDS) and len(self.store.ids()) == len(KINDS)  # none lost, none duplicated
        for kind, rec in recs.items():
            assert rec.state == "complete", (kind, rec.state, rec.error)
            assert results.has_result(rec), kind
            assert schedule.pipeline_of(rec) == ("generate-video", kind)
        assert results.result_of(recs["video_generation"]) == {"video": "video.mp4", "fps": 24}
        assert results.result_of(recs["compositing"]) == {"final": "final.mp4"}
        assert results.result_of(recs["voice_synthesis"])["words"] == 4
        assert not [e for e in self.events() if e[0] == "DOUBLE"]
        for kind in KINDS:
            assert self.count("end", kind) == (2 if kind == ran_again else 1), kind  # each stage's work ended once

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture
def pipeline(tmp_path: Path, store: FileStore) -> Iterator[Pipeline]:
    """On the directory store, then on PostgreSQL (the workers open it from its URL; see conftest)."""
    p = Pipeline(tmp_path, store)
    yield p
    p.stop()


def test_two_workers_one_killed_mid_stage_run_every_stage_once(pipeline: Pipeline) -> None:
    pipeline.submit()
    first, second = pipeline.worker(), pipeline.worker()
    by_pid = {first.pid: first, second.pid: second}
    started = wait_until(
        lambda: [e for e in pipeline.events() if e[:2] == ("start", "video_generation")], what="the video stage"
    )
    victim = by_pid[started[0][3]]
    victim.send_signal(signal.SIGKILL)  # in the middle of the video stage
    victim.wait(10)
    assert pipeline.count("end", "video_generation") == 0  # it really was cut off mid-stage
    wait_until(pipeline.all_complete, timeout=60, what="every stage complete")
    pipeline.check_the_promise()
    # The stage the killed worker held was adopted and run again, by the other worker.
    video_starts = [e[3] for e in pipeline.events() if e[:2] == ("start", "video_generation")]
    survivor = (set(by_pid) - {victim.pid}).pop()
    assert video_starts == [victim.pid, survivor]
    for kind in KINDS:
        if kind != "video_generation":
            assert pipeline.count("start", kind) == 1, kind
    assert gone(victim.pid)


def test_a_worker_killed_between_submitting_next_jobs_and_completing_duplicates_nothing(pipeline: Pipeline) -> None:
    parent = pipeline.submit()
    doomed = pipeline.worker(GV_DIE_BEFORE_COMPLETING="script_generation")
    doomed.wait(30)
    assert doomed.returncode == -signal.SIGKILL
    # The next stages were submitted, their parent not yet completed.
    assert pipeline.store.load(parent).state == "running"
    assert len(pipeline.store.ids()) == 4
    children = sorted(pipeline.store.ids())
    pipeline.worker()  # its successor re-runs the script stage once the lease lapses
    wait_until(pipeline.all_complete, timeout=60, what="every stage complete")
    pipeline.check_the_promise(ran_again="script_generation")
    assert pipeline.count("start", "script_generation") == 2  # run again, and submitted the same ids again
    assert set(children) <= set(pipeline.store.ids())
    for kind in KINDS[1:]:
        assert pipeline.count("start", kind) == 1, kind
