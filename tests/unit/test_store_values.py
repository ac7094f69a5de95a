"""The store's small immutable values (``jobctl.store.base.Value``): what ``@dataclass(frozen=True)`` gave them.

They are written out so that importing a store costs no ``dataclasses``
(start-up: tests/cli/test_cli_startup.py); these tests hold them to the
behaviour they had as frozen dataclasses.
"""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from jobctl.store.base import UNSET, Announcement, RowLease, Value
from jobctl.store.contract import NO_CONTENT, Content, content

WHEN = datetime(2025, 1, 2, 3, 4, 5, tzinfo=timezone.utc)


def test_equal_by_fields_and_class_hashable_and_shown_by_fields() -> None:
    lease = RowLease("postgresql://h/db", "j1", "SELECT 1")
    assert lease == RowLease("postgresql://h/db", "j1", "SELECT 1")
    assert lease != RowLease("postgresql://h/db", "j2", "SELECT 1")
    assert lease != ("postgresql://h/db", "j1", "SELECT 1")  # not a tuple
    assert len({lease, RowLease("postgresql://h/db", "j1", "SELECT 1")}) == 1
    assert repr(lease) == "RowLease(url='postgresql://h/db', job_id='j1', query='SELECT 1')"
    told = Announcement("w1", frozenset({"fetch"}), WHEN)
    assert (told.owner, told.kinds, told.expires_at) == ("w1", frozenset({"fetch"}), WHEN)
    assert told == Announcement("w1", frozenset({"fetch"}), WHEN)
    assert hash(told) == hash(Announcement("w1", frozenset({"fetch"}), WHEN))
    assert repr(told).startswith("Announcement(owner='w1', kinds=frozenset({'fetch'}), expires_at=datetime.datetime(")


def test_a_value_of_another_class_with_the_same_fields_is_not_equal() -> None:
    class Other(Value):
        __slots__ = ("url", "job_id", "query")

        def __init__(self, url: str, job_id: str, query: str) -> None:
            self._init(url, job_id, query)

    assert RowLease("u", "j", "q") != Other("u", "j", "q")
    assert Other("u", "j", "q") == Other("u", "j", "q")


@pytest.mark.parametrize("value", [RowLease("u", "j", "q"), Announcement("w", frozenset(), WHEN), NO_CONTENT])
def test_fields_cannot_be_changed_or_removed_or_added(value: Value) -> None:
    name = value.__slots__[0]
    before = getattr(value, name)
    with pytest.raises(AttributeError, match=f"cannot assign to field '{name}'"):
        setattr(value, name, "changed")
    with pytest.raises(AttributeError, match=f"cannot delete field '{name}'"):
        delattr(value, name)
    with pytest.raises(AttributeError):
        value.extra = 1  # type: ignore[attr-defined]  # what the test proves cannot be done
    assert getattr(value, name) == before


def test_each_field_is_given_once() -> None:
    with pytest.raises(TypeError):
        RowLease("u", "j")  # type: ignore[call-arg]  # what the test proves is refused
    with pytest.raises(ValueError):
        RowLease._init(object.__new__(RowLease), "u", "j")  # the helper refuses a short list too


def test_content_defaults_keywords_and_verdict() -> None:
    assert (NO_CONTENT.done, NO_CONTENT.checkpoint, NO_CONTENT.ranged, NO_CONTENT.refusal) == (None, UNSET, False, "")
    assert Content(refusal="bad") == Content(None, UNSET, False, "bad")
    assert content("j1", done=3) == Content(3, UNSET, False, "")
    refused = content("j1", done=-1)
    assert refused.refusal and refused.done is None
    with pytest.raises(Exception, match="done") as caught:
        refused.judged("j1")
    assert getattr(caught.value, "verdict", None) == "invalid"
    NO_CONTENT.judged("j1")  # nothing to refuse
