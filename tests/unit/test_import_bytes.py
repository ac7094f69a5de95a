"""``import_bytes`` on both stores: odd but valid records come back byte for byte, and what is refused writes nothing.

A record imported into a directory and into a database is exported as the
same bytes (the directory keeps the file; the database renders its columns,
or keeps the bytes verbatim). The refusals: a record over the size limit on
a record (a directory could not read it back), and on PostgreSQL a record
holding U+0000 in a string a text column keeps (docs/reference/postgres.md,
"What differs from a directory"): ``Invalid``, naming the job, never the
driver's error.
"""

from __future__ import annotations

import pytest

import jobctl
from jobctl import fsio
from jobctl.errors import Invalid
from jobctl.store.postgres import PostgresStore

ID = "1788673445494-d76944a8b5a24268cd6d"
BASE = "abstraction.job/base@1"
MAX = 2**63 - 1


def _record(
    *,
    kind: str = "download",
    state: str = "pending",
    content: tuple[str, ...] = (BASE,),
    done: int = 0,
    total: int = 0,
    epoch: int = 0,
    owner: str = "",
    times: str = "2026-09-06T05:44:05.494028Z",
    expires: str = "0001-01-01T00:00:00.000000Z",
    extensions: str = "",
    error: str = "",
) -> bytes:
    """A record as another writer laid it out: ``extensions`` is the text of the member's value."""
    names = ",\n".join(f'    "{name}"' for name in content)
    lines = [
        "{",
        f'  "content": [\n{names}\n  ],',
        f'  "critical": [\n    "{BASE}"' + (',\n    "abstraction.job/terminal@1"' if error else "") + "\n  ],",
        f'  "id": "{ID}",',
        f'  "kind": "{kind}",',
        f'  "state": "{state}",',
        '  "spec": {\n    "a": 1\n  },',
        f'  "progress": {{\n    "done": {done},\n'
        + (f'    "total": {total},\n' if total else "")
        + f'    "updated_at": "{times}"\n  }},',
        f'  "lease": {{\n    "owner": "{owner}",\n    "epoch": {epoch},\n    "expires_at": "{expires}"\n  }},',
    ]
    if error:
        lines.append(f'  "error": "{error}",')
    if extensions:
        lines.append(f'  "extensions": {extensions},')
    lines += [f'  "created_at": "{times}",', f'  "updated_at": "{times}"', "}"]
    return ("\n".join(lines) + "\n").encode()


ESCAPES = r"\"\\\b\t\n\f\r\u0001\u001f" + "\x7f" + r"\u2028\u2029/é😀&<>"
ANY_JSON = (
    '{\n    "a.b/c@1": [\n      1,\n      {\n        "a": null,\n        "b": []\n      },\n'
    '      "s\\/\\u00e9\\u0000",\n'
    '      -0.0,\n      1E+2,\n      123456789012345678901234567890\n    ],\n    "n/null@1": null\n  }'
)
ODD = {
    "numbers at 2^63-1": _record(
        state="running", done=MAX, total=MAX, epoch=MAX, owner="o", expires="2026-09-06T06:44:05.494028Z"
    ),
    "every escape the encoder writes": _record(kind=ESCAPES),
    "an escaped DEL, a pair and an escaped slash": _record(kind=r"a\u007f\ud83d\ude00\/b"),
    "extensions of any JSON": _record(content=(BASE, "a.b/c@1", "n/null@1"), extensions=ANY_JSON),
    "nine fractional digits and an offset": _record(times="2026-09-06T07:44:05.123456789+02:00"),
    "one fractional digit, lower case": _record(times="2026-09-06t05:44:05.1z"),
    "Go's year-one zero instant": _record(times="0001-01-01T00:00:00Z"),
    "a pipeline named with U+0000": _record(
        content=(BASE, "jobctl.run/pipeline@1"),
        extensions='{\n    "jobctl.run/pipeline@1": {\n      "name": "p\\u0000",\n      "stage": "s"\n    }\n  }',
    ),
    "a model nobody knows, advisory": _record(content=(BASE, "abstraction.future/thing@1")),
}


@pytest.mark.parametrize("name", ODD)
def test_an_odd_record_is_imported_and_exported_byte_for_byte(any_store: jobctl.Store, name: str) -> None:
    data = ODD[name]
    assert any_store.import_bytes(data) == ID
    assert any_store.load_bytes(ID) == data
    listed = any_store.list()
    assert [rec.id for rec in listed] == [ID] and not listed.unreadable


def test_a_record_over_the_size_limit_is_refused_and_nothing_written(
    any_store: jobctl.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A directory refuses to read a record over the limit: an import of one would leave it unreadable."""
    data = _record()
    monkeypatch.setenv(fsio.MAX_RECORD_ENV, str(len(data) - 1))
    with pytest.raises(Invalid, match=rf"line 3: the record is {len(data)} bytes, over the {len(data) - 1}-byte limit"):
        any_store.import_bytes(data, ID, "line 3")
    assert any_store.ids() == []
    monkeypatch.setenv(fsio.MAX_RECORD_ENV, str(len(data)))  # at the limit: taken, and read back
    assert any_store.import_bytes(data) == ID
    assert any_store.load_bytes(ID) == data and not any_store.list().unreadable


NUL_IN_TEXT = {
    "kind": _record(kind=r"a\u0000b"),
    "lease.owner": _record(state="running", owner=r"o\u0000", epoch=1, expires="2026-09-06T06:44:05.494028Z"),
    "error": _record(state="failed", content=(BASE, "abstraction.job/terminal@1"), error=r"e\u0000"),
    "content": _record(content=(BASE, r"zz\u0000/q@1")),  # a name nobody knows: the row keeps the list as read
    "the exclusive key (jobctl.run/exclusive@1)": _record(
        content=(BASE, "jobctl.run/exclusive@1"), extensions='{\n    "jobctl.run/exclusive@1": "k\\u0000"\n  }'
    ),
}


@pytest.mark.parametrize("field", NUL_IN_TEXT)
def test_nul_in_text_a_column_keeps_is_invalid_on_postgres_and_kept_on_a_directory(
    any_store: jobctl.Store, field: str
) -> None:
    data = NUL_IN_TEXT[field]
    if not isinstance(any_store, PostgresStore):
        assert any_store.import_bytes(data) == ID and any_store.load_bytes(ID) == data
        return
    with pytest.raises(Invalid) as refused:
        any_store.import_bytes(data)
    assert refused.value.job_id == ID
    assert refused.value.message == f"{field} holds the character U+0000, which a PostgreSQL store cannot keep"
    assert any_store.ids() == []
