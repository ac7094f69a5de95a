"""The result a finished run leaves in its record (jobctl.run/result@1)."""

from __future__ import annotations

import pytest

from jobctl import FileStore, Record
from jobctl.errors import Invalid
from jobctl.results import RESULT, RESULT_MAX_BYTES, has_result, parse_result, result_of, set_result


def test_a_result_survives_a_write_and_a_read(tmp_path):
    store = FileStore(str(tmp_path))
    store.submit(Record(id="j1", kind="k", spec={}))
    rec = store.claim("j1", "w", 30)
    store.update("j1", rec.lease.epoch, lambda r: set_result(r, {"chars": 3, "parts": ["a", None]}))
    got = store.load("j1")
    assert has_result(got)
    assert result_of(got) == {"chars": 3, "parts": ["a", None]}
    assert f'"{RESULT}"' in (tmp_path / "jobs" / "j1.json").read_text()


def test_no_result_is_not_a_null_result():
    rec = Record(id="j1", kind="k", spec={})
    assert not has_result(rec) and result_of(rec) is None
    set_result(rec, None)
    assert has_result(rec) and result_of(rec) is None


@pytest.mark.parametrize("value", [float("nan"), {1, 2}, object()])
def test_what_json_cannot_carry_is_refused_naming_the_job(value):
    rec = Record(id="j1", kind="k", spec={})
    with pytest.raises(Invalid) as exc:
        set_result(rec, value)
    assert exc.value.job_id == "j1" and "result is not JSON" in str(exc.value)
    assert not has_result(rec)


def test_parse_result_reads_json_text_and_refuses_the_rest():
    assert parse_result(b'{"a": [1, 2.5, "x"]}') == {"a": [1, 2.5, "x"]}
    for bad in (b"{", b"NaN", b"\xff", b"[Infinity]"):
        with pytest.raises(Invalid):
            parse_result(bad, "j1")
    with pytest.raises(Invalid, match="larger than"):
        parse_result(b'"' + b"x" * RESULT_MAX_BYTES + b'"', "j1")
