"""A job that tries to read its worker's secrets: ``python _snoop.py PREFIX``, run as the job's command.

For its parent (the worker) and each of the parent's children that is a
guardian process, it tries what a job of the same user could: the
environment, the command line, the memory (every readable mapping, through
``/proc/<pid>/mem``), and the open descriptors (listed, their targets named,
and each regular file among them read). It prints one line per try:
``<what> <pid> ok|denied`` and, for ``ok``, every string found that starts
with PREFIX (the secrets start with it; their rest is what the test looks
for in the output). It also reads its own environment, which must work: the
job itself is not sealed.
"""

from __future__ import annotations

import os
import re
import stat
import sys

PREFIX = sys.argv[1].encode()
FOUND = re.compile(re.escape(PREFIX) + rb"[0-9a-f]{4,64}")


def say(what: str, pid: int, result: str, data: bytes = b"") -> None:
    found = sorted({m.decode() for m in FOUND.findall(data)})
    print(what, pid, result, *found, flush=True)


def read(path: str) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


def try_read(what: str, pid: int) -> None:
    try:
        data = read(f"/proc/{pid}/{what}")
    except OSError as exc:
        say(what, pid, f"denied:{exc.errno}")
        return
    say(what, pid, "ok", data)


def try_mem(pid: int) -> None:
    try:
        maps = read(f"/proc/{pid}/maps").decode()
        fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY)
    except OSError as exc:
        say("mem", pid, f"denied:{exc.errno}")
        return
    data = []
    try:
        for line in maps.splitlines():
            span, perms = line.split()[:2]
            if not perms.startswith("r"):
                continue
            lo, hi = (int(x, 16) for x in span.split("-"))
            try:
                data.append(os.pread(fd, min(hi - lo, 64 << 20), lo))
            except OSError:
                pass  # a mapping the kernel will not hand out ([vvar], ...)
    finally:
        os.close(fd)
    say("mem", pid, "ok", b"\n".join(data))


def try_fds(pid: int) -> None:
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError as exc:
        say("fd", pid, f"denied:{exc.errno}")
        return
    data = []
    for name in names:
        path = f"/proc/{pid}/fd/{name}"
        try:
            data.append(os.readlink(path).encode())
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                data.append(os.pread(fd, 1 << 20, 0))
        finally:
            os.close(fd)
    say("fd", pid, "ok", b"\n".join(data))


def children(pid: int) -> list[int]:
    """Every process whose parent is ``pid`` (from each one's world-readable stat)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            text = read(f"/proc/{entry}/stat").decode()
        except OSError:
            continue
        if int(text[text.rindex(")") + 2 :].split()[1]) == pid:
            out.append(int(entry))
    return out


def main() -> None:
    # This job's parent is its worker's guardian, which started it; the worker is the guardian's parent.
    parent = os.getppid()
    stat = read(f"/proc/{parent}/stat").decode()
    worker = int(stat[stat.rindex(")") + 2 :].split()[1])
    guardians = [p for p in children(worker) if b"\0-I\0-S\0-c\0" in read(f"/proc/{p}/cmdline")]
    assert guardians == [parent], (guardians, parent)
    print("guardians", len(guardians), flush=True)
    for pid in [worker, *guardians]:
        role = "worker" if pid == worker else "guardian"
        print("target", role, pid, flush=True)
        try_read("environ", pid)
        try_read("cmdline", pid)
        try_mem(pid)
        try_fds(pid)
    try_read("environ", os.getpid())


if __name__ == "__main__":
    main()
