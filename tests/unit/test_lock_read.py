"""lock.read: the whole file or None, in one call for a record and in a loop past it."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobctl import lock


@pytest.mark.parametrize("size", [0, 1, (1 << 16) - 1, 1 << 16, (1 << 16) + 1, 3 * (1 << 16) + 7])
def test_read_returns_every_byte(tmp_path: Path, size: int) -> None:
    path = tmp_path / "r.json"
    data = bytes(i % 251 for i in range(size))
    path.write_bytes(data)
    assert lock.read(str(path)) == data


def test_missing_is_none_and_empty_is_not_missing(tmp_path: Path) -> None:
    assert lock.read(str(tmp_path / "absent.json")) is None
    (tmp_path / "empty.json").write_bytes(b"")
    assert lock.read(str(tmp_path / "empty.json")) == b""
