"""The upstream record vectors: every record loads and comes back byte for byte.

``vectors/records`` and ``vectors/failures`` were written by upstream code
(Go, Python, C++). Every one must decode; every one must re-encode exactly with
the *faithful* codec (``encode(rec, rederive=False)``: the lists as read). A
record whose ``content``/``critical`` already equal what derivation gives
(DIGEST §3.7) must also survive the store's own write path, ``encode(rec)``.
``vectors/envelope`` holds the envelope grammar (§3.9) and ``asks.tsv``.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path

import pytest

from jobctl import record
from jobctl.errors import Invalid, UnknownSchema

TERMINAL = "abstraction.job/terminal@1"
BASE = "abstraction.job/base@1"

# The ones known to be derivation-stable (computed from the files and checked
# by hand against §3.7): the rest either predate terminal@1 (four terminal
# records written before the model existed) or spell an empty error.
EXPECTED_STABLE_RECORDS = {
    "new-absolute-backslash-pending.json",
    "new-absolute-no-partial.json",
    "new-cancelled-intent.json",
    "new-complete-leased-terminal.json",
    "new-delegated-running.json",
    "new-relative-pending.json",
    "new-relative-running-checkpoint.json",
    "new-running-ranges-validators.json",
    "new-source-headers.json",
    "new-transferred.json",
}
EXPECTED_STABLE_FAILURES = {
    "cpp-permanent.json",
    "cpp-retryable.json",
    "forged-unknown-field.json",
    "go-permanent.json",
    "go-retryable.json",
    "go-service-cause.json",
    "python-permanent.json",
    "python-retryable.json",
}
# Terminal records written before abstraction.job/terminal@1 existed.
PRE_TERMINAL_MODEL = {"new-cancelled.json", "new-complete-leased.json", "new-complete.json", "new-failed.json"}


def _diff(a: bytes, b: bytes) -> str:
    return "".join(
        difflib.unified_diff(a.decode().splitlines(True), b.decode().splitlines(True), "vector", "re-encoded")
    )


def _derivation_stable(rec: record.Record) -> bool:
    """Whether derivation gives back the record's own lists (§3.7), computed independently of encode."""
    checkpoint = rec.checkpoint_text()
    has_ranges = checkpoint is not None and record.canonical_ranges(checkpoint) is not None
    return record.derive(rec, has_ranges) == (rec.content, rec.critical)


def _explicit_empty_error(data: bytes) -> bool:
    return b'\n  "error": "",\n' in data


def _check_faithful(data: bytes) -> record.Record:
    rec = record.decode(data)
    again = record.encode(rec, rederive=False)
    assert again == data, _diff(data, again)
    return rec


def test_record_vector_round_trips(contract_dir: Path, record_vector: str) -> None:
    _check_faithful((contract_dir / record_vector).read_bytes())


def test_failure_vector_round_trips(contract_dir: Path, failure_vector: str) -> None:
    _check_faithful((contract_dir / failure_vector).read_bytes())


def _stable_set(directory: Path, prefix: str = "") -> set[str]:
    stable = set()
    for path in sorted(directory.glob(prefix + "*.json")):
        data = path.read_bytes()
        rec = record.decode(data)
        if _derivation_stable(rec) and not _explicit_empty_error(data):
            stable.add(path.name)
    return stable


@pytest.mark.parametrize(
    ("folder", "prefix", "expected"),
    [("records", "new-", EXPECTED_STABLE_RECORDS), ("failures", "", EXPECTED_STABLE_FAILURES)],
)
def test_derivation_stable_vectors_survive_the_write_path(
    contract_dir: Path, folder: str, prefix: str, expected: set[str]
) -> None:
    """``encode(rec)`` (derivation on) reproduces every derivation-stable vector exactly."""
    directory = contract_dir / "vectors" / folder
    stable = _stable_set(directory, prefix)
    missing = expected - stable
    assert not missing, f"expected derivation-stable but derive() disagrees: {sorted(missing)}"
    for name in sorted(stable):
        data = (directory / name).read_bytes()
        again = record.encode(record.decode(data))
        assert again == data, f"{name}\n" + _diff(data, again)


