"""Refusals in the contract's order (DIGEST §5), on both stores, through the library.

For ``update`` and so ``progress``, ``checkpoint`` and ``finish``: terminal
(as read), then a stale epoch, then a lapsed lease, and only then the
mutation's own errors -- a malformed checkpoint, a ``done`` out of range, a
state word that is none. For ``recall``: a blank reason before reading, then
terminal, stale epoch, lapsed lease; for ``set_intent``: the word before
reading, then terminal. Text a PostgreSQL column cannot keep (U+0000) is the
write's own error there, so it comes after the record's verdicts too.

Every case runs on a directory store and a PostgreSQL store, and checks that
the record's bytes did not change.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import jobctl
from jobctl.errors import Invalid, JobError, LeaseExpired, StaleEpoch, Terminal
from jobctl.record import Record
from jobctl.store import Store
from jobctl.wire import JsonText, Raw

NAN = float("nan")

#: Each holder's write with a malformed content, given the job and the epoch it presents.
Write = Callable[[Store, str, int], object]


def _set_checkpoint(value: Any) -> Callable[[Record], None]:
    def put(rec: Record) -> None:
        rec.checkpoint = value

    return put


MALFORMED: dict[str, Write] = {
    "progress: a NaN checkpoint": lambda s, j, e: s.progress(j, e, 1, {"x": NAN}),
    "progress: checkpoint text that is not JSON": lambda s, j, e: s.progress(j, e, 1, JsonText(b'{"a":NaN}')),
    "progress: checkpoint text that is not UTF-8": lambda s, j, e: s.progress(j, e, 1, JsonText(b'"\xff"')),
    "progress: a checkpoint too deep": lambda s, j, e: s.progress(j, e, 1, Raw("[" * 64 + "]" * 64)),
    "progress: ranges backwards": lambda s, j, e: s.progress(j, e, 1, {"verified": [[4, 2]]}),
    "progress: done below zero": lambda s, j, e: s.progress(j, e, -1),
    "progress: done not a number": lambda s, j, e: s.progress(j, e, "7"),  # type: ignore[arg-type]
    "checkpoint: a NaN checkpoint": lambda s, j, e: s.update(j, e, _set_checkpoint({"x": NAN})),
    "checkpoint: text that is not JSON": lambda s, j, e: s.update(
        j, e, _set_checkpoint_text(j, JsonText(b"{", "CHECKPOINT"))
    ),
    "finish: a state word that is none": lambda s, j, e: s.finish(j, e, "done"),
    "finish: a NaN checkpoint": lambda s, j, e: s.finish(j, e, "complete", checkpoint={"x": NAN}),
    "finish: checkpoint text that is not JSON": lambda s, j, e: s.finish(
        j, e, "failed", error="x", checkpoint=JsonText(b"[1,]")
    ),
    "finish: done below zero": lambda s, j, e: s.finish(j, e, "complete", done=-1),
    "finish: an error with U+0000": lambda s, j, e: s.finish(j, e, "failed", error="a\x00b"),
}


def _set_checkpoint_text(job_id: str, text: JsonText) -> Callable[[Record], None]:
    """What ``jobctl checkpoint ID TEXT`` hands ``update``: the text judged inside the mutation."""

    def put(rec: Record) -> None:
        rec.checkpoint = text.raw(job_id)

    return put


def _refused(store: Store, job_id: str, cls: type[JobError], call: Callable[[], object]) -> JobError:
    """``call`` raises exactly ``cls``, and the record's stored bytes are as they were."""
    before = store.load_bytes(job_id)
    with pytest.raises(JobError) as info:
        call()
    assert type(info.value) is cls, f"expected {cls.__name__}, got {type(info.value).__name__}: {info.value}"
    assert info.value.job_id == job_id
    assert store.load_bytes(job_id) == before, f"the {cls.__name__} refusal changed the record"
    return info.value


def _submitted(store: Store) -> str:
    return store.submit(Record(id="", kind="fetch", spec={"url": "x"}))


def _ended(store: Store) -> tuple[str, int]:
    """A job that completed; the epoch its holder had."""
    job_id = _submitted(store)
    epoch = store.claim(job_id, "alpha", 60).lease.epoch
    store.finish(job_id, epoch, "complete")
    return job_id, epoch


def _claimed_since(store: Store) -> tuple[str, int]:
    """A job somebody else claimed after ``alpha``'s lease lapsed; the epoch ``alpha`` had."""
    job_id = _submitted(store)
    epoch = store.claim(job_id, "alpha", 0).lease.epoch
    store.claim(job_id, "beta", 60)
    return job_id, epoch


def _lapsed(store: Store, clock: Any) -> tuple[str, int]:
    """A job whose holder's lease lapsed, nobody having claimed it since; the holder's epoch."""
    job_id = _submitted(store)
    epoch = store.claim(job_id, "alpha", 30).lease.epoch
    clock.advance(31)
    return job_id, epoch


@pytest.mark.parametrize("write", list(MALFORMED), ids=list(MALFORMED))
def test_a_malformed_write_to_an_ended_job_is_terminal(any_store: Store, write: str) -> None:
    job_id, epoch = _ended(any_store)
    _refused(any_store, job_id, Terminal, lambda: MALFORMED[write](any_store, job_id, epoch))


