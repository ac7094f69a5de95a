"""lock.read: the whole file or None, in one call for a record and in a loop past it."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobctl import fsio, lock


@pytest.mark.parametrize("size", [0, 1, (1 << 16) - 1, 1 << 16, (1 << 16) + 1, 3 * (1 << 16) + 7])
def test_read_returns_every_byte(tmp_path: Path, size: int) -> None:
    path = tmp_path / "r.json"
    data = bytes(i % 251 for i in range(size))
    path.write_bytes(data)
    with fsio.opened_dir(str(tmp_path)) as at:
        assert lock.read(at, "r.json") == data


def test_missing_is_none_and_empty_is_not_missing(tmp_path: Path) -> None:
    (tmp_path / "empty.json").write_bytes(b"")
    with fsio.opened_dir(str(tmp_path)) as at:
        assert lock.read(at, "absent.json") is None
        assert lock.read(at, "empty.json") == b""
