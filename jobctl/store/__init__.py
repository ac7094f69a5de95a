"""Stores: the protocol every backend keeps, and the file store that ships."""

from typing import TYPE_CHECKING

from .base import UNSET, Listing, OpenListing, Store
from .file import FileStore, is_orphan

__all__ = ["Store", "Listing", "OpenListing", "FileStore", "UNSET", "is_orphan"]

if TYPE_CHECKING:  # mypy proves the file store keeps the whole protocol
    _file_store_is_a_store: Store = FileStore(".")
