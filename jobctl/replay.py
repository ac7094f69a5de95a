"""The conformance replay driver: ``python -m jobctl.replay``.

Obeys the upstream driver protocol (``abstractions/conformance/DRIVER.md``)::

    replay --capabilities        store
    replay --models              one "<name> critical-ok|never-critical" a line, sorted
    replay --refusals            the refusal words, sorted
    replay <workdir> <scenario>  run the scenario against <workdir>/store
    replay --store URL <workdir> <scenario>
                                 run it against the (initialised, empty) store URL names,
                                 a directory or a postgresql:// database

Each operation prints ``NN <line> -> <answer>``. A record operation answers
its verdict and then the record's eleven fields as loaded afterwards.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

from . import fsio, ids, lock
from .errors import JobError, NotFound
from .record import MODELS, Record, held
from .store.file import FileStore
from .store.location import open_store
from .watch import Watch
from .wire import JsonText

if TYPE_CHECKING:
    from .store.postgres import PostgresStore

__all__ = ["Driver", "main", "REFUSALS"]

REFUSALS = (
    "invalid",
    "lease_expired",
    "lease_held",
    "not_found",
    "refused",
    "stale_epoch",
    "terminal",
    "unknown_schema",
)


def _artifact(size: int) -> bytes:
    return bytes(i % 251 for i in range(size))


class Driver:
    """Runs scenario lines against ``store`` (a path or URL), by default a file store at ``<workdir>/store``."""

    def __init__(self, workdir: str, out: TextIO, store: str | None = None) -> None:
        self.workdir = workdir
        self.store = open_store(store) if store else FileStore(os.path.join(workdir, "store"))
        self.out = out
        self.aliases: dict[str, str] = {}
        self.epochs: dict[str, int] = {}
        self.watches: dict[str, Watch] = {}
        self.holds: dict[str, tuple[int, subprocess.Popen[bytes] | None]] = {}
        self.count = 0

    # -- answers -------------------------------------------------------------

    def fields(self, rec: Record) -> str:
        lease = rec.lease
        recall = lease.recall.reason if lease.recall is not None else "none"
        cp = rec.checkpoint_text()
        if cp is None or cp == "null":
            cp = "none"
        return (
            f"state={rec.state} epoch={lease.epoch} held={'yes' if held(lease, self.store.now()) else 'no'} "
            f"recall={recall} want={rec.want} done={rec.progress.done} "
            f"err={'set' if rec.error else 'none'} cp={cp} content={','.join(rec.content)} "
            f"crit={','.join(rec.critical)} awake={'yes' if self._awake(rec) else 'no'}"
        )

    def answer(self, alias: str, verdict: str) -> str:
        job_id = self.aliases.get(alias)
        if job_id is None:
            return "not_found"
        try:
            rec = self.store.load(job_id)
        except JobError as exc:
            return exc.verdict
        return f"{verdict} {self.fields(rec)}"

    def run_op(self, alias: str, op: Callable[[str], object]) -> str:
        job_id = self.aliases.get(alias)
        if job_id is None:
            return "not_found"
        try:
            op(job_id)
            verdict = "ok"
        except JobError as exc:
            verdict = exc.verdict
        return self.answer(alias, verdict)

    # -- awake hold [JOB-H1] -----------------------------------------------------

    def _awake(self, rec: Record) -> bool:
        got = self.holds.get(rec.id)
        if got is None:
            return False
        epoch, proc = got
        alive = (
            proc is not None
            and proc.poll() is None
            and rec.lease.epoch == epoch
            and not rec.terminal
            and held(rec.lease, self.store.now())
            and rec.delegation is None
        )
        if not alive:
            self._drop_hold(rec.id)
        return alive

    def _drop_hold(self, job_id: str) -> None:
        got = self.holds.pop(job_id, None)
        if got is not None and got[1] is not None and got[1].poll() is None:
            got[1].terminate()
            got[1].wait()

    def hold(self, alias: str) -> str:
        job_id = self.aliases.get(alias)
        if job_id is None:
            return "not_found"
        rec = self.store.load(job_id)
        self._drop_hold(job_id)
        inhibit = shutil.which("systemd-inhibit")
        proc = None
        if inhibit and held(rec.lease, self.store.now()) and not rec.terminal:
            # Keeps idle sleep away while the lease lives; no inhibitor, no hold.
            proc = subprocess.Popen(
                [
                    inhibit,
                    "--what=idle:sleep",
                    "--mode=block",
                    "--who=jobctl",
                    f"--why=job {job_id}",
                    "sleep",
                    "infinity",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            time.sleep(0.05)
        self.holds[job_id] = (rec.lease.epoch, proc)
        return self.answer(alias, "ok")

    # -- operations ----------------------------------------------------------

    def submit(self, alias: str, args: list[str]) -> str:
        opts = dict(a.split("=", 1) for a in args if "=" in a)
        size = int(opts.get("size", "0"))
        data = _artifact(size)
        digest = "sha256:" + (hashlib.sha256(data).hexdigest() if opts.get("digest", "good") == "good" else "0" * 64)
        job_id = ids.mint()
        src = opts.get("src", "file")
        source_dir = os.path.join(self.workdir, "sources")
        os.makedirs(source_dir, exist_ok=True)
        if src.startswith("http:"):
            source = {"scheme": "http", "locator": f"http://127.0.0.1:{src[5:] or '0'}/{alias}.bin"}
        elif src == "nofetcher":
            source = {"scheme": "gopher", "locator": f"gopher://example.invalid/{alias}"}
        else:
            path = os.path.join(source_dir, f"{alias}.bin")
            if src == "file":
                with open(path, "wb") as fh:
                    fh.write(data)
            source = {"scheme": "file", "locator": path}
        if "cred" in opts:
            source["credential"] = opts["cred"]
        final = f"models/{alias}.bin"
        if opts.get("sink") == "abs":
            final = os.path.join(self.workdir, "elsewhere", f"{alias}.bin")
        elif opts.get("sink") == "foreign":
            final = f"jobs/{alias}.json"
        spec = {
            "artifact": {"digest": digest, "size": size},
            "sources": [source],
            "sink": {"partial": f"work/{job_id}", "final": final},
        }
        rec = Record(id=job_id, kind="download", spec=spec)
        rec.progress.total = size
        try:
            self.store.submit(rec)
        except JobError as exc:
            return exc.verdict
        self.aliases[alias] = job_id
        return self.answer(alias, "ok")

    def claim(self, alias: str, owner: str, ttl_ms: str) -> str:
        def op(job_id: str) -> None:
            rec = self.store.claim(job_id, owner, int(ttl_ms) / 1000)
            self.epochs[owner] = rec.lease.epoch

        return self.run_op(alias, op)

    def plant(self, alias: str, where: str, name: str) -> str:
        job_id = self.aliases.get(alias)
        if job_id is None:
            return "not_found"
        plant(self.store, job_id, where, name)
        return self.answer(alias, "ok")

    def orphans(self) -> str:
        offered = {r.id for r in self.store.orphans()}
        names = sorted(alias for alias, job_id in self.aliases.items() if job_id in offered)
        return "ok " + (" ".join(names) if names else "-")

    def jobs(self, records: list[Record]) -> str:
        by_id = {job_id: alias for alias, job_id in self.aliases.items()}
        named = sorted(f"{by_id[r.id]}={r.state}/{r.progress.done}" for r in records if r.id in by_id)
        return " ".join(named) if named else "-"

    def next(self, name: str) -> str:
        sub = self.watches.get(name)
        if sub is None:
            return "not_found"
        notice = sub.next()
        assert notice is not None
        if notice.what == "closed":
            return "closed"
        return f"{notice.what} {self.jobs(notice.records)}"

    def step(self, words: list[str]) -> str:
        op, args = words[0], words[1:]
        s = self.store
        try:
            if op == "submit":
                return self.submit(args[0], args[1:])
            if op == "claim":
                return self.claim(args[0], args[1], args[2])
            if op == "renew":
                return self.run_op(args[0], lambda i: s.renew(i, self.epochs.get(args[1], 0), int(args[2]) / 1000))
            if op == "progress":
                if len(args) > 3:
                    text = " ".join(args[3:])
                    return self.run_op(
                        args[0], lambda i: s.progress(i, self.epochs.get(args[1], 0), int(args[2]), JsonText(text))
                    )
                return self.run_op(args[0], lambda i: s.progress(i, self.epochs.get(args[1], 0), int(args[2])))
            if op == "release":
                return self.run_op(args[0], lambda i: s.release(i, self.epochs.get(args[1], 0)))
            if op == "finish":
                return self.run_op(args[0], lambda i: s.finish(i, self.epochs.get(args[1], 0), args[2]))
            if op == "intent":
                return self.run_op(args[0], lambda i: s.set_intent(i, args[1], "replay"))
            if op == "recall":
                reason = " ".join(args[3:])
                return self.run_op(
                    args[0], lambda i: s.recall(i, self.epochs.get(args[1], 0), reason, "replay", int(args[2]) / 1000)
                )
            if op == "state":
                return self.answer(args[0], "ok")
            if op == "orphans":
                return self.orphans()
            if op == "plant":
                return self.plant(args[0], args[1], args[2])
            if op == "hold":
                return self.hold(args[0])
            if op == "watch":
                budget = int(args[1]) / 1000 if len(args) > 1 else 0.0
                self.watches[args[0]] = Watch(s, "download", budget)
                return "ok"
            if op == "next":
                return self.next(args[0])
            if op == "close":
                sub = self.watches.get(args[0])
                if sub is None:
                    return "not_found"
                sub.close()
                return "ok"
            if op == "sleep":
                time.sleep(int(args[0]) / 1000)
                return "ok"
        except IndexError:
            return "invalid"
        except NotFound:
            return "not_found"
        return "unknown-op"

    def run(self, lines: list[str]) -> None:
        for raw in lines:
            line = raw.rstrip("\r\n").rstrip(" \r").lstrip()
            if not line or line.startswith("#"):
                continue
            self.count += 1
            answer = self.step(line.split())
            self.out.write(f"{self.count:02d} {line} -> {answer}\n")
            self.out.flush()

    def close(self) -> None:
        for job_id in list(self.holds):
            self._drop_hold(job_id)


def plant(store: FileStore | PostgresStore, job_id: str, where: str, name: str) -> None:
    """``plant``: forge a model name into a record's ``content`` list (and ``critical``'s, for ``critical``).

    A textual edit of the record's bytes, as a writer that knows the name
    would leave them [JOB-D1]; a conforming writer cannot make it, since it
    validates its own declaration on the way out.
    """

    def forge(current: bytes) -> bytes:
        out = []
        for line in current.decode("utf-8").split("\n"):
            out.append(line)
            if line == '  "content": [' or (where == "critical" and line == '  "critical": ['):
                out.append(f'    "{name}",')
        return "\n".join(out).encode("utf-8")

    if isinstance(store, FileStore):

        def edit(current: bytes | None) -> bytes:
            return forge(current or b"")

        with fsio.opened_dir(store.root, "jobs") as jobs:
            lock.change(jobs, job_id + ".json", edit, job_id)
    else:
        # a newer writer's record, as another host would write it
        store.replace_bytes(job_id, forge(store.load_bytes(job_id)))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    out = sys.stdout
    if hasattr(out, "reconfigure"):
        out.reconfigure(encoding="utf-8", newline="\n")
    if args == ["--capabilities"]:
        out.write("store\n")
        return 0
    if args == ["--models"]:
        for name in sorted(MODELS):
            out.write(f"{name} {'critical-ok' if MODELS[name] else 'never-critical'}\n")
        return 0
    if args == ["--refusals"]:
        for word in REFUSALS:
            out.write(word + "\n")
        return 0
    store = None
    if len(args) == 4 and args[0] == "--store":
        store, args = args[1], args[2:]
    if len(args) != 2:
        sys.stderr.write(
            "usage: python -m jobctl.replay --capabilities | --models | --refusals"
            " | [--store PATH-OR-URL] <workdir> <scenario>\n"
        )
        return 2
    workdir, scenario = args
    with open(scenario, encoding="utf-8") as fh:
        lines = fh.read().split("\n")
    driver = Driver(workdir, out, store)
    try:
        driver.run(lines)
    finally:
        driver.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
