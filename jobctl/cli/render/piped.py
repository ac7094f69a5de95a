"""The piped forms: the plain lines of upstream's jobctl, byte for byte, and the versioned JSON shapes."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from ...errors import JobError
from ...record import RESULT, ZERO_TIME, Record, format_time, held, is_zero
from ...store.file import is_orphan
from ...wire import Raw

if TYPE_CHECKING:  # pragma: no cover - typing only; rich is imported where it draws
    from ...summary import Summary


# -- plain lines (upstream's, byte for byte) ----------------------------------


def word(text: str) -> str:
    """A record's own text as one field of a plain line: itself, unless it holds a character that is not printable.

    Other writers may put any string in ``kind``, ``lease.owner`` or
    ``error``; a newline there would make one record two lines to a script
    reading them, and an escape character would talk to the terminal. Each
    such character (a control character, a line or paragraph separator,
    anything :meth:`str.isprintable` refuses) is written as Python spells it
    in a string: ``\\n``, ``\\x1b``, ``\\u2028``. Printable text, every
    conforming value in practice, is written as it is, byte for byte.
    """
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def checkpoint_word(rec: Record) -> str:
    """The checkpoint compact with its spelling kept, or ``none``."""
    text = rec.checkpoint_text()
    return "none" if text is None else text


def claim_line(rec: Record) -> str:
    return f"epoch={rec.lease.epoch} state={rec.state} checkpoint={checkpoint_word(rec)}"


def next_line(rec: Record) -> str:
    """``claim --next``: the claim line with the id it chose in front."""
    return f"{rec.id} {claim_line(rec)}"


def env_line(rec: Record) -> str:
    """``claim --format env``: assignments for ``eval``, each value quoted for sh."""
    import shlex

    # The same value `jobctl run` gives its command (JSON; `null` when there is none).
    text = rec.checkpoint_text()
    checkpoint = "null" if text is None else text
    return (
        f"JOB_ID={shlex.quote(rec.id)} JOB_EPOCH={rec.lease.epoch} "
        f"JOB_KIND={shlex.quote(rec.kind)} JOB_CHECKPOINT={shlex.quote(checkpoint)}"
    )


def progress_line(rec: Record) -> str:
    return f"done={rec.progress.done} checkpoint={checkpoint_word(rec)}"


def state_line(rec: Record) -> str:
    return f"state={rec.state}"


def renew_line(rec: Record) -> str:
    return f"epoch={rec.lease.epoch} expires_at={format_time(rec.lease.expires_at)}"


def list_line(rec: Record) -> str:
    kind = word(rec.kind)
    return f"{rec.id} kind={kind} state={rec.state} done={rec.progress.done} checkpoint={checkpoint_word(rec)}"


def summary_line(summary: Summary) -> str:
    """:func:`list_line` of a finished record known by its summary (jobctl.summary)."""
    checkpoint = "none" if summary.checkpoint is None else summary.checkpoint
    kind = summary.kind if summary.kind.isprintable() else word(summary.kind)
    return f"{summary.id} kind={kind} state={summary.state} done={summary.done} checkpoint={checkpoint}"


def summary_lines(summaries: list[Summary]) -> list[str]:
    """:func:`summary_line` of each of ``summaries``, for a listing of thousands.

    Each distinct kind is judged once, and the fields a line shows are taken
    by position: the same lines, a tenth cheaper (a summary's other fields,
    never touched, cost memory reads that unpacking them all would).
    """
    kinds = {kind: kind if kind.isprintable() else word(kind) for kind in set(map(_KIND, summaries))}
    return [
        f"{s[0]} kind={kinds[s[1]]} state={s[2]} done={s[3]} checkpoint={'none' if s[8] is None else s[8]}"
        for s in summaries
    ]


_KIND = itemgetter(1)  # Summary's fields: id, kind, state, done, ..., checkpoint (8), ...


def orphan_line(rec: Record) -> str:
    return f"{rec.id} kind={word(rec.kind)} state={rec.state} checkpoint={checkpoint_word(rec)}"


def recall_line(rec: Record) -> str:
    """Go's line: the ``until`` instant in RFC 3339, whole seconds, ``Z``."""
    recall = rec.lease.recall
    until = recall.until if recall is not None and recall.until is not None else ZERO_TIME
    return f"{rec.id} recalled until {until:%Y-%m-%dT%H:%M:%SZ}"


def intent_line(rec: Record) -> str:
    return f"{rec.id} {rec.want}"


def cancel_line(rec: Record) -> str:
    return f"{rec.id} {rec.state}"


def watch_line(rec: Record) -> str:
    """One visible change [JOB-N1]: everything a watcher can see of a record; ``error`` last.

    The id is escaped as the record's own text is: a file another writer named ``a\\nb.json``
    lists a record whose id holds a newline (load() refuses such an id; a listing reads it).
    """
    owner = word(rec.lease.owner) or "-"
    line = (
        f"{word(rec.id)} kind={word(rec.kind)} state={rec.state} done={rec.progress.done} total={rec.progress.total}"
        f" owner={owner}"
    )
    return f"{line} error={word(rec.error)}" if rec.error else line