@pytest.mark.parametrize("write", list(MALFORMED), ids=list(MALFORMED))
def test_a_malformed_write_at_a_stale_epoch_is_stale(any_store: Store, write: str) -> None:
    job_id, epoch = _claimed_since(any_store)
    _refused(any_store, job_id, StaleEpoch, lambda: MALFORMED[write](any_store, job_id, epoch))


@pytest.mark.parametrize("write", list(MALFORMED), ids=list(MALFORMED))
def test_a_malformed_write_under_a_lapsed_lease_is_expired(any_store: Store, clock: Any, write: str) -> None:
    job_id, epoch = _lapsed(any_store, clock)
    _refused(any_store, job_id, LeaseExpired, lambda: MALFORMED[write](any_store, job_id, epoch))


@pytest.mark.parametrize("write", [w for w in MALFORMED if "U+0000" not in w])
def test_a_malformed_write_by_the_holder_is_invalid_and_writes_nothing(any_store: Store, write: str) -> None:
    """The content is still judged: once the record's verdicts pass, it is refused, and nothing is written."""
    job_id = _submitted(any_store)
    epoch = any_store.claim(job_id, "alpha", 60).lease.epoch
    _refused(any_store, job_id, Invalid, lambda: MALFORMED[write](any_store, job_id, epoch))


def test_the_refusal_names_the_content_and_the_job(any_store: Store) -> None:
    job_id = _submitted(any_store)
    epoch = any_store.claim(job_id, "alpha", 60).lease.epoch
    exc = _refused(any_store, job_id, Invalid, lambda: any_store.progress(job_id, epoch, 1, JsonText(b"{", "--cp")))
    assert exc.message.startswith(f"job {job_id}: --cp is not JSON: "), exc.message
    exc = _refused(any_store, job_id, Invalid, lambda: any_store.progress(job_id, epoch, 1, JsonText(b"\xff\x01")))
    assert exc.message == f"job {job_id}: checkpoint is not UTF-8 (byte 0)", exc.message


def test_a_malformed_write_to_a_missing_job_is_not_found(any_store: Store) -> None:
    """The record is read before the content is judged: there is none."""
    with pytest.raises(jobctl.NotFound):
        any_store.progress("no-such-job", 1, 1, {"x": NAN})
    with pytest.raises(jobctl.NotFound):
        any_store.finish("no-such-job", 1, "done")


def test_checkpoint_text_that_is_json_is_written_as_spelled(any_store: Store) -> None:
    job_id = _submitted(any_store)
    epoch = any_store.claim(job_id, "alpha", 60).lease.epoch
    rec = any_store.progress(job_id, epoch, 2, JsonText(b'{"n": 1.50, "a\\/b": 1}'))
    assert rec.checkpoint_text() == '{"n":1.50,"a\\/b":1}'
    rec = any_store.finish(job_id, epoch, "complete", checkpoint=JsonText("null"))
    assert rec.checkpoint is None and rec.state == "complete"


# -- what the contract checks before reading stays first ------------------------------------------


def test_recall_blank_reason_is_invalid_before_the_record_is_read(any_store: Store) -> None:
    job_id, epoch = _ended(any_store)
    _refused(any_store, job_id, Invalid, lambda: any_store.recall(job_id, epoch, "  ", "ops", 5))
    with pytest.raises(Invalid):
        any_store.recall("no-such-job", 1, "", "ops", 5)


def test_intent_word_is_invalid_before_the_record_is_read(any_store: Store) -> None:
    job_id, _epoch = _ended(any_store)
    _refused(any_store, job_id, Invalid, lambda: any_store.set_intent(job_id, "halt", "ops"))
    with pytest.raises(Invalid):
        any_store.set_intent("no-such-job", "halt", "ops")


# -- text a PostgreSQL column cannot keep is the write's error: after the record's verdicts ------


def test_intent_by_a_name_with_nul_on_an_ended_job_is_terminal(any_store: Store) -> None:
    job_id, _epoch = _ended(any_store)
    _refused(any_store, job_id, Terminal, lambda: any_store.set_intent(job_id, "pause", "a\x00b"))


@pytest.mark.parametrize("field", ["reason", "by"])
def test_recall_text_with_nul_gets_the_record_verdict_first(any_store: Store, clock: Any, field: str) -> None:
    def recall(job_id: str, epoch: int) -> Callable[[], object]:
        reason, by = ("a\x00b", "ops") if field == "reason" else ("move", "a\x00b")
        return lambda: any_store.recall(job_id, epoch, reason, by, 5)

    job_id, epoch = _ended(any_store)
    _refused(any_store, job_id, Terminal, recall(job_id, epoch))
    job_id, epoch = _claimed_since(any_store)
    _refused(any_store, job_id, StaleEpoch, recall(job_id, epoch))
    job_id, epoch = _lapsed(any_store, clock)
    _refused(any_store, job_id, LeaseExpired, recall(job_id, epoch))