def test_pre_terminal_model_records_gain_only_the_terminal_model(contract_dir: Path) -> None:
    """Terminal records from before terminal@1 differ on the write path only by declaring it [JOB-D6]."""
    directory = contract_dir / "vectors" / "records"
    for name in sorted(PRE_TERMINAL_MODEL):
        data = (directory / name).read_bytes()
        rec = record.decode(data)
        assert rec.terminal
        assert TERMINAL not in rec.content
        written = record.encode(rec)
        expected = data.replace(
            f'"content": [\n    "{BASE}"\n  ]'.encode(), f'"content": [\n    "{BASE}",\n    "{TERMINAL}"\n  ]'.encode()
        ).replace(
            f'"critical": [\n    "{BASE}"\n  ]'.encode(),
            f'"critical": [\n    "{BASE}",\n    "{TERMINAL}"\n  ]'.encode(),
        )
        assert expected != data
        assert written == expected, f"{name}\n" + _diff(expected, written)


def test_explicit_empty_error_is_dropped_on_the_write_path(contract_dir: Path) -> None:
    """``"error": ""`` is an empty field spelled out; a writer omits it [JOB-E2] [JOB-E4]."""
    directory = contract_dir / "vectors" / "failures"
    spelled = [p for p in sorted(directory.glob("*.json")) if _explicit_empty_error(p.read_bytes())]
    assert {p.name for p in spelled} >= {"empty-permanent.json", "empty-retryable.json"}
    for path in spelled:
        data = path.read_bytes()
        rec = record.decode(data)
        assert rec.error == ""
        assert record.encode(rec) == data.replace(b'\n  "error": "",\n', b"\n")


def test_vector_ids_are_the_minted_form(contract_dir: Path) -> None:
    for folder in ("records", "failures"):
        for path in (contract_dir / "vectors" / folder).glob("*.json"):
            rec = record.decode(path.read_bytes())
            assert re.fullmatch(r"[0-9]{13}-[0-9a-f]{20}", rec.id), (path.name, rec.id)


# -- envelope ------------------------------------------------------------------------


def test_envelope_accept_vectors_load(contract_dir: Path, accept_vector: str) -> None:
    rec = _check_faithful((contract_dir / accept_vector).read_bytes())
    if rec.envelope is not None:
        assert "abstraction.job/envelope@1" in rec.critical  # [JOB-V5]
        assert record.encode(rec) == (contract_dir / accept_vector).read_bytes()


def test_envelope_invalid_vectors_are_refused(contract_dir: Path, invalid_vector: str) -> None:
    data = (contract_dir / invalid_vector).read_bytes()
    with pytest.raises(Invalid) as info:
        record.decode(data)
    assert not isinstance(info.value, UnknownSchema)


def _ask_rows(contract_dir: Path) -> list[tuple[str, str, list[str], list[str], str]]:
    rows = []
    for line in (contract_dir / "vectors" / "envelope" / "asks.tsv").read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        name, action, schemas, actions, verdict = line.split("\t")
        rows.append(
            (
                name,
                action,
                [] if schemas == "-" else schemas.split(" "),
                [] if actions == "-" else actions.split(" "),
                verdict,
            )
        )
    return rows


def test_asks(contract_dir: Path) -> None:
    rows = _ask_rows(contract_dir)
    assert len(rows) >= 17
    verdicts = {row[-1] for row in rows}
    assert verdicts == {"ok", "invalid", "unknown_schema", "not_supported"}
    wrong = []
    for name, action, schemas, actions, verdict in rows:
        rec = record.decode((contract_dir / "vectors" / "envelope" / name).read_bytes())
        got = record.ask(rec, action, schemas, actions)
        if got != verdict:
            wrong.append(f"{name} {action!r} {schemas} {actions}: want {verdict}, got {got}")
    assert not wrong, "\n".join(wrong)