def unreadable_line(unreadable: list[tuple[str, JobError]]) -> str:
    """Go's ErrUnreadable, as upstream's jobctl prints it after the readable records."""
    ids = ", ".join(job_id for job_id, _ in unreadable)
    return f"jobctl: job: {len(unreadable)} record(s) could not be read ({ids}): {unreadable[0][1]}"


# -- JSON -----------------------------------------------------------------------


def _when(value: datetime | None) -> str | None:
    if is_zero(value):
        return None
    return format_time(value)


def _raw(text: str | None) -> Raw | None:
    return None if text is None else Raw(text)


def scheduling(rec: Record, states: Mapping[str, str] | None, now: datetime) -> dict[str, Any]:
    """Attempt, not-before, dependencies, pipeline and why it may not start (jobctl.schedule).

    A malformed extension is shown as such rather than breaking the view of
    every other record.
    """
    from ... import schedule  # only views that show scheduling pay for it
    from ...exclusive import exclusive_of
    from ...priority import priority_of
    from ...submitter import submitter_of
    from ...timeout import timeout_of

    info: dict[str, Any] = {"attempt": 1, "not_before": None, "after": [], "pipeline": None, "stage": None}
    info["submitted_by"] = submitter_of(rec)
    # Pick order and the attempt's limit (jobctl.priority, jobctl.timeout): 0 and null when not set.
    info["priority"] = priority_of(rec)
    info["timeout"] = timeout_of(rec)
    info["exclusive"] = exclusive_of(rec)
    try:
        info["attempt"] = schedule.shown_attempt(rec)
        # An ended job starts no further attempt: a not-before time left over
        # from its last retry would read as a promise of another.
        info["not_before"] = None if rec.terminal else _when(schedule.not_before(rec))
        info["after"] = schedule.after_of(rec)
        pipeline = schedule.pipeline_of(rec)
        if pipeline is not None:
            info["pipeline"], info["stage"] = pipeline[0], pipeline[1] or None
        blocked = ("", "")
        if states is not None and not rec.terminal:
            blocked = schedule.blocked_by(rec, states, now)
        info["blocked"] = {"reason": blocked[0], "detail": blocked[1]} if blocked[0] else None
    except JobError as exc:
        info["blocked"] = {"reason": "invalid", "detail": str(exc)}
    return info


def job_json(
    rec: Record, now: datetime, states: Mapping[str, str] | None = None, long_lease: bool | None = None
) -> dict[str, Any]:
    """The ``job`` shape (v1) of docs/reference/json.md.

    ``long_lease``: whether the lease runs further ahead than ``max_ttl``
    allows (the caller read the setting); None judges by the default.
    """
    lease = rec.lease
    if long_lease is None:
        from ...limits import DEFAULT_MAX_TTL, lease_too_long

        long_lease = lease_too_long(lease.expires_at, now, DEFAULT_MAX_TTL)
    recall = lease.recall
    obj: dict[str, Any] = {
        "id": rec.id,
        "kind": rec.kind,
        "state": rec.state,
        "spec": _raw(rec.opaque_text("spec")),
        "checkpoint": _raw(rec.checkpoint_text()),
        "done": rec.progress.done,
        "total": rec.progress.total,
        "owner": lease.owner,
        "epoch": lease.epoch,
        "expires_at": _when(lease.expires_at),
        "held": live_lease(rec, now),
        "lease_too_long": long_lease,
        "orphan": is_orphan(rec, now),
        "intent": rec.want,
        "recall": None
        if recall is None
        else {"reason": recall.reason, "by": recall.by, "at": _when(recall.at), "until": _when(recall.until)},
        "error": rec.error,
        "requires": list(rec.requires),
        "created_at": _when(rec.created_at),
        "updated_at": _when(rec.updated_at),
    }
    obj.update(scheduling(rec, states, now))
    obj["unhandled"] = None  # judged by show and list, which read what running workers handle (cli/view.py)
    obj["result"] = _raw(rec.opaque_text("x:" + RESULT))
    return obj


def live_lease(rec: Record, now: datetime) -> bool:
    """Whether anybody holds ``rec`` for a reader: never a terminal job [JOB-T1].

    The final write leaves the holder's lease in the record (the bytes are as
    the contract writes them), but nothing can be done under it any more.
    """
    return not rec.terminal and held(rec.lease, now)


def view_rank(rec: Record) -> int:
    """Running (and transferred) jobs first, then pending ones (held included), then ended ones."""
    if rec.terminal:
        return 2
    return 0 if rec.state in ("running", "transferred") else 1


def by_creation(records: Iterable[Record], newest: bool = False) -> list[Record]:
    """Oldest first by creation time, then id (so ``fetch-2`` comes before ``fetch-10`` when it was made first)."""
    recs = sorted(records, key=lambda r: (r.created_at or ZERO_TIME, r.id))
    return recs[::-1] if newest else recs


def view_order(records: Iterable[Record], newest: bool = False) -> list[Record]:
    """Active jobs before ended ones (:func:`view_rank`); each group by creation (:func:`by_creation`)."""
    return sorted(by_creation(records, newest), key=view_rank)  # sorted() is stable: creation order stays
