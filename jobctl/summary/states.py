"""Every record's state, the finished ones' filled in from the cache only when a look-up needs them."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any


class States(dict[str, str]):
    """Every record's state, the finished ones' taken from the cache only when a look-up needs them.

    ``orphans`` never looks at a finished record's state, and ``claim --next``
    only at those its open jobs wait for: building a dict of 100,000 states
    would cost more than the rest of the call. The states set directly (the
    records read now) always win over the cache's. Every reading method
    fills the dict first, so it answers exactly as the filled dict would.
    """

    __slots__ = ("_fill",)

    def __init__(self, fill: Callable[[], dict[str, str]] | None = None) -> None:
        super().__init__()
        self._fill = fill

    def later(self, more: Callable[[], dict[str, str]]) -> None:
        """Fill in ``more()`` too when a look-up first needs it (the states set directly still win).

        For the states of records read now that nobody may ask for: a shared
        cold listing's finished records, whose pieces' summaries hold them.
        """
        earlier = self._fill

        def fill() -> dict[str, str]:
            got = {} if earlier is None else earlier()
            got.update(more())
            return got

        self._fill = fill

    def _load(self) -> None:
        fill = self._fill
        if fill is not None:
            self._fill = None
            read_now = dict(self.items())
            dict.update(self, fill())
            dict.update(self, read_now)

    def get(self, key: str, default: Any = None) -> Any:
        if self._fill is not None and not dict.__contains__(self, key):
            self._load()
        return dict.get(self, key, default)

    def __getitem__(self, key: str) -> str:
        if self._fill is not None and not dict.__contains__(self, key):
            self._load()
        return dict.__getitem__(self, key)

    def __contains__(self, key: object) -> bool:
        if self._fill is not None and not dict.__contains__(self, key):
            self._load()
        return dict.__contains__(self, key)

    def __iter__(self) -> Iterator[str]:
        self._load()
        return dict.__iter__(self)

    def __len__(self) -> int:
        self._load()
        return dict.__len__(self)

    def __eq__(self, other: object) -> bool:
        self._load()
        if isinstance(other, States):
            other._load()
        return dict.__eq__(self, other)

    __hash__ = None  # a dict is unhashable; defining __eq__ says so again

    def __repr__(self) -> str:
        self._load()
        return dict.__repr__(self)

    def keys(self) -> Any:
        self._load()
        return dict.keys(self)

    def values(self) -> Any:
        self._load()
        return dict.values(self)

    def items(self) -> Any:
        if self._fill is not None:
            self._load()
        return dict.items(self)

    def copy(self) -> dict[str, str]:
        self._load()
        return dict(dict.items(self))

    def pop(self, key: str, *default: Any) -> Any:
        self._load()
        return dict.pop(self, key, *default)

    def popitem(self) -> tuple[str, str]:
        self._load()
        return dict.popitem(self)

    def setdefault(self, key: str, default: Any = None) -> Any:
        self._load()
        return dict.setdefault(self, key, default)

    def __delitem__(self, key: str) -> None:
        self._load()
        dict.__delitem__(self, key)

    def clear(self) -> None:
        self._fill = None
        dict.clear(self)

    def __reduce__(self) -> Any:
        self._load()
        return (dict, (dict(dict.items(self)),))
